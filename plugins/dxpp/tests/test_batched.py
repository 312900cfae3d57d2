"""The batched torch forward (``solver="torch"``): the same solutions, gradients and errors as
the per-problem path, on batches with both constraint blocks, one of them, shared inputs,
degenerate and infeasible members, and across warm-started calls."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from icml_dxpp import DXPPQPLayer, QPInputError, QPSolveError, differentiate, dxpp_solve
from icml_dxpp.benchmark import rel_error
from icml_dxpp.forward import solve_qp
from icml_dxpp.problems import random_qp
from icml_dxpp.qp import make_problem

_NAMES = ("Q", "q", "G", "h", "A", "b")


def _batch(B, n, m=None, p=None, seed=0):
    known = [random_qp(n, m=m, p=p, seed=seed + i) for i in range(B)]
    data = {k: torch.tensor(np.stack([getattr(kq.problem, k) for kq in known]))
            for k in _NAMES}
    return known, data


def _run(data, gbar, keys=_NAMES, **options):
    ins = {k: data[k].clone().requires_grad_() for k in keys}
    args = [ins.get(k) for k in _NAMES]
    x, mu, nu = dxpp_solve(*args, **options)
    ((x * gbar).sum() + (nu * 0.3).sum() + (mu * 0.1).sum()).backward()
    return x.detach(), nu.detach(), mu.detach(), {k: t.grad for k, t in ins.items()}


@pytest.mark.parametrize("m,p", [(None, None), (20, 0), (0, 5)])
def test_torch_solver_equals_the_per_problem_path_and_the_kkt_reference(m, p):
    """Solutions within 1e-9 of the known exact solution and of the per-problem default path;
    all six gradients (x and both duals upstream) within 1e-6 of the per-problem dXPP backward
    and within dXPP's 1e-5 of the reduced-KKT reference, as for the single path."""
    known, data = _batch(12, 20, m=m, p=p)
    keys = [k for k in _NAMES if data[k].shape[-1] or k in "Qq"]
    keys = [k for k in keys if not (k in "Gh" and m == 0) and not (k in "Ab" and p == 0)]
    gbar = torch.tensor(np.random.default_rng(0).standard_normal((12, 20)))
    x_t, nu_t, mu_t, g_t = _run(data, gbar, keys, solver="torch")
    x_a, nu_a, mu_a, g_a = _run(data, gbar, keys, solver="auto")
    x_k, _, _, g_k = _run(data, gbar, keys, solver="auto", backward="kkt")
    exact = torch.tensor(np.stack([kq.x for kq in known]))
    torch.testing.assert_close(x_t, exact, atol=1e-9, rtol=0)
    torch.testing.assert_close(x_t, x_a, atol=1e-9, rtol=0)
    torch.testing.assert_close(nu_t, nu_a, atol=1e-8, rtol=0)
    torch.testing.assert_close(mu_t, mu_a, atol=1e-8, rtol=0)
    for k in keys:
        assert torch.linalg.norm(g_t[k] - g_a[k]) <= 1e-6 * torch.linalg.norm(g_a[k]), k
    num = sum(float(torch.sum((g_t[k] - g_k[k]) ** 2)) for k in keys)
    den = sum(float(torch.sum(g_k[k] ** 2)) for k in keys)
    assert np.sqrt(num / den) <= 1e-5  # dXPP vs the reduced KKT, as test_gradients
    torch.testing.assert_close(x_k, x_a, atol=0, rtol=0)


def test_shared_inputs_broadcast_and_sum_like_the_per_problem_path():
    """Q, G, A shared by the batch (unbatched tensors), q, h, b batched: gradients of the shared
    inputs are summed over the batch, as on the per-problem path; float32 keeps its dtype."""
    base = random_qp(15, seed=3).problem
    rng = np.random.default_rng(1)
    B = 6
    data = {"Q": torch.tensor(base.Q), "G": torch.tensor(base.G), "A": torch.tensor(base.A),
            "q": torch.tensor(base.q + 0.1 * rng.standard_normal((B, 15))),
            "h": torch.tensor(base.h + 0.05 * rng.standard_normal((B, base.m))),
            "b": torch.tensor(np.tile(base.b, (B, 1)))}
    gbar = torch.tensor(rng.standard_normal((B, 15)))
    x_t, _, _, g_t = _run(data, gbar, solver="torch")
    x_a, _, _, g_a = _run(data, gbar, solver="auto")
    torch.testing.assert_close(x_t, x_a, atol=1e-9, rtol=0)
    for k in _NAMES:
        assert g_t[k].shape == data[k].shape
        assert torch.linalg.norm(g_t[k] - g_a[k]) <= 1e-6 * torch.linalg.norm(g_a[k]), k
    d32 = {k: v.float() for k, v in data.items()}
    x32 = dxpp_solve(*[d32[k] for k in _NAMES], solver="torch").x
    assert x32.dtype == torch.float32
    torch.testing.assert_close(x32.double(), x_t, atol=1e-5, rtol=0)


