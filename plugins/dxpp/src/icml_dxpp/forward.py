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
           "check_solver", "check_torch_options", "resolve_solver"]

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


def resolve_solver(solver: str, sparse: bool = False, Q: Any = None) -> str:
    """The backend ``"auto"`` (the default since 0.3.0) runs: piqp (``pip install piqp``; a
    dependency) whenever Q is known to be positive semidefinite — dense Q (checked by the input
    checks) or a sparse Q that is diagonally dominant with a non-negative diagonal (Gershgorin;
    the simplex and chain families are) — and clarabel otherwise: a sparse Q is only checked on
    its diagonal, and on an indefinite Q piqp returns a stationary point without an error where
    clarabel reports the failure. :func:`solve_qp` follows piqp with :func:`polish` and falls
    back to clarabel at 1e-12 when the polished point does not verify. Any other name is
    returned unchanged."""
    if solver != "auto":
        return solver
    import qpsolvers

    if "piqp" not in qpsolvers.available_solvers:
        return "clarabel"
    if sparse and (Q is None or not _diagonally_dominant(Q)):
        return "clarabel"
    return "piqp"


def _diagonally_dominant(Q: Any) -> bool:
    """Q has a non-negative diagonal that dominates each row's off-diagonal |entries| (so it is
    PSD by Gershgorin's theorem). Sparse or dense; O(nnz)."""
    if sp.issparse(Q):
        Qc = sp.csr_matrix(Q)
        d = Qc.diagonal()
        off = np.asarray(abs(Qc).sum(axis=1)).reshape(-1) - np.abs(d)
    else:
        Qa = np.asarray(Q)
        d = np.diagonal(Qa)
        off = np.abs(Qa).sum(axis=1) - np.abs(d)
    return bool(np.all(d >= 0) and np.all(d >= off * (1 - 1e-12)))


def check_solver(solver: str) -> None:
    """Raise a clear error when ``solver`` is not an installed qpsolvers backend."""
    import qpsolvers

    if solver in ("auto", "torch") or solver in qpsolvers.available_solvers:
        return
    known = sorted(set(qpsolvers.available_solvers))
    if solver not in _PIP:  # a typo, not a missing package: no `pip install <typo>`
        raise QPInputError(f"QP solver {solver!r} is not a qpsolvers backend: use 'auto', "
                           "'torch' (batched dense interior point) or one "
                           f"of the installed solvers {known} (known backends: "
                           f"{', '.join(sorted(_PIP))})")
    raise QPInputError(f"QP solver {solver!r} is not installed: run `{_PIP[solver]}` or pick "
                       f"one of the installed solvers {known}")


_DEFAULT_TOL = {"clarabel": 1e-12, "osqp": 1e-10, "piqp": 1e-10, "proxqp": 1e-10,
                "cvxopt": 1e-10}
# under solver="auto" piqp only has to identify the active set: polish() makes the point exact
# (interior-point iterations are few, so its time hardly depends on this; benchmarks/forward.py)
_AUTO_PIQP_TOL = 1e-8


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


