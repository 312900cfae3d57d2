"""Decomposed safe-space ablation: the refusal direction d, the benign principal subspace U_k
and the ablated steering vector v = d - lambda * U_k U_k^T d (official ``compute_topk_basis`` and
``compute_steering_vector``)."""

from __future__ import annotations

from typing import Any


def refusal_direction(base: Any, refused: Any) -> Any:
    """d = mean_i [h(x_i, T0 + R) - h(x_i, T0)] over the first axis (float32).

    ``base`` and ``refused`` have the same shape ``[N, ..., D]`` (row i of each is the same
    harmful query without and with the refusal text)."""
    if base.shape != refused.shape:
        raise ValueError(f"base {tuple(base.shape)} and refused {tuple(refused.shape)} "
                         "activations must have the same shape (one pair per harmful query)")
    if base.shape[0] == 0:
        raise ValueError("no harmful activations: the harmful set is empty")
    return (refused.float() - base.float()).mean(0)


def benign_subspace(hidden: Any, k: int, center: bool = True) -> tuple[Any, Any]:
    """``(mu, U_k)``: the mean of the benign activations ``hidden`` [N, D] and the top-``k``
    left singular vectors of ``(hidden - mu)^T`` as the columns of ``U_k`` [D, k].

    ``center=False`` skips the centring (official option). ``k=0`` gives an empty [D, 0]
    basis. Raises ``ValueError`` when ``k`` exceeds N or D."""
    import torch

    if hidden.ndim != 2:
        raise ValueError(f"benign activations must be [N, D], got {tuple(hidden.shape)}")
    n, dim = hidden.shape
    if n == 0:
        raise ValueError("no benign activations: the benign set is empty")
    if k < 0:
        raise ValueError(f"k={k} must be >= 0")
    if k > n or k > dim:
        raise ValueError(f"k={k} exceeds the number of benign samples ({n}) or the hidden size "
                         f"({dim}): the benign subspace has at most {min(n, dim)} directions; "
                         "lower k or add benign samples")
    h = hidden.float()
    mu = h.mean(0) if center else torch.zeros(dim, dtype=h.dtype, device=h.device)
    if k == 0:
        return mu, h.new_zeros(dim, 0)
    u, _, _ = torch.linalg.svd((h - mu).T, full_matrices=False)
    return mu, u[:, :k].contiguous()


def safe_ablate(d: Any, basis: Any, lam: float = 1.0) -> Any:
    """v = d - lam * U U^T d: remove (``lam=1``), shrink (0 < lam < 1) or keep (``lam=0``) the
    part of ``d`` [D] inside the span of ``basis`` U [D, k] (orthonormal columns)."""
    if basis.shape[0] != d.shape[-1]:
        raise ValueError(f"basis has {basis.shape[0]} rows but d has size {d.shape[-1]}")
    d = d.float()
    return d - lam * (basis.float() @ (basis.float().T @ d))
