"""KKT-based backward: the reference dXPP is compared against, and a user option.

``reduced`` (dQP-style): the symmetric indefinite system on the active set 𝒜,

    [Q  G_𝒜ᵀ  Aᵀ] [v ]   [ḡₓ    ]
    [G_𝒜  0   0 ] [η ] = [ḡ_ν,𝒜 ]        r_𝒜 = η,  s = λ_μ
    [A    0   0 ] [λ_μ]  [ḡ_μ   ]

``full`` (OptNet-style): the transposed Jacobian of the KKT conditions
(Qx + q + Gᵀν + Aᵀμ = 0, diag(ν)(Gx − h) = 0, Ax = b) over all m rows,

    [Q   Gᵀdiag(ν)   Aᵀ] [v  ]   [ḡₓ ]
    [G   diag(Gx−h)  0 ] [λ_ν] = [ḡ_ν]     r = ν ⊙ λ_ν,  s = λ_μ
    [A   0           0 ] [λ_μ]   [ḡ_μ]

Both feed :func:`icml_dxpp.gradients.assemble_grads`. Dense systems use LAPACK, sparse ones
SciPy's sparse LU; a singular system (LICQ fails) falls back to least squares.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from icml_dxpp.gradients import assemble_grads
from icml_dxpp.qp import QPProblem

__all__ = ["kkt_backward"]


def _solve(K: Any, rhs: np.ndarray, symmetric: bool) -> np.ndarray:
    import scipy.linalg as sla

    if sp.issparse(K):
        from scipy.sparse.linalg import lsqr, splu

        try:
            return splu(sp.csc_matrix(K)).solve(rhs)
        except RuntimeError:  # exactly singular
            return lsqr(K, rhs, atol=1e-14, btol=1e-14)[0]
    try:
        with np.errstate(all="ignore"):
            out = sla.solve(K, rhs, assume_a="sym" if symmetric else "gen", check_finite=False)
        if np.all(np.isfinite(out)):
            return out
    except (np.linalg.LinAlgError, sla.LinAlgError):
        pass
    return np.linalg.lstsq(K, rhs, rcond=None)[0]


def kkt_backward(prob: QPProblem, x: np.ndarray, nu: np.ndarray, mu: np.ndarray,
                 grad_x: np.ndarray | None, grad_nu: np.ndarray | None = None,
                 grad_mu: np.ndarray | None = None, mode: str = "reduced",
                 active_tol: float = 1e-5) -> tuple[dict[str, Any], dict[str, Any]]:
    """KKT gradients of ℓ w.r.t. (Q, q, G, h, A, b); ``mode`` is ``"reduced"`` or ``"full"``."""
    n, m, p = prob.n, prob.m, prob.p
    gx = np.zeros(n) if grad_x is None else np.asarray(grad_x, dtype=np.float64)
    gnu = np.zeros(m) if grad_nu is None else np.asarray(grad_nu, dtype=np.float64)
    gmu = np.zeros(p) if grad_mu is None else np.asarray(grad_mu, dtype=np.float64)
    use_sparse = prob.sparse
    if mode == "reduced":
        active = np.flatnonzero(prob.slack(x) < active_tol)
        GA = prob.G[active]
        k = active.size
        blocks = [[prob.Q, GA.T, prob.A.T], [GA, None, None], [prob.A, None, None]]
        rhs = np.concatenate([gx, gnu[active], gmu])
        K = _sparse_bmat(blocks, n, k, p) if use_sparse else _dense_bmat(blocks, n, k, p)
        sol = _solve(K, rhs, symmetric=True)
        v, eta, s = sol[:n], sol[n:n + k], sol[n + k:]
        r = np.zeros(m)
        r[active] = eta
        nu_used = np.zeros(m)
        nu_used[active] = nu[active]
    elif mode == "full":
        slack = prob.G @ x - prob.h  # Gx − h (≤ 0)
        blocks = [[prob.Q, _scale_cols(prob.G.T, nu), prob.A.T],
                  [prob.G, _diag(slack, use_sparse), None],
                  [prob.A, None, None]]
        rhs = np.concatenate([gx, gnu, gmu])
        K = _sparse_bmat(blocks, n, m, p) if use_sparse else _dense_bmat(blocks, n, m, p)
        sol = _solve(K, rhs, symmetric=False)
        v, lam_nu, s = sol[:n], sol[n:n + m], sol[n + m:]
        r = nu * lam_nu
        nu_used = nu
    else:
        raise ValueError(f"kkt mode {mode!r} is unknown: use 'reduced' or 'full'")
    return assemble_grads(prob, x, nu_used, mu, v, r, s), {"linear_solver": f"kkt-{mode}"}


def _scale_cols(M: Any, d: np.ndarray) -> Any:
    return M @ sp.diags(d) if sp.issparse(M) else M * d


def _diag(d: np.ndarray, sparse: bool) -> Any:
    return sp.diags(d) if sparse else np.diag(d)


def _dense_bmat(blocks: list[list[Any]], n: int, k: int, p: int) -> np.ndarray:
    sizes = [n, k, p]
    K = np.zeros((n + k + p, n + k + p))
    offs = [0, n, n + k]
    for i, row in enumerate(blocks):
        for j, B in enumerate(row):
            if B is None or sizes[i] == 0 or sizes[j] == 0:
                continue
            K[offs[i]:offs[i] + sizes[i], offs[j]:offs[j] + sizes[j]] = (
                B.toarray() if sp.issparse(B) else B)
    return K


def _sparse_bmat(blocks: list[list[Any]], n: int, k: int, p: int) -> sp.csc_matrix:
    sizes = [n, k, p]
    rows = [[sp.csr_matrix(B) if B is not None else sp.csr_matrix((sizes[i], sizes[j]))
             for j, B in enumerate(row)] for i, row in enumerate(blocks)]
    return sp.csc_matrix(sp.bmat(rows))
