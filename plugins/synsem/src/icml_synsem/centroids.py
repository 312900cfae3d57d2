"""Centroids and ablations: semantic centroids from translations, syntactic centroids from shared
templates (optionally leave-one-out), projection removal and plain subtraction, decoupling by
orthogonalisation, permuted controls and the explained squared norm.

All functions take and return ``torch.Tensor`` rows (``[N, D]``); arrays are converted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _t(x: Any) -> Any:
    import torch

    return x if isinstance(x, torch.Tensor) else torch.as_tensor(x)


def remove_projection(x: Any, c: Any, eps: float = 1e-8) -> Any:
    """Row-wise ``x - (x.c / (|c|^2 + eps)) c``: the part of each row of ``x`` orthogonal to the
    matching row of ``c`` (``c`` may be one vector for all rows). A zero ``c`` leaves ``x``
    unchanged."""
    x, c = _t(x), _t(c)
    c = c.to(x.dtype).expand_as(x)
    coef = (x * c).sum(-1, keepdim=True) / ((c * c).sum(-1, keepdim=True) + eps)
    return x - coef * c


def subtract(x: Any, c: Any) -> Any:
    """Plain subtraction ``x - c`` (the alternative ablation the paper's notebooks compare)."""
    x, c = _t(x), _t(c)
    return x - c.to(x.dtype)


def orthogonalize(c: Any, against: Any, eps: float = 1e-8) -> Any:
    """Decoupling: ``c`` minus its projection on ``against`` (row-wise)."""
    return remove_projection(c, against, eps)


def ablate(x: Any, c: Any, mode: str, eps: float = 1e-8) -> Any:
    """``remove_projection`` (``mode="projection"``) or ``subtract`` (``mode="subtract"``)."""
    if mode == "projection":
        return remove_projection(x, c, eps)
    if mode == "subtract":
        return subtract(x, c)
    raise ValueError(f"ablation mode must be 'projection' or 'subtract', got {mode!r}")


def explained_sq_norm(x: Any, c: Any, eps: float = 1e-12) -> Any:
    """Per row, the fraction ``|proj_c x|^2 / |x|^2`` of x's squared norm along c (in [0, 1])."""
    x, c = _t(x), _t(c).to(_t(x).dtype).expand_as(_t(x))
    dot = (x * c).sum(-1)
    return dot ** 2 / (((c * c).sum(-1) * (x * x).sum(-1)) + eps)


def group_ids(labels: Sequence[Any]) -> tuple[Any, list[Any]]:
    """``(ids, uniques)``: integer group id per label, in order of first appearance."""
    import torch

    uniques: dict[Any, int] = {}
    ids = [uniques.setdefault(lab, len(uniques)) for lab in labels]
    return torch.tensor(ids, dtype=torch.long), list(uniques)


def group_centroids(reps: Any, labels: Sequence[Any]) -> tuple[Any, list[Any]]:
    """``(centroids [G, D], groups)``: the mean of the rows sharing each label (groups in order of
    first appearance). A group of one has its member as centroid."""
    import torch

    reps = _t(reps)
    if len(labels) != reps.shape[0]:
        raise ValueError(f"{len(labels)} labels for {reps.shape[0]} rows: give one label per row")
    ids, groups = group_ids(labels)
    sums = torch.zeros(len(groups), reps.shape[1], dtype=reps.dtype).index_add_(0, ids, reps)
    counts = torch.bincount(ids, minlength=len(groups)).to(reps.dtype)
    return sums / counts[:, None], groups


def syntactic_centroids(reps: Any, labels: Sequence[Any], leave_one_out: bool) -> Any:
    """Per row ``[N, D]``: the centroid of its template group. With ``leave_one_out`` the row
    itself is excluded; that needs every group to have at least two members (``ValueError``
    otherwise)."""
    import torch

    reps = _t(reps)
    cents, _ = group_centroids(reps, labels)
    ids, _ = group_ids(labels)
    per_row = cents[ids]
    if not leave_one_out:
        return per_row
    counts = torch.bincount(ids).to(reps.dtype)[ids][:, None]
    if bool((counts < 2).any()):
        i = int((counts[:, 0] < 2).nonzero()[0])
        raise ValueError(f"row {i} is alone in its template group {labels[i]!r}: leave-one-out "
                         "centroids need groups of >= 2 (drop singletons, min_group_size=2)")
    return (counts * per_row - reps) / (counts - 1)


def semantic_centroids(reps_by_language: Sequence[Any] | Any) -> Any:
    """``[N, D]``: for each sentence, the mean of its translations' representations (a list of
    ``[N, D]`` tensors, one per language, or a ``[n_languages, N, D]`` tensor)."""
    import torch

    stacked = (torch.stack([_t(r) for r in reps_by_language])
               if isinstance(reps_by_language, (list, tuple)) else _t(reps_by_language))
    if stacked.ndim != 3 or stacked.shape[0] == 0:
        raise ValueError("semantic_centroids needs [n_languages, N, D] with at least one language")
    return stacked.mean(0)


def derangement(n: int, seed: int = 0) -> Any:
    """A random permutation of ``range(n)`` with no fixed point (the permuted control: each
    sentence gets the centroid of another sentence). Needs ``n >= 2``."""
    import torch

    if n < 2:
        raise ValueError(f"a permuted control needs at least 2 sentences, got {n}")
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=gen)
    fixed = (perm == torch.arange(n)).nonzero().flatten()
    for i in fixed.tolist():  # swap each fixed point with its neighbour: still a permutation
        if int(perm[i]) == i:
            j = (i + 1) % n
            perm[i], perm[j] = perm[j].clone(), perm[i].clone()
    return perm


PERM_CONTROLS = ("centroid", "official")


def permuted_ablation(x: Any, c: Any, perm: Any, mode: str, control: str,
                      eps: float = 1e-8) -> Any:
    """The permuted control: row ``j`` of ``x`` ablated with the centroid of sentence
    ``perm[j]``.

    * ``control="centroid"`` (ours): remove row j's *own* projection on ``c[perm[j]]``,
      ``x_j - (x_j . c_p / |c_p|^2) c_p`` (or ``x_j - c_p`` with ``mode="subtract"``);
    * ``control="official"`` (the paper's ``batched_remove_centroid_projections(act, perm, c)``):
      subtract row ``perm[j]``'s projection on its own centroid from row j,
      ``x_j - (x_p . c_p / |c_p|^2) c_p``, i.e. the vector that the real ablation removes from
      sentence p. With ``mode="subtract"`` both are ``x_j - c_p``.
    """
    import torch

    x, c = _t(x), _t(c).to(_t(x).dtype)
    perm = torch.as_tensor(perm, dtype=torch.long)
    if perm.shape != (x.shape[0],):
        raise ValueError(f"perm must hold one index per row ({x.shape[0]}), got shape "
                         f"{tuple(perm.shape)}")
    if control not in PERM_CONTROLS:
        raise ValueError(f"control must be one of {PERM_CONTROLS}, got {control!r}")
    if mode not in ("projection", "subtract"):
        raise ValueError(f"ablation mode must be 'projection' or 'subtract', got {mode!r}")
    cp = c[perm]
    if mode == "subtract":
        return x - cp
    if control == "centroid":
        return remove_projection(x, cp, eps)
    xp = x[perm]
    coef = (xp * cp).sum(-1, keepdim=True) / ((cp * cp).sum(-1, keepdim=True) + eps)
    return x - coef * cp
