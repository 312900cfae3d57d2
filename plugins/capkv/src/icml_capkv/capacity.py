"""The information-capacity objective and its two selectors.

Under CapKV's linear-Gaussian surrogate a future attention output is
``o = sum_{i in S} alpha_i u_i + eps`` with ``alpha_i ~ N(0, w_i)`` and ``eps ~ N(0, ridge * I)``.
The information a retained set ``S`` carries about ``o`` is

    I(S) = 1/2 log det(I + ridge^-1 sum_{i in S} w_i u_i u_i^T)          (information_capacity)

Two selectors maximise it under a budget:

* :func:`ridge_leverage` -- the one-shot score ``s_i = w_i u_i^T A^-1 u_i`` with
  ``A = ridge * I + sum_i w_i u_i u_i^T`` (one d x d solve). ``-log(1 - s_i)`` is exactly the drop
  of ``log det A`` when token ``i`` alone is removed, so ranking by ``s_i`` ranks tokens by the
  capacity each one carries given all the others.
* :func:`greedy_logdet_select` -- exact greedy maximisation of ``log det`` with the
  matrix-determinant lemma (gain ``log(1 + w_j u_j^T A_S^-1 u_j)``), the reference the leverage
  score approximates. ``log det`` is monotone submodular, so greedy is within ``1 - 1/e`` of the
  optimum in the gain over the empty set.

All functions take leading batch dimensions ``(..., T, d)`` for ``u`` and ``(..., T)`` for ``w``
and compute in float64 on CPU or float32 elsewhere unless the input is already float64.
"""

from __future__ import annotations

import torch

__all__ = ["gram", "greedy_logdet_select", "information_capacity", "logdet_drop",
           "ridge_leverage"]


def _check(u: torch.Tensor, w: torch.Tensor | None, ridge: float) -> torch.Tensor:
    if u.ndim < 2:
        raise ValueError(f"u must have shape (..., T, d), got {tuple(u.shape)}: add a token axis")
    if w is not None and w.shape != u.shape[:-1]:
        raise ValueError(f"w must have shape {tuple(u.shape[:-1])} (u without its last axis), "
                         f"got {tuple(w.shape)}")
    if w is not None and bool((w < 0).any()):
        raise ValueError("w (query relevance) must be non-negative: pass exp(...) weights")
    if not ridge > 0:
        raise ValueError(f"ridge must be > 0 (the noise variance), got {ridge}")
    return torch.ones(u.shape[:-1], dtype=u.dtype, device=u.device) if w is None else w


def _work_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def gram(u: torch.Tensor, w: torch.Tensor | None = None, ridge: float = 1.0,
         mask: torch.Tensor | None = None) -> torch.Tensor:
    """``A = ridge * I + sum_i m_i w_i u_i u_i^T`` with shape ``(..., d, d)`` (``mask`` m in {0,1}
    selects the tokens; all tokens when None)."""
    w = _check(u, w, ridge)
    dt = _work_dtype(u)
    u, w = u.to(dt), w.to(dt)
    if mask is not None:
        w = w * mask.to(dt)
    d = u.shape[-1]
    eye = torch.eye(d, dtype=dt, device=u.device)
    u = u.contiguous()
    return ridge * eye + (u * w.unsqueeze(-1)).transpose(-1, -2) @ u


def ridge_leverage(u: torch.Tensor, w: torch.Tensor | None = None, ridge: float = 1.0,
                   mask: torch.Tensor | None = None) -> torch.Tensor:
    """Weighted ridge-leverage scores ``s_i = w_i u_i^T A^-1 u_i`` in ``[0, 1)``, ``(..., T)``.

    ``mask`` (``(..., T)``, 0/1) excludes tokens from ``A`` (their score is still computed, as the
    leverage they would have against the masked set). ``sum_i s_i = d - ridge * tr(A^-1)`` over the
    tokens in ``A``.
    """
    w = _check(u, w, ridge)
    dt = _work_dtype(u)
    A = gram(u, w, ridge, mask)
    uu = u.to(dt).contiguous()
    Ainv = torch.cholesky_inverse(torch.linalg.cholesky(A))  # d x d: cheap, A is SPD
    quad = ((uu @ Ainv) * uu).sum(-1)  # u_i^T A^-1 u_i, (..., T)
    return (w.to(dt) * quad).to(u.dtype)


