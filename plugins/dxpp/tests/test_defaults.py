"""The paper's defaults: ρ = c‖dual‖₁ (no floor) and ``auto`` reaching CG by size."""

from __future__ import annotations

import warnings

import numpy as np
from icml_dxpp import differentiate, solve_qp
from icml_dxpp.benchmark import rel_error
from icml_dxpp.forward import QPResult
from icml_dxpp.problems import chain_projection, simplex_projection
from icml_dxpp.qp import make_problem


def _zero_equality_duals(seed=0, n=20, m=20, p=4, k=8):
    """A QP whose equality rows hold at the optimum with μ* = 0 exactly (x* constructed)."""
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((n, 2 * n))
    Q = M @ M.T / (2 * n) + 1e-3 * np.eye(n)
    G, A = rng.standard_normal((m, n)), rng.standard_normal((p, n))
    x = rng.standard_normal(n)
    nu = np.zeros(m)
    nu[:k] = 0.5 + rng.random(k)
    slack = np.r_[np.zeros(k), 0.5 + rng.random(m - k)]
    prob = make_problem(Q, -(Q @ x + G.T @ nu), G, G @ x + slack, A, A @ x)
    return prob, QPResult(x, eq_dual=np.zeros(p), ineq_dual=nu, solver="constructed")


def test_paper_rho_rule_drops_a_zero_dual_block_and_the_guard_keeps_it():
    """The trade-off behind ``rho_min`` and the zero-dual guard: with ρ_E = c‖μ*‖₁ = 0 (the
    paper, unguarded) the equality block leaves the backward, x may move off Ax = b and ∂b is
    0 (94% off); the default guard (and ``rho_min=1``) match the KKT."""
    prob, sol = _zero_equality_duals()
    g = np.random.default_rng(1).standard_normal(prob.n)
    ref = differentiate(prob, g, solution=sol, method="kkt")[1]
    paper = differentiate(prob, g, solution=sol, zero_dual_guard=None)[1]
    floored = differentiate(prob, g, solution=sol, rho_min=1.0, zero_dual_guard=None)[1]
    guarded, info = differentiate(prob, g, solution=sol)[1:]
    assert info["rho_guard"] == ("eq",)
    assert rel_error(guarded, ref) < 1e-5
    assert rel_error(floored, ref) < 1e-5
    assert rel_error(paper, ref) > 1e-2
    assert np.all(paper["b"] == 0) and np.abs(ref["b"]).max() > 1e-2


def test_zero_dual_guard_leaves_the_paper_rule_alone_where_duals_are_not_zero():
    """Small but genuine duals (Q scaled by 0.01, duals ~0.01) and ordinary ones: the guard
    does not fire and the gradients are bit-for-bit the paper's rule."""
    import torch
    from icml_dxpp import dxpp_solve
    from icml_dxpp.problems import random_qp

    rng = np.random.default_rng(7)
    n, m, p, k = 24, 24, 5, 9
    M = rng.standard_normal((n, 6))
    Q = 0.01 * M @ M.T / 6
    G, A = rng.standard_normal((m, n)) / np.sqrt(n), rng.standard_normal((p, n)) / np.sqrt(n)
    x = rng.standard_normal(n)
    nu = np.zeros(m)
    nu[:k] = 0.01 * (0.5 + rng.random(k))
    mu = 0.01 * rng.standard_normal(p)
    slack = np.r_[np.zeros(k), 0.5 + rng.random(m - k)]
    small = make_problem(Q, -(Q @ x + G.T @ nu + A.T @ mu), G, G @ x + slack, A, A @ x,
                         check=False)
    small_sol = QPResult(x, eq_dual=mu, ineq_dual=nu, solver="constructed")
    ordinary = random_qp(30, seed=3).problem
    for prob, sol in ((small, small_sol), (ordinary, None)):
        g = rng.standard_normal(prob.n)
        sol_, guarded, info = differentiate(prob, g, solution=sol)
        paper = differentiate(prob, g, solution=sol_, zero_dual_guard=None)[1]
        assert info["rho_guard"] == ()
        for key in guarded:
            np.testing.assert_array_equal(guarded[key], paper[key])
    # the batched torch backward applies the same guard: zero equality duals, batch of 2
    probs = [_zero_equality_duals(seed=s) for s in (0, 1)]
    g = torch.tensor(rng.standard_normal((2, probs[0][0].n)))
    refs = [differentiate(pr, g[i].numpy(), solution=so, method="kkt")[1]
            for i, (pr, so) in enumerate(probs)]
    Qb, qb, Gb, hb, Ab, bb = (torch.tensor(np.stack([getattr(pr, k) for pr, _ in probs]),
                                           requires_grad=True) for k in "QqGhAb")
    (dxpp_solve(Qb, qb, Gb, hb, Ab, bb, linear_solver="batched").x * g).sum().backward()
    for i in range(2):
        got = np.concatenate([qb.grad[i].numpy(), hb.grad[i].numpy(), bb.grad[i].numpy()])
        want = np.concatenate([refs[i]["q"], refs[i]["h"], refs[i]["b"]])
        assert np.linalg.norm(got - want) < 1e-5 * np.linalg.norm(want)


