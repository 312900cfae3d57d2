"""Forward pass: solve a QP with any ``qpsolvers`` backend and return x*, ν* (Gx ≤ h) and
μ* (Ax = b). When a backend returns no duals they are rebuilt from stationarity on the active
set, as dXPP does: least squares [G_𝒜ᵀ Aᵀ][ν_𝒜; μ] = −(Qx* + q), then ν ≥ 0.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from icml_dxpp.qp import QPInputError, QPProblem, QPSolveError, _where

__all__ = ["QPResult", "solve_qp", "recover_duals", "polish", "solver_options",
           "check_solver", "resolve_solver"]

# pip command per backend, for the "not installed" error
_PIP = {
    "clarabel": "pip install clarabel", "osqp": "pip install osqp", "daqp": "pip install daqp",
    "piqp": "pip install piqp", "proxqp": "pip install proxsuite", "cvxopt": "pip install cvxopt",
    "quadprog": "pip install quadprog", "ecos": "pip install ecos", "scs": "pip install scs",
    "highs": "pip install highspy", "qpalm": "pip install qpalm", "gurobi": "pip install gurobipy",
    "mosek": "pip install mosek", "hpipm": "pip install hpipm_python", "qpax": "pip install qpax",
    "qpoases": "pip install qpsolvers[qpoases]", "jaxopt_osqp": "pip install jaxopt",
    "kvxopt": "pip install kvxopt", "sip": "pip install sip-python",
}


@dataclass
class QPResult:
    """x* and both duals of one QP, plus how they were obtained.

    Fields are in the order of the layer's :class:`~icml_dxpp.layer.QPSolution`
    ``(x, eq_dual, ineq_dual)``, i.e. the official code's ``(x, μ, ν)``.
    """

    x: np.ndarray
    eq_dual: np.ndarray  # μ*, length p
    ineq_dual: np.ndarray  # ν*, length m, >= 0
    solver: str = ""
    duals_recovered: bool = False
    extras: dict[str, Any] = field(default_factory=dict)


def resolve_solver(solver: str, sparse: bool = False) -> str:
    """``"auto"`` (opt-in; the default stays clarabel): dense problems -> piqp when installed
    (``pip install piqp``; 29× faster than clarabel at 1e-12 on dense n = 300, gradients within
    1e-7 of the reference, ``benchmarks/forward.py``), sparse problems -> clarabel. Not the
    default because piqp's point is less exact (~1e-7: zero duals come back ~1e-4, which the
    paper's ρ rule then uses) and, on an indefinite sparse Q (only its diagonal is checked),
    piqp returns a point without an error where clarabel reports the failure. Any other name
    is returned unchanged."""
    if solver != "auto":
        return solver
    import qpsolvers

    if not sparse and "piqp" in qpsolvers.available_solvers:
        return "piqp"
    return "clarabel"


def check_solver(solver: str) -> None:
    """Raise a clear error when ``solver`` is not an installed qpsolvers backend."""
    import qpsolvers

    if solver == "auto" or solver in qpsolvers.available_solvers:
        return
    known = sorted(set(qpsolvers.available_solvers))
    hint = _PIP.get(solver, f"pip install {solver}")
    raise QPInputError(f"QP solver {solver!r} is not installed: run `{hint}` or pick one of the "
                       f"installed solvers {known}")


_DEFAULT_TOL = {"clarabel": 1e-12, "osqp": 1e-10, "piqp": 1e-10, "proxqp": 1e-10,
                "cvxopt": 1e-10}


def solver_options(solver: str, tol: float | None = None) -> dict[str, Any]:
    """Tolerance settings for the common open-source backends (others get none).

    ``tol=None`` picks a tight per-solver default: gradients are taken at the solver's point,
    and a loose point misplaces rows near the active-set threshold (clarabel's gap criteria
    are relative to the objective, so its default is 1e-12; it costs few extra iterations).
    """
    if tol is None:
        tol = _DEFAULT_TOL.get(solver, 1e-10)
    if solver == "clarabel":
        return {"tol_gap_abs": tol, "tol_gap_rel": tol, "tol_feas": tol,
                "tol_ktratio": min(1e-6, tol * 1e2)}
    if solver == "osqp":
        return {"eps_abs": tol, "eps_rel": tol, "polishing": True, "max_iter": 100_000}
    if solver == "piqp":
        return {"eps_abs": tol, "eps_rel": tol}
    if solver == "proxqp":
        return {"eps_abs": tol, "eps_rel": 0.0}
    if solver == "cvxopt":
        return {"abstol": tol, "reltol": tol, "feastol": tol}
    return {}


def recover_duals(prob: QPProblem, x: np.ndarray, active_tol: float = 1e-5
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Duals from stationarity on the active set {i : h_i − G_i x < active_tol}."""
    active = np.flatnonzero(prob.slack(x) < active_tol)
    nu = np.zeros(prob.m)
    rhs = -(prob.Q @ x + prob.q)
    if active.size + prob.p == 0:
        return nu, np.zeros(prob.p)
    blocks = [prob.G[active].T, prob.A.T]
    if prob.sparse:
        from scipy.sparse.linalg import lsqr

        M = sp.hstack([sp.csr_matrix(B) for B in blocks]).tocsr()
        sol = lsqr(M, rhs, atol=1e-14, btol=1e-14, iter_lim=10 * M.shape[1] + 100)[0]
    else:
        M = np.hstack([np.asarray(B) for B in blocks])
        sol = np.linalg.lstsq(M, rhs, rcond=None)[0]
    nu[active] = np.maximum(sol[: active.size], 0.0)
    return nu, sol[active.size:]