def logdet_drop(u: torch.Tensor, w: torch.Tensor | None = None,
                ridge: float = 1.0) -> torch.Tensor:
    """``log det A - log det(A - w_i u_i u_i^T)`` for every token ``i``, computed directly by
    ``T + 1`` determinants (the slow reference for ``-log(1 - ridge_leverage)``)."""
    w = _check(u, w, ridge)
    full = torch.logdet(gram(u, w, ridge))
    T = u.shape[-2]
    drops = []
    for i in range(T):
        m = torch.ones(u.shape[:-1], dtype=u.dtype, device=u.device)
        m[..., i] = 0
        drops.append(full - torch.logdet(gram(u, w, ridge, m)))
    return torch.stack(drops, -1)


def information_capacity(u: torch.Tensor, w: torch.Tensor | None, keep_idx: torch.Tensor,
                         ridge: float = 1.0) -> torch.Tensor:
    """``1/2 log det(I + ridge^-1 sum_{i in S} w_i u_i u_i^T)`` for the retained set ``S`` given by
    ``keep_idx`` (``(..., K)`` integer positions into the token axis). Shape ``(...)``."""
    w = _check(u, w, ridge)
    if keep_idx.shape[:-1] != u.shape[:-2]:
        raise ValueError(f"keep_idx must have shape (..., K) with leading dims "
                         f"{tuple(u.shape[:-2])}, got {tuple(keep_idx.shape)}")
    T = u.shape[-2]
    if keep_idx.numel() and (int(keep_idx.min()) < 0 or int(keep_idx.max()) >= T):
        raise ValueError(f"keep_idx holds positions outside [0, {T})")
    mask = torch.zeros(u.shape[:-1], dtype=u.dtype, device=u.device)
    mask.scatter_(-1, keep_idx.long(), 1.0)
    d = u.shape[-1]
    return 0.5 * (torch.logdet(gram(u, w, ridge, mask)) - d * torch.log(
        torch.tensor(ridge, dtype=_work_dtype(u), device=u.device)))


def greedy_logdet_select(u: torch.Tensor, w: torch.Tensor | None, budget: int,
                         ridge: float = 1.0, forced: torch.Tensor | None = None) -> torch.Tensor:
    """Greedy maximiser of ``log det(ridge * I + sum_{i in S} w_i u_i u_i^T)``, ``|S| = budget``.

    ``forced`` (``(T,)`` or ``(..., T)`` bool) marks tokens that are always in ``S`` (attention
    sinks); they count towards the budget. Returns sorted positions ``(..., budget)``. Each step
    adds ``argmax_j log(1 + w_j u_j^T A_S^-1 u_j)`` and updates ``A_S^-1`` by Sherman-Morrison;
    cost ``O(budget * T * d^2)``.
    """
    w = _check(u, w, ridge)
    T, d = u.shape[-2], u.shape[-1]
    if not 0 <= budget <= T:
        raise ValueError(f"budget must be in [0, {T}] (the number of tokens), got {budget}")
    dt = _work_dtype(u)
    lead = u.shape[:-2]
    uu = u.to(dt).reshape(-1, T, d)
    ww = w.to(dt).reshape(-1, T)
    n = uu.shape[0]
    chosen = torch.zeros(n, T, dtype=torch.bool, device=u.device)
    if forced is not None:
        chosen |= forced.to(torch.bool).expand(*lead, T).reshape(n, T)
    if int(chosen.sum(-1).max()) > budget:
        raise ValueError(f"budget {budget} is smaller than the number of forced (sink) tokens "
                         f"{int(chosen.sum(-1).max())}: raise the budget or lower n_sink")
    eye = torch.eye(d, dtype=dt, device=u.device)
    Ainv = torch.linalg.inv(ridge * eye + torch.einsum(
        "nt,nti,ntj->nij", ww * chosen.to(dt), uu, uu))
    rows = torch.arange(n, device=u.device)
    for _ in range(budget - int(chosen.sum(-1).min())):
        Au = torch.einsum("nij,ntj->nti", Ainv, uu)  # A^-1 u_t
        gain = ww * (uu * Au).sum(-1)  # w u^T A^-1 u
        gain = gain.masked_fill(chosen, -1.0)
        need = chosen.sum(-1) < budget
        j = gain.argmax(-1)
        v = Au[rows, j]  # (n, d)
        denom = 1.0 + gain[rows, j]
        upd = ww[rows, j, None, None] * v[:, :, None] * v[:, None, :] / denom[:, None, None]
        Ainv = torch.where(need[:, None, None], Ainv - upd, Ainv)
        chosen[rows[need], j[need]] = True
    idx = chosen.nonzero()[:, 1].reshape(n, budget)
    return idx.reshape(*lead, budget)