def test_auto_uses_cg_by_size_on_the_simplex():
    prob = simplex_projection(3000, seed=0)
    sol = solve_qp(prob, "clarabel")
    g = np.random.default_rng(2).standard_normal(prob.n)
    direct, i_direct = differentiate(prob, g, solution=sol, cg_min_n=None)[1:]
    small, i_small = differentiate(prob, g, solution=sol, cg_min_n=10_000)[1:]
    big, i_big = differentiate(prob, g, solution=sol, cg_min_n=1000)[1:]
    assert i_direct["linear_solver"] == i_small["linear_solver"] == "sparse"
    assert i_big["linear_solver"] == "auto:cg"
    assert rel_error(big, direct) < 1e-6


def test_auto_cg_falls_back_silently_to_the_direct_solve_when_it_stalls():
    """On the stiff chain system CG does not reach its tolerance: under ``auto`` the direct
    solve takes over without a warning and the gradient is the direct one."""
    prob = chain_projection(2, N=100, seed=0)
    sol = solve_qp(prob, "clarabel")
    g = np.random.default_rng(3).standard_normal(prob.n)
    direct = differentiate(prob, g, solution=sol, cg_min_n=None)[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, info = differentiate(prob, g, solution=sol, cg_min_n=10, cg_maxiter=5)[1:]
    assert info["linear_solver"] == "auto:cg->direct" and info["cg_residual"] > 1e-7
    assert rel_error(got, direct) < 1e-10


def test_default_auto_forward_is_piqp_polished_and_matches_clarabel():
    """The default forward (``solver="auto"``): piqp + a verified active-set polish wherever Q
    is known PSD (dense; sparse and diagonally dominant), clarabel otherwise; its gradients
    equal those at clarabel's 1e-12 point."""
    import pytest
    import qpsolvers
    import scipy.sparse as sp
    from icml_dxpp.forward import resolve_solver
    from icml_dxpp.problems import random_qp

    if "piqp" not in qpsolvers.available_solvers:
        pytest.skip("needs piqp: pip install -e 'plugins/dxpp[test]'")
    simplex = simplex_projection(200, seed=0)
    chain = chain_projection(2, N=20, seed=0)
    assert resolve_solver("auto", sparse=False) == "piqp"
    assert resolve_solver("auto", sparse=True, Q=simplex.Q) == "piqp"
    assert resolve_solver("auto", sparse=True, Q=chain.Q) == "piqp"
    indefinite = sp.csr_matrix(np.array([[1.0, 2.0], [2.0, 1.0]]))
    assert resolve_solver("auto", sparse=True, Q=indefinite) == "clarabel"
    assert resolve_solver("auto", sparse=True) == "clarabel"  # Q unknown
    for prob in (random_qp(40, seed=5).problem, simplex, chain):
        g = np.random.default_rng(4).standard_normal(prob.n)
        fast_sol, fast, _ = differentiate(prob, g)
        ref_sol, ref, _ = differentiate(prob, g, solver="clarabel")
        assert fast_sol.extras["path"] == "piqp+polish" and ref_sol.solver == "clarabel"
        assert np.abs(fast_sol.x - ref_sol.x).max() < 1e-9
        assert rel_error(fast, ref) < 1e-6


def test_polish_rejects_a_wrong_active_set_and_auto_falls_back_to_clarabel():
    """polish() keeps a point only if it verifies as a KKT point: a wrong active set is
    refused; when piqp's polished point cannot be verified the default runs clarabel."""
    from icml_dxpp.forward import polish
    from icml_dxpp.problems import random_qp

    prob = random_qp(30, seed=2).problem
    sol = solve_qp(prob, "clarabel")
    act = np.flatnonzero(sol.ineq_dual > 1e-6)
    assert act.size > 1
    right = polish(prob, None, None, None, active=act)
    assert right is not None and np.abs(right[0] - sol.x).max() < 1e-8
    assert polish(prob, None, None, None, active=act[1:]) is None  # a binding row dropped
    inactive = np.setdiff1d(np.arange(prob.m), act)[:1]
    assert polish(prob, None, None, None, active=np.r_[act, inactive]) is None
    assert solve_qp(prob).extras["path"] == "piqp+polish"
    import icml_dxpp.forward as fw

    # a polish that never verifies: the default must then take clarabel's point
    orig = fw.polish
    try:
        fw.polish = lambda *a, **k: None
        res = solve_qp(prob)
    finally:
        fw.polish = orig
    assert res.extras["path"].startswith("clarabel (fallback") and res.solver == "clarabel"
    assert np.abs(res.x - sol.x).max() < 1e-9


def test_batched_torch_sparse_inputs_match_one_by_one():
    import torch
    from icml_dxpp import dxpp_solve

    probs = [simplex_projection(60, seed=s) for s in (0, 1)]

    def coo(M):
        c = M.tocoo()
        return torch.sparse_coo_tensor(np.vstack([c.row, c.col]), c.data, c.shape,
                                       dtype=torch.float64, check_invariants=False)

    def dense(v):
        return torch.tensor(np.asarray(v), dtype=torch.float64)

    Qb = torch.stack([coo(p.Q) for p in probs]).coalesce().requires_grad_()
    Gb = torch.stack([coo(p.G) for p in probs]).coalesce().requires_grad_()
    Ab = torch.stack([coo(p.A) for p in probs]).coalesce().requires_grad_()
    qb, hb, bb = (torch.stack([dense(getattr(p, k)) for p in probs]).requires_grad_()
                  for k in "qhb")
    w = torch.tensor(np.random.default_rng(0).standard_normal((2, 60)))
    (dxpp_solve(Qb, qb, Gb, hb, Ab, bb).x * w).sum().backward()
    assert Gb.grad.is_sparse and Gb.grad.shape == Gb.shape
    for i, p in enumerate(probs):
        Q1, G1, A1 = (coo(M).requires_grad_() for M in (p.Q, p.G, p.A))
        q1, h1, b1 = (dense(v).requires_grad_() for v in (p.q, p.h, p.b))
        (dxpp_solve(Q1, q1, G1, h1, A1, b1).x * w[i]).sum().backward()
        torch.testing.assert_close(qb.grad[i], q1.grad)
        torch.testing.assert_close(hb.grad[i], h1.grad)
        torch.testing.assert_close(Gb.grad[i].to_dense(), G1.grad.to_dense())
        torch.testing.assert_close(Ab.grad[i].to_dense(), A1.grad.to_dense())


def test_warm_start_reuses_the_active_set_and_gives_the_cold_solution():
    """``warm_start=True``: a second call on a slightly moved q takes the previous active set
    (verified, no solver run) and returns the cold layer's x and gradients; a large move
    changes the active set, the check fails and the solver runs."""
    import torch
    from icml_dxpp import DXPPQPLayer
    from icml_dxpp.problems import random_qp

    prob = random_qp(40, seed=5).problem
    T = {k: torch.tensor(np.asarray(getattr(prob, k))).unsqueeze(0) for k in "QqGhAb"}
    warm, cold = DXPPQPLayer(warm_start=True), DXPPQPLayer()
    warm(*(T[k] for k in "QqGhAb"))
    assert warm.options.cache["paths"][0] != "warm"
    rng = np.random.default_rng(3)
    for eps, path in ((1e-4, "warm"), (5.0, "piqp+polish")):
        q = (T["q"] + eps * torch.tensor(rng.standard_normal(prob.n))).requires_grad_()
        outs = []
        for layer in (warm, cold):
            qq = q.detach().clone().requires_grad_()
            x = layer(T["Q"], qq, T["G"], T["h"], T["A"], T["b"]).x
            (x * torch.arange(prob.n)).sum().backward()
            outs.append((x.detach(), qq.grad))
        assert warm.options.cache["paths"] == [path]
        assert torch.allclose(outs[0][0], outs[1][0], atol=1e-10, rtol=0)
        assert torch.allclose(outs[0][1], outs[1][1], atol=1e-8, rtol=1e-8)


def test_warm_start_is_not_trusted_when_a_sparse_q_is_not_known_psd():
    """On a sparse indefinite Q a verified KKT point need not be optimal (x = 0 below is a
    saddle that the polish accepts), so ``warm_active`` is ignored and a solver runs."""
    import scipy.sparse as sp
    from icml_dxpp.forward import polish

    Q = sp.csr_matrix(np.array([[1.0, 2.0], [2.0, 1.0]]))
    G = sp.csr_matrix(np.vstack([np.eye(2), -np.eye(2)]))
    prob = make_problem(Q, np.zeros(2), G, np.ones(4), check=False)
    none = np.zeros(0, dtype=np.int64)
    assert polish(prob, None, None, None, active=none) is not None  # the saddle verifies
    assert solve_qp(prob, warm_active=none).extras["path"] != "warm"
