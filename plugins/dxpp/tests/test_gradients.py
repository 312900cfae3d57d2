"""Invariants of the dXPP backward: agreement with KKT, finite differences, closed forms."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from icml_dxpp import (
    DXPPQPLayer,
    PenaltyOptions,
    differentiate,
    dxpp_backward,
    dxpp_solve,
    kkt_backward,
)
from icml_dxpp.benchmark import rel_error
from icml_dxpp.forward import solve_qp
from icml_dxpp.problems import (
    chain_projection,
    random_qp,
    simplex_projection,
    simplex_solution,
    simplex_vjp,
)
from icml_dxpp.qp import make_problem


def _solve_and_grads(prob, g, **kw):
    sol = solve_qp(prob, kw.pop("solver", "clarabel"))
    args = (prob, sol.x, sol.ineq_dual, sol.eq_dual, g)
    ref = kkt_backward(*args, mode="reduced")[0]
    return sol, args, ref


@pytest.mark.parametrize("n,seed", [(10, 0), (30, 1), (60, 2)])
def test_dxpp_matches_reduced_kkt_at_small_beta(n, seed):
    prob = random_qp(n, seed=seed).problem
    g = np.random.default_rng(seed).standard_normal(n)
    _, args, ref = _solve_and_grads(prob, g)
    grads, info = dxpp_backward(*args, opts=PenaltyOptions(beta=1e-6))
    assert info["active"] == round(0.5 * n)
    assert rel_error(grads, ref) <= 1e-5


def test_error_shrinks_with_beta():
    prob = random_qp(40, seed=5).problem
    g = np.random.default_rng(5).standard_normal(40)
    _, args, ref = _solve_and_grads(prob, g)
    errs = [rel_error(dxpp_backward(*args, opts=PenaltyOptions(beta=b))[0], ref)
            for b in (1e-2, 1e-3, 1e-4)]
    assert errs[0] > errs[1] > errs[2]
    assert errs[0] / errs[2] > 50  # O(beta): two decades of beta buy about two of error


def test_full_and_reduced_kkt_agree():
    prob = random_qp(25, seed=3).problem
    g = np.random.default_rng(3).standard_normal(25)
    _, args, ref = _solve_and_grads(prob, g)
    full = kkt_backward(*args, mode="full")[0]
    assert rel_error(full, ref) < 1e-7


def test_gradcheck_all_inputs_and_outputs(exact_solver, to_torch):
    """Finite differences through the solver, for x, both duals and all six inputs."""
    prob = random_qp(6, seed=11).problem
    inputs = tuple(to_torch(prob))

    def f(Q, q, G, h, A, b):
        sol = dxpp_solve((Q + Q.T) / 2, q, G, h, A, b, solver=exact_solver, tol=1e-12)
        return sol.x, sol.eq_dual, sol.ineq_dual

    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)


def test_forward_recovers_the_constructed_solution():
    known = random_qp(30, seed=4)
    sol = solve_qp(known.problem, "clarabel")
    np.testing.assert_allclose(sol.x, known.x, atol=1e-7)
    np.testing.assert_allclose(sol.ineq_dual, known.ineq_dual, atol=1e-6)
    np.testing.assert_allclose(sol.eq_dual, known.eq_dual, atol=1e-6)


def test_no_active_constraints_gives_inverse_q():
    rng = np.random.default_rng(0)
    M = rng.standard_normal((8, 8))
    Q = M @ M.T + np.eye(8)
    q = rng.standard_normal(8)
    x0 = np.linalg.solve(Q, -q)
    prob = make_problem(Q, q, np.eye(8), x0 + 1.0)  # all rows inactive by a margin of 1
    g = rng.standard_normal(8)
    _, grads, info = differentiate(prob, g)
    assert info["active"] == 0
    np.testing.assert_allclose(grads["q"], -np.linalg.solve(Q, g), rtol=1e-8)
    assert np.all(grads["h"] == 0.0) and np.all(grads["G"] == 0.0)


def test_dq_symmetric_and_inactive_rows_exactly_zero():
    known = random_qp(20, seed=8)
    g = np.random.default_rng(8).standard_normal(20)
    sol, grads, _ = differentiate(known.problem, g)
    np.testing.assert_array_equal(grads["Q"], grads["Q"].T)
    inactive = known.ineq_dual == 0
    assert inactive.any()
    assert np.all(grads["h"][inactive] == 0.0)
    assert np.all(grads["G"][inactive] == 0.0)
    assert np.all(grads["h"][~inactive] != 0.0)


def test_same_gradients_across_solvers():
    import qpsolvers

    solvers = [s for s in ("clarabel", "daqp", "osqp", "piqp") if s in
               qpsolvers.available_solvers]
    if len(solvers) < 2:
        pytest.skip("needs two qpsolvers backends (pip install daqp)")
    prob = random_qp(25, seed=9).problem
    g = np.random.default_rng(9).standard_normal(25)
    results = [differentiate(prob, g, solver=s)[1] for s in solvers]
    for other in results[1:]:
        assert rel_error(other, results[0]) < 1e-6


def test_row_scaling_leaves_x_and_scales_dh():
    known = random_qp(15, seed=2)
    prob = known.problem
    i = int(np.flatnonzero(known.ineq_dual > 0)[0])
    c = 3.0
    G2, h2 = prob.G.copy(), prob.h.copy()
    G2[i] *= c
    h2[i] *= c
    prob2 = make_problem(prob.Q, prob.q, G2, h2, prob.A, prob.b)
    g = np.random.default_rng(2).standard_normal(15)
    s1, g1, _ = differentiate(prob, g)
    s2, g2, _ = differentiate(prob2, g)
    np.testing.assert_allclose(s1.x, s2.x, atol=1e-7)
    np.testing.assert_allclose(g2["h"][i], g1["h"][i] / c, rtol=1e-5)


def test_simplex_closed_form_numpy_sparse():
    prob = simplex_projection(3000, seed=1)
    g = np.random.default_rng(1).standard_normal(3000)
    sol, grads, info = differentiate(prob, g)
    exact_x = simplex_solution(-prob.q)
    np.testing.assert_allclose(sol.x, exact_x, atol=1e-7)
    ref = simplex_vjp(exact_x, g)
    assert info["linear_solver"] == "sparse"
    assert np.linalg.norm(grads["q"] - ref) <= 1e-5 * np.linalg.norm(ref)


def test_simplex_closed_form_torch_sparse_inputs():
    prob = simplex_projection(500, seed=3)
    Qs = torch.sparse_coo_tensor(np.vstack(prob.Q.nonzero()), prob.Q.data, (500, 500))
    Gc = prob.G.tocoo()
    Gs = torch.sparse_coo_tensor(np.vstack([Gc.row, Gc.col]), Gc.data, (500, 500))
    Qs, Gs = Qs.coalesce().requires_grad_(), Gs.coalesce().requires_grad_()
    q = torch.tensor(prob.q, requires_grad=True)
    A = torch.ones(1, 500, dtype=torch.float64, requires_grad=True)
    sol = dxpp_solve(Qs, q, Gs, torch.zeros(500, dtype=torch.float64), A,
                     torch.ones(1, dtype=torch.float64))
    w = torch.linspace(-1, 1, 500, dtype=torch.float64)
    (sol.x * w).sum().backward()
    exact = simplex_vjp(simplex_solution(-prob.q), w.numpy())
    assert np.linalg.norm(q.grad.numpy() - exact) <= 1e-5 * np.linalg.norm(exact)
    assert Qs.grad.is_sparse and Gs.grad.is_sparse
    assert Qs.grad.coalesce().indices().shape[1] <= 500  # gradient stays on Q's pattern


def test_sparse_and_dense_inputs_agree():
    prob = chain_projection(2, N=20, seed=0)
    dense = make_problem(prob.Q.toarray(), prob.q, prob.G.toarray(), prob.h)
    g = np.random.default_rng(0).standard_normal(prob.n)
    s1, g_sparse, i1 = differentiate(prob, g)
    s2, g_dense, i2 = differentiate(dense, g)
    assert (i1["linear_solver"], i2["linear_solver"]) == ("sparse", "dense")
    mask = prob.G.toarray() != 0
    np.testing.assert_allclose(g_sparse["G"].toarray()[mask], g_dense["G"][mask], atol=1e-6)
    np.testing.assert_allclose(g_sparse["q"], g_dense["q"], atol=1e-6)


def test_chain_matches_kkt_and_other_solver(exact_solver):
    """On the chain, a loose forward misplaces near-active rows; the default tolerance must
    make clarabel agree with an exact active-set solver and both KKT forms."""
    prob = chain_projection(2, N=100, seed=0)
    g = np.random.default_rng(1).standard_normal(prob.n)
    _, args, ref = _solve_and_grads(prob, g)
    grads, info = dxpp_backward(*args)
    assert info["active"] > 0
    assert rel_error(grads, ref) <= 1e-5
    assert rel_error(kkt_backward(*args, mode="full")[0], ref) <= 1e-4
    other = differentiate(prob, g, solver=exact_solver)[1]
    assert rel_error(other, grads) <= 1e-4


def test_equality_only_within_beta_of_kkt():
    rng = np.random.default_rng(6)
    M = rng.standard_normal((12, 12))
    prob = make_problem(M @ M.T / 12 + np.eye(12), rng.standard_normal(12),
                        A=rng.standard_normal((4, 12)), b=rng.standard_normal(4))
    g = rng.standard_normal(12)
    _, args, ref = _solve_and_grads(prob, g)
    for beta in (1e-3, 1e-6):
        err = rel_error(dxpp_backward(*args, opts=PenaltyOptions(beta=beta))[0], ref)
        assert err < 50 * beta


def test_cg_matches_direct_and_falls_back():
    prob = simplex_projection(2000, seed=2)
    g = np.random.default_rng(2).standard_normal(prob.n)
    sol = solve_qp(prob)
    args = (prob, sol.x, sol.ineq_dual, sol.eq_dual, g)
    direct, _ = dxpp_backward(*args)
    cg, info = dxpp_backward(*args, opts=PenaltyOptions(linear_solver="cg"))
    assert info["linear_solver"] == "cg" and info["cg_residual"] <= 1e-7
    assert rel_error(cg, direct) < 1e-5
    chain = chain_projection(3, N=40, seed=2)
    sol = solve_qp(chain)
    args = (chain, sol.x, sol.ineq_dual, sol.eq_dual, np.ones(chain.n))
    direct, _ = dxpp_backward(*args)
    with pytest.warns(UserWarning, match="falling back to a direct solve"):
        fb, info = dxpp_backward(*args, opts=PenaltyOptions(linear_solver="cg", cg_maxiter=1))
    assert info["linear_solver"] == "cg->direct"
    assert rel_error(fb, direct) < 1e-10


def test_batched_equals_looped_and_broadcast_sums(to_torch):
    probs = [random_qp(8, seed=s).problem for s in range(3)]
    G = torch.tensor(probs[0].G, requires_grad=True)  # shared across the batch
    Q = torch.stack([torch.tensor(p.Q) for p in probs]).requires_grad_()
    q = torch.stack([torch.tensor(p.q) for p in probs]).requires_grad_()
    h = torch.stack([torch.tensor(p.h) for p in probs]).requires_grad_()
    x = dxpp_solve(Q, q, G, h).x
    w = torch.arange(24, dtype=torch.float64).reshape(3, 8)
    (x * w).sum().backward()
    G_sum = torch.zeros_like(G)
    for i in range(3):
        Gi = G.detach().clone().requires_grad_()
        qi = q[i].detach().clone().requires_grad_()
        xi = dxpp_solve(Q[i].detach(), qi, Gi, h[i].detach()).x
        (xi * w[i]).sum().backward()
        torch.testing.assert_close(x[i].detach(), xi.detach())
        torch.testing.assert_close(q.grad[i], qi.grad)
        G_sum += Gi.grad
    torch.testing.assert_close(G.grad, G_sum)


def test_kkt_backward_option_in_layer(to_torch):
    prob = random_qp(12, seed=7).problem
    grads = []
    for backward in ("dxpp", "kkt"):
        ts = to_torch(prob)
        sol = dxpp_solve(*ts, backward=backward)
        (sol.x.sum() + sol.ineq_dual.sum() + sol.eq_dual.sum()).backward()
        grads.append(torch.cat([t.grad.reshape(-1) for t in ts]))
    assert torch.linalg.norm(grads[0] - grads[1]) <= 1e-5 * torch.linalg.norm(grads[1])


def test_float32_keeps_dtype_and_matches_float64(to_torch):
    prob = random_qp(10, seed=1).problem
    t64 = to_torch(prob)
    t32 = to_torch(prob, dtype=torch.float32)
    s64 = dxpp_solve(*t64)
    s32 = dxpp_solve(*t32)
    assert s32.x.dtype == torch.float32 and s64.x.dtype == torch.float64
    s64.x.sum().backward()
    s32.x.sum().backward()
    torch.testing.assert_close(t32[1].grad.double(), t64[1].grad, atol=1e-5, rtol=1e-4)


def test_recovered_duals_match_solver_duals():
    known = random_qp(20, seed=12)
    direct = solve_qp(known.problem, "clarabel")
    rebuilt = solve_qp(known.problem, "clarabel", recover="always")
    assert rebuilt.duals_recovered and not direct.duals_recovered
    np.testing.assert_allclose(rebuilt.ineq_dual, known.ineq_dual, atol=1e-6)
    np.testing.assert_allclose(rebuilt.eq_dual, known.eq_dual, atol=1e-6)


def test_rho_floor_keeps_equalities_when_duals_vanish():
    # the unconstrained minimiser already satisfies Ax = b, so μ* = 0; the backward must still
    # keep x on the constraint (∂x/∂q projected onto the null space of A)
    Q = np.eye(4)
    A = np.array([[1.0, 1.0, 0.0, 0.0]])
    q = -np.array([0.5, 0.5, 1.0, -1.0])
    prob = make_problem(Q, q, A=A, b=np.array([1.0]))
    g = np.array([1.0, 0.0, 0.0, 0.0])
    sol, grads, _ = differentiate(prob, g, rho_min=1.0)
    assert abs(sol.eq_dual[0]) < 1e-8
    np.testing.assert_allclose(grads["q"], [-0.5, 0.5, 0.0, 0.0], atol=1e-6)
    # the default (the paper's rule with the zero-dual guard) keeps the constraint too
    guarded = differentiate(prob, g, solution=sol)[1]
    np.testing.assert_allclose(guarded["q"], [-0.5, 0.5, 0.0, 0.0], atol=1e-6)
    # the paper's rule unguarded: ρ_E = 0 and x is free to leave Ax = b
    paper = differentiate(prob, g, solution=sol, zero_dual_guard=None)[1]
    np.testing.assert_allclose(paper["q"], [-1.0, 0.0, 0.0, 0.0], atol=1e-6)


def test_sparse_gradient_on_pattern_of_input():
    prob = chain_projection(2, N=10, seed=0)
    g = np.ones(prob.n)
    _, grads, _ = differentiate(prob, g)
    assert sp.issparse(grads["G"]) and sp.issparse(grads["Q"])
    pattern = prob.G.toarray() != 0
    assert np.all(grads["G"].toarray()[~pattern] == 0)


@pytest.mark.parametrize("blocks", ["both", "ineq_only", "eq_only"])
def test_batched_torch_backward_equals_per_problem_numpy(blocks):
    """linear_solver='batched' uses one batched torch Cholesky (the 'auto' choice on CUDA);
    'dense' loops over problems with SciPy. Both must give the same gradients for every input."""
    probs = [random_qp(9, seed=s, p=0 if blocks == "ineq_only" else 2,
                       m=0 if blocks == "eq_only" else 9).problem for s in range(3)]

    def run(linear_solver):
        ts = {k: torch.stack([torch.tensor(np.asarray(getattr(p, k))) for p in probs])
              .requires_grad_() for k in ("Q", "q", "G", "h", "A", "b")}
        if blocks == "ineq_only":
            ts["A"] = ts["b"] = None
        if blocks == "eq_only":
            ts["G"] = ts["h"] = None
        sol = dxpp_solve(*ts.values(), linear_solver=linear_solver)
        w = torch.linspace(-1, 2, sol.x.numel(), dtype=torch.float64).reshape(sol.x.shape)
        loss = (sol.x * w).sum() + sol.ineq_dual.pow(2).sum() + sol.eq_dual.sum()
        loss.backward()
        return {k: t.grad for k, t in ts.items() if t is not None}

    a, b = run("batched"), run("dense")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-6, atol=1e-8)


def test_layer_module_trains_a_parameter():
    """DXPPQPLayer as an nn.Module: learn q so that the simplex projection hits a target."""
    layer = DXPPQPLayer(beta=1e-6)
    assert "backward='dxpp'" in repr(layer)
    target = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    q = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    opt = torch.optim.SGD([q], lr=0.5)
    eye = torch.eye(3, dtype=torch.float64)
    for _ in range(40):
        x = layer(eye, q, -eye, torch.zeros(3, dtype=torch.float64),
                  torch.ones(1, 3, dtype=torch.float64), torch.ones(1, dtype=torch.float64)).x
        loss = (x - target).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 1e-6


def test_sparse_out_of_memory_falls_back_to_cg(monkeypatch):
    from icml_dxpp import linsolve

    def no_memory(*_args):
        raise MemoryError

    prob = simplex_projection(800, seed=4)
    sol = solve_qp(prob)
    args = (prob, sol.x, sol.ineq_dual, sol.eq_dual, np.ones(800))
    direct, _ = dxpp_backward(*args)
    monkeypatch.setattr(linsolve, "_solve_sparse", no_memory)
    with pytest.warns(UserWarning, match="ran out of memory"):
        fb, info = dxpp_backward(*args)
    assert info["linear_solver"] == "sparse->cg"
    assert rel_error(fb, direct) < 1e-5


@pytest.mark.parametrize("solver,tol", [("clarabel", 1e-5), ("osqp", 1e-4)])
def test_polish_makes_a_loose_forward_exact(solver, tol):
    import qpsolvers

    if solver not in qpsolvers.available_solvers:
        pytest.skip(f"{solver} not installed")
    known = random_qp(30, seed=13)
    no_own_polish = {"polishing": False} if solver == "osqp" else None
    loose = solve_qp(known.problem, solver, tol=tol, options=no_own_polish)
    fine = solve_qp(known.problem, solver, tol=tol, options=no_own_polish,
                    polish_solution=True)
    assert fine.extras["polished"]
    assert np.abs(fine.x - known.x).max() < 1e-9
    np.testing.assert_allclose(fine.ineq_dual, known.ineq_dual, atol=1e-8)
    np.testing.assert_allclose(fine.eq_dual, known.eq_dual, atol=1e-8)
    assert np.abs(loose.x - known.x).max() > 10 * np.abs(fine.x - known.x).max()


def test_polish_on_sparse_chain_matches_exact_solver(exact_solver):
    prob = chain_projection(2, N=100, seed=0)
    ref = solve_qp(prob, exact_solver)
    fine = solve_qp(prob, "clarabel", tol=1e-8, polish_solution=True)
    assert fine.extras["polished"]
    assert np.abs(fine.x - ref.x).max() < 1e-8


def _hand_built_qp():
    """A QP built by hand (not by the package's generators): x*, ν*, μ* chosen first,
    4 of 9 inequalities active with ν ∈ [0.5, 2], the rest with slack in [0.5, 2]."""
    rng = np.random.default_rng(42)
    n, m, p = 7, 9, 2
    M = rng.standard_normal((n, n))
    Q = M @ M.T / n + 0.5 * np.eye(n)
    G, A = rng.standard_normal((m, n)), rng.standard_normal((p, n))
    x0 = rng.standard_normal(n)
    nu = np.zeros(m)
    nu[:4] = rng.uniform(0.5, 2, 4)
    mu = rng.standard_normal(p)
    h = G @ x0
    h[4:] += rng.uniform(0.5, 2, m - 4)
    q = -(Q @ x0 + G.T @ nu + A.T @ mu)
    return make_problem(Q, q, G, h, A, A @ x0)


@pytest.mark.parametrize("linear_solver", ["dense", "sparse", "cg"])
def test_dual_upstream_gradients_accurate_with_every_linear_solver(linear_solver):
    """Upstream gradients on ν and μ enter H v = … as G_𝒜ᵀW_I ḡ_ν + AᵀW_E ḡ_μ with W ~ ρ/β;
    without the shift in dxpp_backward, CG returned ∂G, ∂h, ∂A, ∂b 1-2% off (no warning)."""
    prob = _hand_built_qp()
    rng = np.random.default_rng(0)
    g = [rng.standard_normal(k) for k in (prob.n, prob.m, prob.p)]
    sol, ref, _ = differentiate(prob, *g, method="kkt")
    _, grads, _ = differentiate(prob, *g, solution=sol, linear_solver=linear_solver)
    for k in ("Q", "q", "G", "h", "A", "b"):
        assert np.linalg.norm(grads[k] - ref[k]) <= 1e-5 * np.linalg.norm(ref[k]), k


def test_dual_upstream_gradients_sparse_simplex_and_chain():
    """Sparse paths with ḡ_ν, ḡ_μ ≠ 0: the Woodbury solve (simplex) gave ∂b 12% off and CG on
    the chain 47% off with no warning before the shift."""
    for prob, ls in ((simplex_projection(2000, seed=0), "sparse"),
                     (chain_projection(3, N=40, seed=1), "cg")):
        rng = np.random.default_rng(0)
        g = [rng.standard_normal(k) for k in (prob.n, prob.m, prob.p)]
        sol, ref, _ = differentiate(prob, *g, method="kkt")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # CG may fall back to the direct solve
            _, grads, _ = differentiate(prob, *g, solution=sol, linear_solver=ls)
        assert rel_error(grads, ref) <= 1e-5, ls


def test_hand_built_qp_matches_central_finite_differences():
    """ℓ = cₓᵀx + c_μᵀμ + c_νᵀν; ∂ℓ/∂(q, h, b, G) against central differences of re-solves."""
    prob = _hand_built_qp()
    rng = np.random.default_rng(1)
    cx, cnu, cmu = (rng.standard_normal(k) for k in (prob.n, prob.m, prob.p))

    def loss(**change):
        data = {k: np.array(getattr(prob, k), dtype=np.float64) for k in "QqGhAb"}
        data.update(change)
        s = solve_qp(make_problem(**data), "clarabel")
        return cx @ s.x + cnu @ s.ineq_dual + cmu @ s.eq_dual

    _, grads, _ = differentiate(prob, cx, cnu, cmu)
    eps = 1e-6
    for name, idx in (("q", (3,)), ("h", (1,)), ("b", (0,)), ("G", (2, 5)), ("A", (1, 4))):
        base = np.array(getattr(prob, name), dtype=np.float64)
        up, dn = base.copy(), base.copy()
        up[idx] += eps
        dn[idx] -= eps
        fd = (loss(**{name: up}) - loss(**{name: dn})) / (2 * eps)
        assert abs(grads[name][idx] - fd) <= 1e-4 * (1 + abs(fd)), (name, grads[name][idx], fd)


@pytest.mark.parametrize("max_fill", [None, 0])
def test_woodbury_with_singular_q_keeps_db_accurate(max_fill, monkeypatch):
    """Sparse Q singular off the active set (half the diagonal zero) plus dense equality rows:
    H₀ = Q + G_𝒜ᵀW_IG_𝒜 + ridge·I is near-singular, and A v taken as a Woodbury difference
    cancelled to noise (∂b, ∂A 100-500% off). By default H is then factored directly; with
    max_fill = 0 (H 'too dense') Woodbury is kept, warns, and ∂b comes from its z."""
    from icml_dxpp import linsolve

    if max_fill is not None:
        monkeypatch.setattr(linsolve, "_MAX_FILL", max_fill)
    rng = np.random.default_rng(0)
    n = 400
    d = np.zeros(n)
    d[1::2] = rng.uniform(0.5, 2, n // 2)
    A = np.vstack([np.ones(n), (np.arange(n) % 3 == 0).astype(float)])
    prob = make_problem(sp.diags(d).tocsr(), rng.standard_normal(n),
                        -sp.identity(n, format="csr"), np.zeros(n), sp.csr_matrix(A),
                        np.array([1.0, 0.4]))
    g = rng.standard_normal(n)
    sol, ref, _ = differentiate(prob, g, method="kkt")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, grads, info = differentiate(prob, g, solution=sol, linear_solver="sparse")
    assert info["linear_solver"] == "sparse" and "Av" not in info
    assert any("Woodbury" in str(w.message) for w in caught) == (max_fill == 0)
    assert rel_error(grads, ref) <= 1e-6
    assert np.linalg.norm(grads["b"] - ref["b"]) <= 1e-6 * np.linalg.norm(ref["b"])


def test_woodbury_falls_back_when_base_is_near_singular():
    """Q of rank 5 (n = 19) stored sparse with 6 dense equality rows: 'sparse' picks Woodbury
    around H₀ = Q + G_𝒜ᵀW_IG_𝒜 + ridge·I, which is near-singular, and v came back with a
    relative residual of ~3 (gradients 1-3% off). It must now agree with the dense solve."""
    rng = np.random.default_rng(9)
    n, r, m, p, k = 19, 5, 36, 6, 8
    M = rng.standard_normal((n, r))
    Q = M @ M.T / r
    G, A = rng.standard_normal((m, n)), rng.standard_normal((p, n))
    x0 = rng.standard_normal(n)
    nu = np.zeros(m)
    nu[:k] = rng.uniform(0.3, 2, k)
    h = G @ x0
    h[k:] += rng.uniform(0.3, 2, m - k)
    q = -(Q @ x0 + G.T @ nu + A.T @ rng.standard_normal(p))
    dense = make_problem(Q, q, G, h, A, A @ x0)
    sparse = make_problem(sp.csr_matrix(Q), q, sp.csr_matrix(G), h, sp.csr_matrix(A), A @ x0)
    g = rng.standard_normal(n)
    sol, ref, _ = differentiate(dense, g, method="kkt")
    _, g_dense, _ = differentiate(dense, g, solution=sol)
    _, g_sparse, info = differentiate(sparse, g, solution=sol, linear_solver="sparse")
    assert info["linear_solver"] == "sparse"
    g_sparse = {key: val.toarray() if sp.issparse(val) else val for key, val in g_sparse.items()}
    assert rel_error(g_sparse, g_dense) <= 1e-6
    assert rel_error(g_sparse, ref) <= 1e-5


def test_second_derivative_raises_instead_of_silently_dropping_terms():
    """The backward is NumPy: under create_graph its result is a constant, so a loss built
    on q.grad would silently lose its second-order part. It must raise instead."""
    eye = torch.eye(3, dtype=torch.float64)
    q = torch.tensor([-1.0, -0.8, 0.5], dtype=torch.float64, requires_grad=True)
    x = dxpp_solve(eye, q, -eye, torch.zeros(3, dtype=torch.float64)).x
    (gq,) = torch.autograd.grad(x.pow(2).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        (gq.pow(2).sum() + q.sum()).backward()


def test_sparse_gradients_are_built_coalesced_and_cg_keeps_the_blas_setting():
    """Thread robustness of the sparse backward (issue 68): a sparse gradient is handed to
    torch already coalesced (SciPy's canonical order; torch's threaded coalesce() cost 380 ms
    for 10⁵ entries at 2 threads), equal to what coalesce() gives even for unsorted input
    with duplicates; CG runs under a one-thread BLAS limit and restores the setting."""
    from icml_dxpp.layer import _grad_to_torch
    from icml_dxpp.linsolve import PenaltySystem, solve_system
    from threadpoolctl import threadpool_info

    rows, cols = np.array([3, 0, 3, 1, 0]), np.array([1, 2, 1, 0, 2])
    g = sp.coo_matrix((np.arange(1.0, 6.0), (rows, cols)), shape=(4, 3))  # duplicates
    like = torch.zeros(4, 3, dtype=torch.float64).to_sparse()
    out = _grad_to_torch(g, like)
    assert out.is_coalesced()
    ref = torch.tensor(g.toarray()).to_sparse().coalesce()
    torch.testing.assert_close(out.indices(), ref.indices())
    torch.testing.assert_close(out.values(), ref.values())
    prob = simplex_projection(2000, seed=1)
    S = PenaltySystem(prob.Q, prob.G[:0], np.zeros(0), prob.A, np.array([1e3]), 1e-9)
    rhs = np.random.default_rng(0).standard_normal(2000)
    solve_system(S, rhs, "cg")  # loads every library it uses
    before = [(i["internal_api"], i["num_threads"]) for i in threadpool_info()]
    v, info = solve_system(S, rhs, "cg")
    assert info["linear_solver"] == "cg"
    np.testing.assert_allclose(S.matvec(v), rhs, atol=1e-6)
    assert [(i["internal_api"], i["num_threads"]) for i in threadpool_info()] == before