def test_degenerate_members_fall_back_per_problem_with_the_same_solution():
    """A duplicated active row (LICQ fails: the batched polish cannot factor it) and a problem
    the interior point is given one iteration for both go to the per-problem path; the batch's
    solutions equal the per-problem path's, and the layer says which path each took."""
    known, data = _batch(4, 10, seed=7)
    prob = known[1].problem
    i = int(np.flatnonzero(known[1].ineq_dual > 0)[0])  # an active row, duplicated
    G1 = np.vstack([prob.G, prob.G[i]])
    h1 = np.append(prob.h, prob.h[i])
    G = torch.cat([data["G"], data["G"][:, :1]], 1)
    h = torch.cat([data["h"], data["h"][:, :1] + 10.0], 1)  # an inactive extra row elsewhere
    G[1], h[1] = torch.tensor(G1), torch.tensor(h1)
    data = {**data, "G": G, "h": h}
    layer = DXPPQPLayer(solver="torch", warm_start=True)
    x = layer(*[data[k] for k in _NAMES]).x
    paths = layer.options.cache["paths"]
    assert paths[1].startswith("torch -> ") and paths[0] == "torch", paths
    ref = dxpp_solve(*[data[k] for k in _NAMES], solver="auto").x
    torch.testing.assert_close(x, ref, atol=1e-9, rtol=0)
    layer = DXPPQPLayer(solver="torch", warm_start=True, solver_options={"max_iter": 1})
    x1 = layer(*[data[k] for k in _NAMES]).x
    assert all(p.startswith("torch -> ") for p in layer.options.cache["paths"])
    torch.testing.assert_close(x1, ref, atol=1e-9, rtol=0)


def test_infeasible_and_bad_inputs_raise_the_per_problem_errors():
    """The same errors, naming the same batch index, as the per-problem path."""
    good = random_qp(3, seed=0).problem
    Q = torch.tensor(np.stack([good.Q, good.Q, np.diag([1.0, -1.0, 1.0])]))
    q = torch.tensor(np.stack([good.q] * 3))
    for solver in ("auto", "torch"):
        with pytest.raises(QPInputError, match="QP #2 in the batch: Q is indefinite"):
            dxpp_solve(Q, q, torch.tensor(good.G), torch.tensor(good.h), solver=solver)
        qn = q.clone()
        qn[1, 0] = float("nan")
        with pytest.raises(QPInputError, match="QP #1 in the batch: q contains NaN"):
            dxpp_solve(Q[:2], qn[:2], torch.tensor(good.G), torch.tensor(good.h),
                       solver=solver)
        Qa = Q[:2].clone()
        Qa[0, 0, 1] += 1.0
        with pytest.raises(QPInputError, match="QP #0 in the batch: Q is not symmetric"):
            dxpp_solve(Qa, q[:2], torch.tensor(good.G), torch.tensor(good.h), solver=solver)
        G = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)  # |x0| <= h
        h = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [1.0, 1.0]], dtype=torch.float64)
        with pytest.raises(QPSolveError, match="QP #1 in the batch: .*infeasible"):
            dxpp_solve(torch.eye(2, dtype=torch.float64), torch.ones(3, 2, dtype=torch.float64),
                       G, h, solver=solver)
    with pytest.raises(QPInputError, match="solver_options.*'tol'.*not options of solver "
                                           "'torch'.*max_iter"):
        DXPPQPLayer(solver="torch", solver_options={"tol": 1e-3})
    with pytest.raises(QPInputError, match="max_iter: got 0"):
        DXPPQPLayer(solver="torch", solver_options={"max_iter": 0})
    with pytest.raises(QPInputError, match="takes dense"):
        dxpp_solve(torch.eye(2, dtype=torch.float64).to_sparse(),
                   torch.ones(2, dtype=torch.float64), solver="torch")


