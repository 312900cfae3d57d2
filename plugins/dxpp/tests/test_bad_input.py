"""Bad input gets a clear error naming the problem and the fix."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from icml_dxpp import DXPPQPLayer, QPInputError, QPSolveError, dxpp_solve
from icml_dxpp.forward import solve_qp
from icml_dxpp.problems import random_qp
from icml_dxpp.qp import make_problem


def _t(*arrays):
    return [torch.tensor(np.asarray(a), dtype=torch.float64) for a in arrays]


def test_shape_mismatches():
    Q, q, G, h = _t(np.eye(3), np.ones(3), np.ones((2, 3)), np.ones(2))
    with pytest.raises(QPInputError, match=r"Q has shape \(3, 3\) but q has length 4"):
        dxpp_solve(Q, torch.ones(4, dtype=torch.float64))
    with pytest.raises(QPInputError, match="G has shape .* it needs 3 columns"):
        dxpp_solve(Q, q, torch.ones(2, 4, dtype=torch.float64), h)
    with pytest.raises(QPInputError, match="G has 2 rows but h has shape"):
        dxpp_solve(Q, q, G, torch.ones(5, dtype=torch.float64))
    with pytest.raises(QPInputError, match="G and h come together"):
        dxpp_solve(Q, q, G, None)
    with pytest.raises(QPInputError, match="do not broadcast"):
        dxpp_solve(Q.expand(2, 3, 3), q.expand(3, 3), G, h)


def test_non_symmetric_and_indefinite_q():
    with pytest.raises(QPInputError, match=r"not symmetric.*\(Q \+ Qᵀ\)/2"):
        make_problem(np.array([[1.0, 1.0], [0.0, 1.0]]), np.ones(2))
    with pytest.raises(QPInputError, match="indefinite.*positive semidefinite"):
        make_problem(np.diag([1.0, -1.0]), np.ones(2), np.eye(2), np.ones(2))


def test_nan_inf_named():
    q = np.ones(2)
    q[1] = np.nan
    with pytest.raises(QPInputError, match="q contains NaN or Inf"):
        make_problem(np.eye(2), q)
    with pytest.raises(QPInputError, match="h contains NaN or Inf"):
        make_problem(np.eye(2), np.ones(2), np.eye(2), np.array([1.0, np.inf]))


def test_infeasible_and_unbounded():
    infeasible = make_problem(np.eye(2), np.ones(2), np.array([[1.0, 0.0], [-1.0, 0.0]]),
                              np.array([-1.0, -1.0]))  # x0 <= -1 and x0 >= 1
    with pytest.raises(QPSolveError, match="infeasible"):
        solve_qp(infeasible, "clarabel")
    unbounded = make_problem(np.zeros((2, 2)), np.array([-1.0, 0.0]), np.array([[0.0, 1.0]]),
                             np.array([1.0]))
    with pytest.raises(QPSolveError, match="unbounded"):
        solve_qp(unbounded, "clarabel")
    with pytest.raises(QPSolveError, match="unbounded below"):
        solve_qp(make_problem(np.zeros((2, 2)), np.ones(2)), "clarabel")


def test_missing_solver_names_pip_command():
    with pytest.raises(QPInputError, match="'quadprog' is not installed: run `pip install "
                                           "quadprog`"):
        DXPPQPLayer(solver="quadprog")
    # a name that is no qpsolvers backend is a typo, not a missing package (issue 49): the
    # error lists the installed and known backends and suggests no `pip install <typo>`
    with pytest.raises(QPInputError, match="'no_such_solver' is not a qpsolvers backend") as e:
        dxpp_solve(*_t(np.eye(2), np.ones(2)), solver="no_such_solver")
    assert "pip install" not in str(e.value) and "clarabel" in str(e.value)


def test_batch_failure_names_index():
    good = random_qp(3, seed=0).problem
    Q = torch.tensor(np.stack([good.Q, good.Q, np.diag([1.0, -1.0, 1.0])]))
    q = torch.tensor(np.stack([good.q] * 3))
    with pytest.raises(QPInputError, match="QP #2 in the batch: Q is indefinite"):
        dxpp_solve(Q, q, torch.tensor(good.G), torch.tensor(good.h))
    G = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)  # |x0| <= h
    h = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [1.0, 1.0]], dtype=torch.float64)
    with pytest.raises(QPSolveError, match="QP #1 in the batch: .*infeasible"):
        dxpp_solve(torch.eye(2, dtype=torch.float64), torch.ones(3, 2, dtype=torch.float64),
                   G, h)


def test_bad_options():
    with pytest.raises(ValueError, match="beta must be a positive number"):
        DXPPQPLayer(beta=0.0)
    with pytest.raises(ValueError, match="backward 'adjoint' is unknown"):
        DXPPQPLayer(backward="adjoint")
    with pytest.raises(ValueError, match="linear_solver 'lu' is unknown"):
        DXPPQPLayer(linear_solver="lu")
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['betta'\]"):
        dxpp_solve(*_t(np.eye(2), np.ones(2)), betta=1e-3)


def test_integer_tensors_rejected():
    with pytest.raises(QPInputError, match="dtype torch.int64: use float64 or float32"):
        dxpp_solve(torch.eye(2, dtype=torch.int64), torch.ones(2))


def test_sparse_inputs_must_be_unbatched():
    Qs = torch.eye(3, dtype=torch.float64).to_sparse()
    with pytest.raises(QPInputError, match="sparse inputs are supported for one unbatched"):
        dxpp_solve(Qs, torch.ones(2, 3, dtype=torch.float64))


def test_scalar_q_and_zero_tol_named():
    with pytest.raises(QPInputError, match="q is a scalar"):
        dxpp_solve(torch.eye(1, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64))
    with pytest.raises(ValueError, match="tol must be a positive number, got 0.0"):
        DXPPQPLayer(tol=0.0)


def test_sparse_indefinite_q_failure_mentions_psd():
    Qs = torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=torch.float64).to_sparse()
    eye = torch.eye(2, dtype=torch.float64).to_sparse()
    with pytest.raises(QPSolveError, match="sparse Q is only checked .* positive semidefinite"):
        dxpp_solve(Qs, torch.ones(2, dtype=torch.float64), eye,
                   torch.ones(2, dtype=torch.float64))


def test_numpy_differentiate_checks_upstream_gradient_shapes():
    from icml_dxpp import differentiate

    prob = random_qp(6, seed=0).problem  # n = 6, m = 6, p = 1
    with pytest.raises(QPInputError, match=r"grad_x has shape \(5,\) but the problem needs"):
        differentiate(prob, np.ones(5))
    with pytest.raises(QPInputError, match=r"grad_ineq_dual has shape \(2,\)"):
        differentiate(prob, np.ones(6), grad_ineq_dual=np.ones(2))
    with pytest.raises(QPInputError, match=r"grad_eq_dual has shape \(3,\)"):
        differentiate(prob, np.ones(6), grad_eq_dual=np.ones(3))


def test_missing_duals_error_names_the_right_keyword(monkeypatch):
    """A backend that returns no duals: solve_qp's error names its own keyword (recover=) and
    the layer's (recover_duals=); 'auto' then rebuilds them."""
    import dataclasses

    import qpsolvers

    real = qpsolvers.solve_problem

    def no_duals(problem, solver, **kw):
        sol = real(problem, solver=solver, **kw)
        sol.z = sol.y = None
        return sol

    monkeypatch.setattr(qpsolvers, "solve_problem", no_duals)
    prob = random_qp(8, seed=0).problem
    with pytest.raises(QPSolveError, match=r"recover='auto' to solve_qp.*recover_duals='auto'"):
        solve_qp(prob, "clarabel", recover="never")
    sol = solve_qp(prob, "clarabel", recover="auto")
    assert sol.duals_recovered and sol.ineq_dual.shape == (prob.m,)
    assert [f.name for f in dataclasses.fields(sol)][:3] == ["x", "eq_dual", "ineq_dual"]


def test_batched_sparse_needs_every_input_batched():
    Q = torch.stack([torch.eye(3, dtype=torch.float64).to_sparse()] * 2).coalesce()
    q = torch.ones(2, 3, dtype=torch.float64)
    G = torch.eye(3, dtype=torch.float64)  # shared, not expanded
    with pytest.raises(QPInputError, match="G has shape .* same size .* expanded"):
        dxpp_solve(Q, q, G, torch.ones(3, dtype=torch.float64))
