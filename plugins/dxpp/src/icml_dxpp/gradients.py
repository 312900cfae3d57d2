"""Gradient assembly shared by the dXPP and KKT backwards.

Both backwards reduce to three vectors: ``v`` (n, the primal adjoint), ``r`` (one entry per
inequality row, zero off the active set) and ``s`` (p). Then

    ∂ℓ/∂q = −v              ∂ℓ/∂Q = −½(v xᵀ + x vᵀ)
    ∂ℓ/∂h = r               ∂ℓ/∂G = −(ν vᵀ + r xᵀ)
    ∂ℓ/∂b = s               ∂ℓ/∂A = −(μ vᵀ + s xᵀ)

For a sparse matrix input the gradient is returned on its sparsity pattern (a sparse matrix of
the same shape), which is the gradient with respect to its stored values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from icml_dxpp.qp import QPProblem

__all__ = ["assemble_grads"]


def _outer(pattern: Any, u: np.ndarray, w: np.ndarray, scale: float = 1.0) -> Any:
    """scale·u wᵀ, dense, or restricted to the sparsity pattern of ``pattern`` (CSR)."""
    if sp.issparse(pattern):
        P = pattern if pattern.format == "csr" else sp.csr_matrix(pattern)
        rows = np.repeat(np.arange(P.shape[0]), np.diff(P.indptr))
        vals = scale * u[rows] * w[P.indices]
        return sp.csr_matrix((vals, P.indices.copy(), P.indptr.copy()), shape=P.shape)
    return scale * np.outer(u, w)


def assemble_grads(prob: QPProblem, x: np.ndarray, nu: np.ndarray, mu: np.ndarray,
                   v: np.ndarray, r: np.ndarray, s: np.ndarray) -> dict[str, Any]:
    """The six gradients from the adjoint vectors (see the module docstring)."""
    dQ = _outer(prob.Q, v, x, -0.5)
    dQ = dQ + dQ.T
    rows = np.flatnonzero((nu != 0) | (r != 0))  # rows with a non-zero gradient
    if sp.issparse(prob.G):
        dG = _outer(prob.G, nu, v, -1.0) - _outer(prob.G, r, x)
    else:
        dG = np.zeros(prob.G.shape)
        dG[rows] = -(np.outer(nu[rows], v) + np.outer(r[rows], x))
    dA = _outer(prob.A, mu, v, -1.0) - _outer(prob.A, s, x)
    return {"Q": dQ, "q": -v, "G": dG, "h": r.copy(), "A": dA, "b": s.copy()}
