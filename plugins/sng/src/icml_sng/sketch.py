"""The sketch-and-project step shared by SNG and SPRING.

For a sketched system (rows ``J_S``, right-hand side ``r_S``) and damping ``lambda >= 0`` the
step is the regularised least-norm solution

    d = J_S^T (J_S J_S^T + lambda I_k)^{-1} r_S = (J_S^T J_S + lambda I_p)^{-1} J_S^T r_S,

i.e. ``argmin_d ||J_S d - r_S||^2 + lambda ||d||^2`` (the push-through identity makes both forms
equal). The first ("woodbury", k x k) form is the cheap one when the batch is smaller than the
parameter count; the second ("param", p x p) when it is not. With ``lambda = 0`` the step is the
minimum-norm solution ``J_S^+ r_S``: a (block) Kaczmarz projection.
"""

from __future__ import annotations

from typing import Literal

import torch

Solve = Literal["auto", "woodbury", "param"]


def check_damping(damping: float) -> float:
    """Return ``damping`` as a float or raise a clear ``ValueError``."""
    try:
        value = float(damping)
    except (TypeError, ValueError):
        raise ValueError(f"damping must be a number >= 0, got {damping!r}") from None
    if not value >= 0.0 or value == float("inf"):
        raise ValueError(f"damping must be a finite number >= 0, got {damping!r}: "
                         "use 0 for an undamped (Kaczmarz / Gauss-Newton) step")
    return value


def _psd_solve(K: torch.Tensor, rhs: torch.Tensor, damping: float) -> torch.Tensor:
    """Solve ``K x = rhs`` for a symmetric PSD ``K`` (already damped); pseudo-inverse if it is
    singular (the minimum-norm solution, which is what ``damping = 0`` asks for)."""
    if damping > 0:
        L, info = torch.linalg.cholesky_ex(K)
        if int(info) == 0:
            return torch.cholesky_solve(rhs.unsqueeze(-1), L).squeeze(-1)
    # Singular or badly conditioned: eigen-decomposition pseudo-inverse.
    evals, evecs = torch.linalg.eigh(K)
    tol = evals.abs().max().clamp_min(torch.finfo(K.dtype).tiny) * K.shape[0] * \
        torch.finfo(K.dtype).eps
    inv = torch.where(evals > tol, 1.0 / evals.clamp_min(tol), torch.zeros_like(evals))
    return evecs @ (inv * (evecs.T @ rhs))


def sketch_direction(J_S: torch.Tensor, r_S: torch.Tensor, damping: float = 0.0,
                     solve: Solve = "auto") -> torch.Tensor:
    """The regularised sketch-and-project direction ``(J_S^T J_S + damping I)^{-1} J_S^T r_S``.

    ``J_S`` is ``(k, p)``, ``r_S`` is ``(k,)``. ``solve="woodbury"`` factors the ``k x k`` kernel
    ``J_S J_S^T + damping I``; ``"param"`` the ``p x p`` matrix; ``"auto"`` picks the smaller.
    With ``damping = 0`` the minimum-norm solution ``pinv(J_S) @ r_S`` is returned.
    """
    if J_S.ndim != 2 or r_S.ndim != 1 or J_S.shape[0] != r_S.shape[0]:
        raise ValueError(f"sketch_direction needs J_S of shape (k, p) and r_S of shape (k,), "
                         f"got {tuple(J_S.shape)} and {tuple(r_S.shape)}")
    damping = check_damping(damping)
    k, p = J_S.shape
    if solve == "auto":
        solve = "woodbury" if k <= p else "param"
    if solve == "woodbury":
        K = J_S @ J_S.T
        if damping:
            K = K + damping * torch.eye(k, dtype=K.dtype, device=K.device)
        return J_S.T @ _psd_solve(K, r_S, damping)
    if solve == "param":
        G = J_S.T @ J_S
        if damping:
            G = G + damping * torch.eye(p, dtype=G.dtype, device=G.device)
        return _psd_solve(G, J_S.T @ r_S, damping)
    raise ValueError(f"solve must be 'auto', 'woodbury' or 'param', got {solve!r}")


def projection_matrix(J_S: torch.Tensor, damping: float = 0.0) -> torch.Tensor:
    """``Pi_S = J_S^T (J_S J_S^T + damping I)^{-1} J_S`` (``p x p``): the (regularised)
    projection onto the row space of the sketch. Diagnostics only (forms a dense matrix)."""
    damping = check_damping(damping)
    k = J_S.shape[0]
    K = J_S @ J_S.T + damping * torch.eye(k, dtype=J_S.dtype, device=J_S.device)
    if damping > 0:
        return J_S.T @ torch.linalg.solve(K, J_S)
    return torch.linalg.pinv(J_S) @ J_S
