"""Solvers for dXPP's SPD system  H v = g,  H = Q + G_𝒜ᵀ W_I G_𝒜 + Aᵀ W_E A + ridge·I.

* ``dense``: Cholesky (LU if Cholesky fails, e.g. when Q is far from PSD numerically).
* ``sparse``: sparse LU of H. When AᵀW_EA would fill in (an equality row with many non-zeros,
  like the simplex's 1ᵀx = 1), H is split as H₀ + AᵀW_EA and solved with the Woodbury identity,
  which needs p solves with the sparse H₀ and a p×p dense system instead of a dense n×n matrix.
  If the sparse factor does not fit in memory, matrix-free CG is used instead (with a warning).
* ``cg``: matrix-free conjugate gradients with a Jacobi preconditioner; the true residual is
  checked afterwards and a direct solve is used when CG did not reach ``tol`` (the official code's
  MINRES fallback reports success while its residual is still large; see the README).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["PenaltySystem", "solve_system"]


@dataclass
class PenaltySystem:
    """The pieces of H, kept separate so every solver can use the form it likes."""

    Q: Any
    GA: Any  # active rows of G (k × n)
    wI: np.ndarray  # (k,)
    A: Any  # (p × n)
    wE: np.ndarray  # (p,)
    ridge: float

    @property
    def n(self) -> int:
        return int(self.Q.shape[0])

    @property
    def sparse(self) -> bool:
        return any(sp.issparse(M) for M in (self.Q, self.GA, self.A))

    def matvec(self, v: np.ndarray) -> np.ndarray:
        out = self.Q @ v + self.ridge * v
        if self.GA.shape[0]:
            out = out + self.GA.T @ (self.wI * (self.GA @ v))
        if self.A.shape[0]:
            out = out + self.A.T @ (self.wE * (self.A @ v))
        return np.asarray(out).reshape(-1)

    def diagonal(self) -> np.ndarray:
        def sq(M: Any) -> Any:
            return M.multiply(M) if sp.issparse(M) else M * M

        d = np.asarray(self.Q.diagonal()).reshape(-1) + self.ridge
        if self.GA.shape[0]:
            d = d + np.asarray(sq(self.GA).T @ self.wI).reshape(-1)
        if self.A.shape[0]:
            d = d + np.asarray(sq(self.A).T @ self.wE).reshape(-1)
        return d

    def dense(self) -> np.ndarray:
        def arr(M: Any) -> np.ndarray:
            return M.toarray() if sp.issparse(M) else np.asarray(M)

        Q, GA, A = arr(self.Q), arr(self.GA), arr(self.A)
        H = Q + (GA.T * self.wI) @ GA + (A.T * self.wE) @ A
        H[np.diag_indices_from(H)] += self.ridge
        return H

    def sparse_base(self) -> sp.csc_matrix:
        """H₀ = Q + G_𝒜ᵀ W_I G_𝒜 + ridge·I as a sparse matrix."""
        Q, GA = sp.csr_matrix(self.Q), sp.csr_matrix(self.GA)
        H0 = Q + sp.identity(self.n, format="csr") * self.ridge
        if GA.shape[0]:
            H0 = H0 + GA.T @ sp.diags(self.wI) @ GA
        return sp.csc_matrix(H0)


_MAX_AMPLIFICATION = 1e5  # max|H₀⁻¹Aᵀ|·max Qᵢᵢ / max|A| above which Woodbury is not trusted
_MAX_FILL = 2e7  # non-zeros of H = H₀ + AᵀW_EA we are willing to factor instead


def _fill(A: sp.csr_matrix, H0: sp.spmatrix) -> float:
    row_nnz = np.diff(A.indptr).astype(np.float64)
    return float(row_nnz @ row_nnz) + H0.nnz


def _woodbury_pays(A: sp.csr_matrix, H0: sp.spmatrix) -> bool:
    row_nnz = np.diff(A.indptr).astype(np.float64)
    return A.shape[0] > 0 and float(row_nnz @ row_nnz) > 4.0 * (H0.nnz + A.shape[1])


def _solve_dense(S: PenaltySystem, g: np.ndarray) -> np.ndarray:
    import scipy.linalg as sla

    H = S.dense()
    try:
        return sla.cho_solve(sla.cho_factor(H, lower=True, check_finite=False), g,
                             check_finite=False)
    except (np.linalg.LinAlgError, sla.LinAlgError):
        return sla.lu_solve(sla.lu_factor(H, check_finite=False), g, check_finite=False)


def _factor(H: sp.spmatrix) -> Any:
    """A solver for the SPD sparse matrix H: division when H is diagonal, else sparse LU with
    a symmetric ordering."""
    from scipy.sparse.linalg import splu

    H = sp.csc_matrix(H)
    coo = H.tocoo()
    if np.array_equal(coo.row, coo.col):  # diagonal (e.g. simplex or box projections)
        d = H.diagonal()
        return lambda rhs: rhs / (d[:, None] if np.ndim(rhs) == 2 else d)
    lu = splu(H, permc_spec="MMD_AT_PLUS_A", options={"SymmetricMode": True})
    return lu.solve


def _solve_sparse(S: PenaltySystem, g: np.ndarray, extra: dict | None = None) -> np.ndarray:
    H0 = S.sparse_base()
    A = sp.csr_matrix(S.A)
    if A.shape[0] and _woodbury_pays(A, H0):
        solve = _factor(H0)
        Y = solve(np.asarray(A.T.toarray()))  # H₀⁻¹Aᵀ, n × p
        y = solve(g)
        C = np.diag(1.0 / S.wE) + A @ Y  # W_E⁻¹ + A H₀⁻¹ Aᵀ
        z = np.linalg.solve(C, A @ y)
        v = y - Y @ z
        # H₀ can be near-singular (Q singular off the active set, pinned only by A): then
        # Y = H₀⁻¹Aᵀ ~ A/ridge, v = y − Yz cancels that many digits and G_𝒜v (hence ∂h, ∂G)
        # is lost. Factor H itself in that case, when its fill is affordable.
        q_scale = max(float(np.abs(S.Q.diagonal()).max(initial=0.0)), S.ridge)
        amplification = np.abs(Y).max() * q_scale / max(float(abs(A).max()), 1e-300)
        cancelled = amplification > _MAX_AMPLIFICATION
        if cancelled and _fill(A, H0) <= _MAX_FILL:
            return _factor(H0 + A.T @ sp.diags(S.wE) @ A)(g)
        if cancelled:
            warnings.warn("dXPP: the Woodbury solve lost accuracy (Q is near-singular off the "
                          "active set) and H is too dense to factor; gradients of h and G may "
                          "be inaccurate: pass linear_solver='dense' or a positive definite Q",
                          stacklevel=4)
        if extra is not None:
            # A v = Ay − AYz = W_E⁻¹z exactly; computed as a difference it cancels to noise
            # when H₀ is near-singular (y, Y ~ 1/ridge)
            extra["Av"] = z / S.wE
        return v
    H = H0 + (A.T @ sp.diags(S.wE) @ A if A.shape[0] else 0)
    return _factor(H)(g)


_CONTROLLER: Any = None


def _one_blas_thread() -> Any:
    """A context limiting BLAS to one thread. CG's BLAS calls are level-1 (dot, norm) on
    vectors: a second thread gains nothing and, on a loaded machine, each call waits for it
    (simplex n = 10⁵ at 2 threads: 146 ms in 10 norms). The controller is built once."""
    global _CONTROLLER
    if _CONTROLLER is None:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1, user_api="blas")


def _solve_cg(S: PenaltySystem, g: np.ndarray, tol: float, maxiter: int | None
              ) -> tuple[np.ndarray, dict[str, Any]]:
    with _one_blas_thread():
        return _solve_cg_unlimited(S, g, tol, maxiter)


def _solve_cg_unlimited(S: PenaltySystem, g: np.ndarray, tol: float, maxiter: int | None
                        ) -> tuple[np.ndarray, dict[str, Any]]:
    from scipy.sparse.linalg import LinearOperator, cg

    n = S.n
    dinv = 1.0 / S.diagonal()
    H = LinearOperator((n, n), matvec=S.matvec, dtype=np.float64)
    M = LinearOperator((n, n), matvec=lambda r: dinv * r, dtype=np.float64)
    iters = [0]

    def count(_: np.ndarray) -> None:
        iters[0] += 1

    v, _info = cg(H, g, rtol=tol, atol=0.0, maxiter=maxiter or 10 * n, M=M, callback=count)
    res = float(np.linalg.norm(S.matvec(v) - g) / max(np.linalg.norm(g), 1e-300))
    return v, {"cg_iters": iters[0], "cg_residual": res}


def solve_system(S: PenaltySystem, g: np.ndarray, method: str = "auto", cg_tol: float = 1e-8,
                 cg_maxiter: int | None = None, cg_min_n: int | None = 50_000
                 ) -> tuple[np.ndarray, dict[str, Any]]:
    """Solve H v = g. Returns v and a dict saying which solver ran (and CG's residual; the
    Woodbury path adds ``"Av"``, A v computed without cancellation).

    ``auto``: dense systems → ``dense``; sparse systems with n ≥ ``cg_min_n`` → CG (the
    official code's size rule), whose true residual is checked and which falls back to the
    direct sparse solve silently (``info["linear_solver"] == "auto:cg->direct"``); smaller
    sparse systems → ``sparse``."""
    if method in ("auto", "batched"):  # 'batched' is the layer's torch path; here: auto
        if S.sparse and cg_min_n is not None and S.n >= cg_min_n:
            v, info = _solve_cg(S, g, cg_tol, cg_maxiter or 50)
            if info["cg_residual"] <= 10 * cg_tol:
                return v, {"linear_solver": "auto:cg", **info}
            wood: dict[str, Any] = {}
            v = _solve_sparse(S, g, wood)
            return v, {"linear_solver": "auto:cg->direct", **info, **wood}
        method = "sparse" if S.sparse else "dense"
    if method == "dense":
        return _solve_dense(S, g), {"linear_solver": "dense"}
    if method == "sparse":
        try:
            extra: dict[str, Any] = {}
            v = _solve_sparse(S, g, extra)
            return v, {"linear_solver": "sparse", **extra}
        except MemoryError:  # the factor does not fit: matrix-free fallback
            warnings.warn("dXPP: the sparse factorisation ran out of memory; using "
                          "matrix-free CG", stacklevel=3)
            v, info = _solve_cg(S, g, cg_tol, cg_maxiter)
            if info["cg_residual"] > 10 * cg_tol:
                warnings.warn(f"dXPP: CG stopped at relative residual "
                              f"{info['cg_residual']:.2e}; the gradient is approximate",
                              stacklevel=3)
            return v, {"linear_solver": "sparse->cg", **info}
    if method == "cg":
        v, info = _solve_cg(S, g, cg_tol, cg_maxiter)
        if info["cg_residual"] <= 10 * cg_tol:
            return v, {"linear_solver": "cg", **info}
        warnings.warn(f"dXPP: CG stopped at relative residual {info['cg_residual']:.2e} > "
                      f"{10 * cg_tol:.1e}; falling back to a direct solve", stacklevel=3)
        v = _solve_sparse(S, g) if S.sparse else _solve_dense(S, g)
        return v, {"linear_solver": "cg->direct", **info}
    raise ValueError(f"linear_solver {method!r} is unknown: use 'auto', 'dense', 'sparse' or "
                     "'cg'")