def polish(prob: QPProblem, x: np.ndarray | None, nu: np.ndarray | None,
           mu: np.ndarray | None, active: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Active-set refinement of an approximate solution (as OSQP's polishing does).

    Guess the active set {i : νᵢ > hᵢ − Gᵢx} (or take ``active``, e.g. the previous call's, for
    a warm start), solve the equality-constrained KKT system on it exactly and keep the result
    only if it is a verified KKT point of the whole QP — primal feasible, ν ≥ 0 and stationary,
    each to 1e-9 relative — hence, for a convex QP, optimal; otherwise return None and the
    solver's point is kept. Active rows with a single non-zero (variable bounds, e.g. the
    simplex's x ≥ 0) fix their variable and are eliminated before the solve, so only the free
    variables enter the KKT system; their duals come from stationarity.
    """
    if active is None:
        act = np.flatnonzero(nu > prob.slack(x))
    else:
        act = np.asarray(active, dtype=np.int64).reshape(-1)
    n, p = prob.n, prob.p
    GA = prob.G[act]
    try:
        fixed_rows, cols, vals = _bound_rows(GA)
        general = np.setdiff1d(np.arange(act.size), fixed_rows, assume_unique=True)
        xf = np.asarray(prob.h[act[fixed_rows]]) / vals
        free = np.setdiff1d(np.arange(n), cols, assume_unique=True)
        C = _stack_rows(GA[general], prob.A)
        d = np.concatenate([prob.h[act[general]], prob.b])
        Q = prob.Q
        sol = _kkt_solve(_sub(Q, free, free), _sub(C, None, free),
                         -prob.q[free] - _mv(_sub(Q, free, cols), xf),
                         d - _mv(_sub(C, None, cols), xf))
    except (RuntimeError, np.linalg.LinAlgError, ValueError):
        return None
    if sol is None or not np.all(np.isfinite(sol)):
        return None
    x2 = np.empty(n)
    x2[cols], x2[free] = xf, sol[:free.size]
    lam = sol[free.size:]
    nu_a = np.zeros(act.size)
    nu_a[general] = lam[:general.size]
    mu2 = lam[general.size:]
    # duals of the eliminated bounds from stationarity at their columns
    grad = _mv(Q, x2) + prob.q + (_mv(_sub(C, None, None).T, lam) if lam.size else 0.0)
    nu_a[fixed_rows] = -grad[cols] / vals
    nu2 = np.zeros(prob.m)
    nu2[act] = nu_a
    scale = 1e-9 * (1.0 + np.abs(prob.h).max(initial=0.0) + np.abs(prob.b).max(initial=0.0)
                    + np.abs(nu_a).max(initial=0.0) + np.abs(mu2).max(initial=0.0))
    if np.max(-prob.slack(x2), initial=0.0) > scale or np.min(nu_a, initial=0.0) < -scale:
        return None
    if p and np.max(np.abs(_mv(prob.A, x2) - prob.b), initial=0.0) > scale:
        return None
    stat = _mv(Q, x2) + prob.q + _mv(prob.G.T, nu2) + (_mv(prob.A.T, mu2) if p else 0.0)
    stat_scale = 1e-9 * (1.0 + np.abs(prob.q).max(initial=0.0) + np.abs(_mv(Q, x2)).max())
    if np.max(np.abs(stat), initial=0.0) > stat_scale:
        return None
    return x2, np.maximum(nu2, 0.0), mu2


def _mv(M: Any, v: np.ndarray) -> np.ndarray:
    return np.asarray(M @ v, dtype=np.float64).reshape(-1)


def _sub(M: Any, rows: np.ndarray | None, cols: np.ndarray | None) -> Any:
    if sp.issparse(M):
        M = sp.csr_matrix(M)
        if rows is not None:
            M = M[rows]
        return M if cols is None else sp.csc_matrix(M)[:, cols]
    M = np.asarray(M)
    if rows is not None:
        M = M[rows]
    return M if cols is None else M[:, cols]


def _stack_rows(B1: Any, B2: Any) -> Any:
    if sp.issparse(B1) or sp.issparse(B2):
        return sp.vstack([sp.csr_matrix(B1), sp.csr_matrix(B2)]).tocsr()
    return np.vstack([np.asarray(B1).reshape(-1, B2.shape[1]), np.asarray(B2)])


def _bound_rows(GA: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of G_𝒜 with one non-zero (variable bounds): (row index, column, value), at most one
    row per column (duplicate bounds stay general rows)."""
    if GA.shape[0] == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    if sp.issparse(GA):
        M = sp.csr_matrix(GA)
        M.eliminate_zeros()
        one = np.flatnonzero(np.diff(M.indptr) == 1)
        cols = M.indices[M.indptr[one]]
        vals = M.data[M.indptr[one]]
    else:
        M = np.asarray(GA)
        nz = M != 0
        one = np.flatnonzero(nz.sum(axis=1) == 1)
        cols = np.argmax(nz[one], axis=1) if one.size else np.zeros(0, np.int64)
        vals = M[one, cols]
    _, first = np.unique(cols, return_index=True)
    first = np.sort(first)
    return one[first], cols[first].astype(np.int64), np.asarray(vals[first], dtype=np.float64)


def _kkt_solve(Q: Any, C: Any, r1: np.ndarray, r2: np.ndarray) -> np.ndarray | None:
    """Solve [[Q, Cᵀ], [C, 0]] [x; λ] = [r1; r2] (dense: Bunch-Kaufman; sparse: SuperLU)."""
    import scipy.linalg as sla

    nf, k = Q.shape[0], C.shape[0]
    rhs = np.concatenate([r1, r2])
    if nf + k == 0:
        return np.zeros(0)
    if (sp.issparse(Q) or sp.issparse(C)) and nf + k > 1500:
        from scipy.sparse.linalg import splu

        if k == 0:
            return splu(sp.csc_matrix(Q)).solve(rhs)
        K = sp.bmat([[sp.csr_matrix(Q), sp.csr_matrix(C).T],
                     [sp.csr_matrix(C), None]], format="csc")
        if K.shape != (nf + k, nf + k):  # bmat drops an all-empty block row/column
            K = sp.csc_matrix(K, shape=(nf + k, nf + k))
        return splu(K, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.1).solve(rhs)
    K = np.zeros((nf + k, nf + k))
    K[:nf, :nf] = Q.toarray() if sp.issparse(Q) else Q
    Cd = C.toarray() if sp.issparse(C) else np.asarray(C)
    K[:nf, nf:], K[nf:, :nf] = Cd.T, Cd
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ill-conditioned: judged by the checks in polish
        return sla.solve(K, rhs, assume_a="sym", check_finite=False)


def _unconstrained(prob: QPProblem, index: int | None) -> np.ndarray:
    Q = prob.Q.toarray() if sp.issparse(prob.Q) else prob.Q
    x, *_ = np.linalg.lstsq(Q, -prob.q, rcond=None)
    if np.linalg.norm(Q @ x + prob.q) > 1e-8 * (1 + np.linalg.norm(prob.q)):
        raise QPSolveError(f"{_where(index)}the QP is unbounded below: it has no constraints "
                           "and q is not in the range of Q; add constraints or make Q "
                           "positive definite")
    return x


def solve_qp(prob: QPProblem, solver: str = "auto", tol: float | None = None,
             active_tol: float = 1e-5, recover: str = "auto", options: dict | None = None,
             index: int | None = None, polish_solution: bool = False,
             warm_active: np.ndarray | None = None) -> QPResult:
    """Solve one QP with a ``qpsolvers`` backend.

    ``solver="auto"`` (the default): piqp at 1e-8 (``tol`` overrides), then :func:`polish` (an
    exact KKT solve on its active set, verified); if piqp fails or the polished point does not
    verify, clarabel at its tight default — see :func:`resolve_solver` for when clarabel runs
    directly. ``extras["path"]`` says which path gave the point. ``warm_active`` (an active set,
    e.g. the previous call's ``extras["active"]``): first try :func:`polish` on it without
    running any solver; kept only if it verifies as optimal, so warm and cold calls give the
    same solution.

    ``recover``: ``"auto"`` rebuilds duals only when the backend returns none, ``"always"``
    rebuilds them every time, ``"never"`` raises when they are missing. ``polish_solution``
    refines any solver's point on its active set (:func:`polish`), which makes an inexact
    solver's point exact when the active set is identified correctly.
    """
    if prob.m == 0 and prob.p == 0:
        return QPResult(_unconstrained(prob, index), eq_dual=np.zeros(0), ineq_dual=np.zeros(0),
                        solver="lstsq")
    if warm_active is not None and recover != "always" and (
            not prob.sparse or _diagonally_dominant(prob.Q)):  # a KKT point is optimal
        warm = polish(prob, None, None, None, active=warm_active)
        if warm is not None:
            x, nu, mu = warm
            return QPResult(x, eq_dual=mu, ineq_dual=nu, solver="warm",
                            extras={"status": "warm", "polished": True, "path": "warm",
                                    "active": _active_of(prob, x, nu)})
    if solver == "torch":
        return _solve_torch(prob, tol, options, index, active_tol, recover)
    auto = solver == "auto"
    solver = resolve_solver(solver, prob.sparse, prob.Q)
    check_solver(solver)
    if auto and solver == "piqp":
        try:
            res = _solve_with(prob, "piqp", _AUTO_PIQP_TOL if tol is None else tol, active_tol,
                              recover, options, index, polish_solution=True)
            if res.extras["polished"]:
                res.extras["path"] = "piqp+polish"
                return res
            why = "polish did not verify"
        except QPSolveError as exc:
            why = f"piqp failed ({exc})"
        res = _solve_with(prob, "clarabel", tol, active_tol, recover, None, index,
                          polish_solution=polish_solution)
        res.extras["path"] = f"clarabel (fallback: {why})"
        return res
    res = _solve_with(prob, solver, tol, active_tol, recover, options, index, polish_solution)
    res.extras["path"] = solver + ("+polish" if res.extras["polished"] else "")
    return res


def check_torch_options(options: dict | None) -> dict:
    """``solver_options`` of the torch solver: only ``max_iter`` (an int >= 1)."""
    from icml_dxpp.batched import TORCH_SOLVER_OPTIONS

    opts = dict(options or {})
    unknown = sorted(set(opts) - set(TORCH_SOLVER_OPTIONS))
    if unknown:
        raise QPInputError(f"solver_options {unknown} are not options of solver 'torch': it "
                           f"takes {sorted(TORCH_SOLVER_OPTIONS)}")
    it = opts.get("max_iter", TORCH_SOLVER_OPTIONS["max_iter"])
    if isinstance(it, bool) or not isinstance(it, int) or it < 1:
        raise QPInputError(f"solver_options max_iter: got {it!r}, must be an integer >= 1")
    return {**TORCH_SOLVER_OPTIONS, **opts}


def _solve_torch(prob: QPProblem, tol: float | None, options: dict | None, index: int | None,
                 active_tol: float, recover: str) -> QPResult:
    """One dense QP through the batched torch solver (:mod:`icml_dxpp.batched`), a batch of one;
    a point that does not verify goes to the default path (``solver="auto"``)."""
    import torch

    from icml_dxpp.batched import solve_batch

    if prob.sparse:
        raise QPInputError(f"{_where(index)}solver 'torch' (the batched dense interior point) "
                           "takes dense problems: use solver='auto' for sparse ones")
    opts = check_torch_options(options)
    T = [torch.as_tensor(np.asarray(v, dtype=np.float64)).unsqueeze(0)
         for v in (prob.Q, prob.q, prob.G, prob.h, prob.A, prob.b)]
    res = solve_batch(*T, tol=tol, max_iter=opts["max_iter"])
    if not bool(res.ok[0]):
        out = solve_qp(prob, "auto", tol, active_tol, recover, None, index)
        out.extras["path"] = f"torch -> {out.extras['path']}"
        return out
    x, nu, mu = (t[0].numpy() for t in (res.x, res.nu, res.mu))
    return QPResult(x, eq_dual=mu, ineq_dual=nu, solver="torch",
                    extras={"status": "solved", "polished": True, "path": "torch",
                            "iterations": res.iterations, "active": _active_of(prob, x, nu)})


def _active_of(prob: QPProblem, x: np.ndarray, nu: np.ndarray) -> np.ndarray:
    return np.flatnonzero(nu > prob.slack(x))


def _solve_with(prob: QPProblem, solver: str, tol: float | None, active_tol: float,
                recover: str, options: dict | None, index: int | None,
                polish_solution: bool) -> QPResult:
    import qpsolvers

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
    extras: dict[str, Any] = {"status": status, "polished": False}
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
    extras["active"] = _active_of(prob, x, nu)
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