def polish(prob: QPProblem, x: np.ndarray, nu: np.ndarray, mu: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Active-set refinement of an approximate solution (as OSQP's polishing does).

    Guess the active set {i : νᵢ > hᵢ − Gᵢx}, solve the equality-constrained KKT system on it
    exactly and keep the result only if it is primal feasible with ν ≥ 0 (to 1e-9, relative);
    otherwise return None and the solver's point is kept.
    """
    import scipy.linalg as sla

    act = np.flatnonzero(nu > prob.slack(x))
    n, k, p = prob.n, act.size, prob.p
    GA = prob.G[act]
    rhs = np.concatenate([-prob.q, prob.h[act], prob.b])
    try:
        if prob.sparse:
            from scipy.sparse.linalg import splu

            K = sp.bmat([[sp.csr_matrix(prob.Q), sp.csr_matrix(GA).T, sp.csr_matrix(prob.A).T],
                         [sp.csr_matrix(GA), sp.csr_matrix((k, k)), sp.csr_matrix((k, p))],
                         [sp.csr_matrix(prob.A), sp.csr_matrix((p, k)), sp.csr_matrix((p, p))]])
            sol = splu(sp.csc_matrix(K)).solve(rhs)
        else:
            K = np.zeros((n + k + p, n + k + p))
            K[:n, :n] = prob.Q
            K[:n, n:n + k], K[n:n + k, :n] = np.asarray(GA).T, GA
            K[:n, n + k:], K[n + k:, :n] = np.asarray(prob.A).T, prob.A
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ill-conditioned: judged by the checks below
                sol = sla.solve(K, rhs, assume_a="sym", check_finite=False)
    except (RuntimeError, np.linalg.LinAlgError, sla.LinAlgError, ValueError):
        return None
    if not np.all(np.isfinite(sol)):
        return None
    x2, nu_a, mu2 = sol[:n], sol[n:n + k], sol[n + k:]
    scale = 1e-9 * (1.0 + np.abs(prob.h).max(initial=0.0) + np.abs(nu).max(initial=0.0))
    if np.max(-prob.slack(x2), initial=0.0) > scale or np.min(nu_a, initial=0.0) < -scale:
        return None
    nu2 = np.zeros(prob.m)
    nu2[act] = np.maximum(nu_a, 0.0)
    return x2, nu2, mu2


def _unconstrained(prob: QPProblem, index: int | None) -> np.ndarray:
    Q = prob.Q.toarray() if sp.issparse(prob.Q) else prob.Q
    x, *_ = np.linalg.lstsq(Q, -prob.q, rcond=None)
    if np.linalg.norm(Q @ x + prob.q) > 1e-8 * (1 + np.linalg.norm(prob.q)):
        raise QPSolveError(f"{_where(index)}the QP is unbounded below: it has no constraints "
                           "and q is not in the range of Q; add constraints or make Q "
                           "positive definite")
    return x


def solve_qp(prob: QPProblem, solver: str = "clarabel", tol: float | None = None,
             active_tol: float = 1e-5, recover: str = "auto", options: dict | None = None,
             index: int | None = None, polish_solution: bool = False) -> QPResult:
    """Solve one QP with a ``qpsolvers`` backend (``"auto"``: see :func:`resolve_solver`).

    ``recover``: ``"auto"`` rebuilds duals only when the backend returns none, ``"always"``
    rebuilds them every time, ``"never"`` raises when they are missing. ``polish_solution``
    refines the point on its active set (:func:`polish`), which makes an inexact solver's
    point exact when the active set is identified correctly.
    """
    import qpsolvers

    if prob.m == 0 and prob.p == 0:
        return QPResult(_unconstrained(prob, index), eq_dual=np.zeros(0), ineq_dual=np.zeros(0),
                        solver="lstsq")
    solver = resolve_solver(solver, prob.sparse)
    check_solver(solver)
    qp = qpsolvers.Problem(prob.Q if not sp.issparse(prob.Q) else sp.csc_matrix(prob.Q),
                           prob.q, _block(prob.G) if prob.m else None, prob.h if prob.m else None,
                           _block(prob.A) if prob.p else None, prob.b if prob.p else None)
    # with the tight default tolerance an interior-point solver may stall short of it
    # (clarabel: InsufficientProgress); then retry once at a standard 1e-9
    tols = [tol] if tol is not None else [None, 1e-9]
    for attempt, t in enumerate(tols):
        kwargs = solver_options(solver, t)
        kwargs.update(options or {})
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sol = qpsolvers.solve_problem(qp, solver=solver, **kwargs)
        except Exception as exc:  # noqa: BLE001 - solvers raise anything; re-raise with context
            raise QPSolveError(f"{_where(index)}solver {solver!r} failed: {exc}") from exc
        status = str((sol.extras or {}).get("status", ""))
        ok = sol.found and sol.x is not None and np.all(np.isfinite(sol.x))
        if ok:
            break
        if attempt == len(tols) - 1 or "infeasible" in status.lower():
            msg = _failure_message(solver, status, index)
            if sp.issparse(prob.Q):
                msg += ("; note that a sparse Q is only checked for a non-negative diagonal, "
                        "so also make sure Q is positive semidefinite")
            raise QPSolveError(msg)
    x = np.asarray(sol.x, dtype=np.float64)
    missing = (prob.m and sol.z is None) or (prob.p and sol.y is None)
    recovered = recover == "always" or (recover == "auto" and missing)
    if recovered:
        nu, mu = recover_duals(prob, x, active_tol)
    elif missing:
        raise QPSolveError(f"{_where(index)}solver {solver!r} returned no duals: pass "
                           "recover='auto' to solve_qp (recover_duals='auto' to the layer, "
                           "dxpp_solve or differentiate) to rebuild them from stationarity, "
                           "or pick a solver that returns duals")
    else:
        nu = np.maximum(np.asarray(sol.z, dtype=np.float64), 0.0) if prob.m else np.zeros(0)
        mu = np.asarray(sol.y, dtype=np.float64) if prob.p else np.zeros(0)
    extras = {"status": status, "polished": False}
    if polish_solution:
        refined = polish(prob, x, nu, mu)
        if refined is not None:
            x, nu, mu = refined
            extras["polished"] = True
    viol = max(float(np.max(-prob.slack(x), initial=0.0)),
               float(np.max(np.abs(prob.A @ x - prob.b), initial=0.0)))
    allowed = 1e-5 if tol is None else max(1e-5, 10.0 * tol)
    if viol > allowed * (1 + np.abs(prob.h).max(initial=0) + np.abs(prob.b).max(initial=0)):
        raise QPSolveError(f"{_where(index)}solver {solver!r} returned a point violating the "
                           f"constraints by {viol:.3g}: the QP is probably infeasible; if "
                           "it is not, tighten tol or try solver='clarabel'")
    return QPResult(x, eq_dual=mu, ineq_dual=nu, solver=solver, duals_recovered=recovered,
                    extras=extras)


def _block(M: Any) -> Any:
    return sp.csc_matrix(M) if sp.issparse(M) else M


def _failure_message(solver: str, status: str, index: int | None) -> str:
    low = status.lower()
    if "primalinfeasible" in low.replace("_", "") or low.startswith("primal_infeasible"):
        why = "the constraints are infeasible: no x satisfies Gx <= h and Ax = b"
    elif "dualinfeasible" in low.replace("_", ""):
        why = "the QP is unbounded below: Q is singular along a feasible direction where qᵀx " \
              "decreases; add constraints or make Q positive definite"
    else:
        why = ("the QP may be infeasible (no x satisfies Gx <= h, Ax = b) or unbounded "
               "(Q singular along a feasible descent direction), or the solver did not converge")
    st = f" (status {status})" if status else ""
    return f"{_where(index)}solver {solver!r} found no solution{st}: {why}"