def test_warm_start_skips_the_interior_point_and_gives_the_cold_solution():
    """Second call with the same active sets: every problem is solved by the verified warm KKT
    solve (no interior point); a step that changes active sets runs the interior point for the
    changed problems only. Solutions equal a cold layer's."""
    _, data = _batch(8, 20, seed=11)
    args = [data[k] for k in _NAMES]
    warm = DXPPQPLayer(solver="torch", warm_start=True)
    cold = DXPPQPLayer(solver="torch")
    warm(*args)
    assert set(warm.options.cache["paths"]) == {"torch"}
    q2 = data["q"] + 1e-3
    args2 = [q2 if k == "q" else data[k] for k in _NAMES]
    x_w = warm(*args2).x
    assert set(warm.options.cache["paths"]) == {"torch:warm"}
    torch.testing.assert_close(x_w, cold(*args2).x, atol=1e-10, rtol=0)
    q3 = data["q"].clone()
    q3[0] += 5.0  # the first problem's active set changes
    args3 = [q3 if k == "q" else data[k] for k in _NAMES]
    x_w3 = warm(*args3).x
    assert warm.options.cache["paths"][0] == "torch"
    assert warm.options.cache["paths"][1:] == ["torch:warm"] * 7
    torch.testing.assert_close(x_w3, cold(*args3).x, atol=1e-10, rtol=0)


def test_numpy_path_and_job_config_take_the_torch_solver():
    """``solve_qp``/``differentiate`` with ``solver="torch"`` (a batch of one) give the default
    path's solution and gradients; the jobs' ``solver`` key accepts it; sparse is refused."""
    from icml_dxpp.config import DifferentiateConfig, EvaluateConfig
    from icml_dxpp.problems import simplex_projection

    known = random_qp(30, seed=4)
    g = np.random.default_rng(2).standard_normal(30)
    sol_t, grads_t, _ = differentiate(known.problem, g, solver="torch")
    sol_a, grads_a, _ = differentiate(known.problem, g, solver="auto")
    assert sol_t.extras["path"] == "torch"
    np.testing.assert_allclose(sol_t.x, known.x, atol=1e-9)
    assert rel_error(grads_t, grads_a) <= 1e-6  # as auto vs clarabel (test_defaults)
    assert DifferentiateConfig(solver="torch").solver == "torch"
    assert EvaluateConfig(solver="torch").solver == "torch"
    with pytest.raises(QPInputError, match="takes dense problems"):
        solve_qp(simplex_projection(50), "torch")
    # a QP the interior point cannot finish in one iteration: the default path's point
    res = solve_qp(known.problem, "torch", options={"max_iter": 1})
    assert res.extras["path"].startswith("torch -> ")
    np.testing.assert_allclose(res.x, known.x, atol=1e-9)
    unb = make_problem(np.zeros((2, 2)), np.array([-1.0, 0.0]), np.array([[0.0, 1.0]]),
                       np.array([1.0]))
    with pytest.raises(QPSolveError, match="unbounded"):
        solve_qp(unb, "torch")


def test_batch_benchmark_writes_its_results_file(tmp_path, monkeypatch):
    """benchmarks/batch.py on a tiny batch (no peers): the table and its timing columns."""
    import json
    from pathlib import Path

    from icml.testing import load_script

    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    mod = load_script(bench / "batch.py", "dxpp_batch_bench")
    out = tmp_path / "batch.json"
    assert mod.main(["--sizes", "3x6", "--repeats", "1", "--out-results", str(out)]) == 0
    data = json.loads(out.read_text())
    (table,) = data["tables"]
    arms = [row[4] for row in table["rows"]]
    assert arms[:3] == ["dXPP torch", "dXPP torch warm", "dXPP auto (per problem)"]
    assert data["tolerance"]["total ms"]["timing"] is True
    for row in table["rows"][:3]:
        assert row[10] <= 1e-9  # the same solution as the per-problem forward
