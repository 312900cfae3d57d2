"""One QP in NumPy/SciPy form, and the input checks every entry point runs.

    minimise ½ xᵀQx + qᵀx   subject to   Gx ≤ h,  Ax = b

``Q``, ``G`` and ``A`` may be dense arrays or SciPy sparse matrices; ``G``/``A`` have zero rows
when a constraint block is absent. Every error is a :class:`QPInputError` (a ``ValueError``)
whose message names the problem and the fix, prefixed by the batch index when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["QPInputError", "QPSolveError", "QPProblem", "make_problem"]


class QPInputError(ValueError):
    """A QP's data is malformed (shape, NaN/Inf, non-symmetric or indefinite Q)."""


class QPSolveError(RuntimeError):
    """The forward solver found no solution (infeasible, unbounded, or not converged)."""


def _where(index: int | None) -> str:
    return "" if index is None else f"QP #{index} in the batch: "


@dataclass
class QPProblem:
    """One QP. Dense matrices are ``np.ndarray``; sparse ones are ``scipy.sparse.csr_matrix``."""

    Q: Any
    q: np.ndarray
    G: Any
    h: np.ndarray
    A: Any
    b: np.ndarray

    @property
    def n(self) -> int:
        return int(self.q.shape[0])

    @property
    def m(self) -> int:
        return int(self.h.shape[0])

    @property
    def p(self) -> int:
        return int(self.b.shape[0])

    @property
    def sparse(self) -> bool:
        return any(sp.issparse(M) for M in (self.Q, self.G, self.A))

    def slack(self, x: np.ndarray) -> np.ndarray:
        """h − Gx (non-negative at a feasible point)."""
        return self.h - self.G @ x

    def objective(self, x: np.ndarray) -> float:
        return float(0.5 * x @ (self.Q @ x) + self.q @ x)


def _as_matrix(M: Any, name: str, index: int | None) -> Any:
    if sp.issparse(M):
        return sp.csr_matrix(M, dtype=np.float64)
    arr = np.asarray(M, dtype=np.float64)
    if arr.ndim != 2:
        raise QPInputError(f"{_where(index)}{name} must be a matrix (2-D), got shape "
                           f"{arr.shape}; pass one problem at a time here or use dxpp_solve "
                           "for batches")
    return arr


def _as_vector(v: Any, name: str, index: int | None) -> np.ndarray:
    arr = np.asarray(v, dtype=np.float64)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    if arr.ndim != 1:
        raise QPInputError(f"{_where(index)}{name} must be a vector (1-D), got shape {arr.shape}")
    return arr


def _finite(M: Any) -> bool:
    data = M.data if sp.issparse(M) else M
    return bool(np.all(np.isfinite(data)))



def _constraint_block(M: Any, v: Any, names: tuple[str, str, str], n: int, index: Any,
                      where: str) -> tuple[np.ndarray, np.ndarray]:
    """Checked ``(matrix, vector)`` of one constraint block (``G x <= h`` or ``A x = b``);
    an absent block is ``0 x n``."""
    mat, vec, rows = names
    if M is None:
        return np.zeros((0, n)), np.zeros(0)
    Mm, vv = _as_matrix(M, mat, index), _as_vector(v, vec, index)
    if Mm.shape[1] != n:
        raise QPInputError(f"{where}{mat} has {Mm.shape[1]} columns but the problem has "
                           f"n = {n} variables (length of q): {mat} must be ({rows}, {n})")
    if Mm.shape[0] != vv.shape[0]:
        raise QPInputError(f"{where}{mat} has {Mm.shape[0]} rows but {vec} has length "
                           f"{vv.shape[0]}: they must match")
    return Mm, vv

def make_problem(Q: Any, q: Any, G: Any = None, h: Any = None, A: Any = None, b: Any = None,
                 *, check: bool = True, index: int | None = None) -> QPProblem:
    """Build and (with ``check``) validate a :class:`QPProblem` from arrays.

    ``G``/``h`` and ``A``/``b`` come in pairs: give both or neither.
    """
    where = _where(index)
    if (G is None) != (h is None):
        raise QPInputError(f"{where}G and h come together: pass both (Gx <= h) or neither")
    if (A is None) != (b is None):
        raise QPInputError(f"{where}A and b come together: pass both (Ax = b) or neither")
    Qm = _as_matrix(Q, "Q", index)
    qv = _as_vector(q, "q", index)
    n = qv.shape[0]
    if Qm.shape != (n, n):
        raise QPInputError(f"{where}Q has shape {Qm.shape} but q has length {n}: Q must be "
                           f"({n}, {n})")
    Gm, hv = _constraint_block(G, h, ("G", "h", "m"), n, index, where)
    Am, bv = _constraint_block(A, b, ("A", "b", "p"), n, index, where)
    prob = QPProblem(Qm, qv, Gm, hv, Am, bv)
    if check:
        check_problem(prob, index)
    return prob


def check_problem(prob: QPProblem, index: int | None = None) -> None:
    """Raise :class:`QPInputError` on NaN/Inf, a non-symmetric Q or an indefinite Q."""
    where = _where(index)
    for name in ("Q", "q", "G", "h", "A", "b"):
        if not _finite(getattr(prob, name)):
            raise QPInputError(f"{where}{name} contains NaN or Inf: clean the input (e.g. "
                               "torch.nan_to_num) or find where it diverged upstream")
    Q = prob.Q
    scale = 1.0 + (abs(Q).max() if Q.shape[0] else 0.0)
    asym = abs(Q - Q.T).max() if Q.shape[0] else 0.0
    if asym > 1e-8 * scale:
        raise QPInputError(f"{where}Q is not symmetric (max |Q - Qᵀ| = {asym:.3g}): pass "
                           "(Q + Qᵀ)/2, which defines the same objective")
    if prob.n == 0:
        raise QPInputError(f"{where}the problem has no variables (q is empty)")
    if sp.issparse(Q):
        # a PSD matrix has a non-negative diagonal and |Q_ij| <= sqrt(Q_ii Q_jj); cheap checks
        d = Q.diagonal()
        if d.min() < -1e-10 * scale:
            raise QPInputError(f"{where}Q has a negative diagonal entry ({d.min():.3g}), so it "
                               "is indefinite: dXPP needs a convex QP (Q positive semidefinite)")
        return
    # Cholesky of Q + δI is the cheap test; the eigenvalue is computed only for the message
    try:
        np.linalg.cholesky(Q + 1e-8 * scale * np.eye(prob.n))
        return
    except np.linalg.LinAlgError:
        pass
    lam = float(np.linalg.eigvalsh(Q).min())
    if lam < -1e-8 * scale:
        raise QPInputError(f"{where}Q is indefinite (smallest eigenvalue {lam:.3g}): dXPP needs "
                           "a convex QP, Q positive semidefinite (e.g. Q = MᵀM + εI)")
