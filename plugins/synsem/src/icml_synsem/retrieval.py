"""Retrieval by cosine similarity: recall@k of each query's partner among all candidates (pair
variant), or of any candidate with the query's label (template variant for syntax)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def cosine_matrix(a: Any, b: Any, eps: float = 1e-12) -> Any:
    """``[Na, Nb]`` cosine similarities between the rows of ``a`` and of ``b``."""
    import torch

    a = torch.as_tensor(a).double()
    b = torch.as_tensor(b).double()
    a = a / a.norm(dim=1, keepdim=True).clamp_min(eps)
    b = b / b.norm(dim=1, keepdim=True).clamp_min(eps)
    return a @ b.T


def recall_at_k(queries: Any, candidates: Any, k: int = 3,
                query_labels: Sequence[Any] | None = None,
                candidate_labels: Sequence[Any] | None = None) -> float:
    """Fraction of queries with a hit among their ``k`` most cosine-similar candidates.

    Pair variant (no labels): query i's partner is candidate i, so ``queries`` and
    ``candidates`` have the same number of rows. Label variant: a hit is any top-k candidate
    whose label equals the query's (the paper's syntax retrieval, labels = POS templates). Ties
    at the k-th similarity count as retrieved.
    """
    import torch

    q, c = torch.as_tensor(queries), torch.as_tensor(candidates)
    if q.ndim != 2 or c.ndim != 2 or q.shape[1] != c.shape[1]:
        raise ValueError(f"queries {tuple(q.shape)} and candidates {tuple(c.shape)} must be "
                         "[N, D] and [M, D] with the same D")
    if q.shape[0] == 0 or c.shape[0] == 0:
        raise ValueError("recall_at_k needs at least one query and one candidate")
    if not 1 <= k <= c.shape[0]:
        raise ValueError(f"k={k} must be in [1, {c.shape[0]}] (the number of candidates)")
    sims = cosine_matrix(q, c)
    kth = sims.topk(k, dim=1).values[:, -1:]  # [N, 1]
    in_top = sims >= kth
    if query_labels is None and candidate_labels is None:
        if q.shape[0] != c.shape[0]:
            raise ValueError(f"pair retrieval needs one candidate per query, got {q.shape[0]} "
                             f"queries and {c.shape[0]} candidates (or pass labels)")
        hits = in_top[torch.arange(q.shape[0]), torch.arange(q.shape[0])]
    else:
        if query_labels is None or candidate_labels is None:
            raise ValueError("pass both query_labels and candidate_labels, or neither")
        if len(query_labels) != q.shape[0] or len(candidate_labels) != c.shape[0]:
            raise ValueError("one label per query row and one per candidate row")
        ids: dict[Any, int] = {}
        qa = torch.tensor([ids.setdefault(x, len(ids)) for x in query_labels])
        ca = torch.tensor([ids.setdefault(x, len(ids)) for x in candidate_labels])
        hits = (in_top & (qa[:, None] == ca[None, :])).any(dim=1)
    return float(hits.double().mean())
