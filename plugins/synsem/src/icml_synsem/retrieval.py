"""Retrieval by cosine similarity: recall@k of each query's partner among all candidates (pair
variant), or of any candidate with the query's label (template variant for syntax)."""

from __future__ import annotations

import math
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


def rowwise_cosine(a: Any, b: Any, eps: float = 1e-12) -> Any:
    """``[N]`` cosine similarity of row i of ``a`` with row i of ``b`` (float64; a zero row gives
    0)."""
    import torch

    a = torch.as_tensor(a).double()
    b = torch.as_tensor(b).double()
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"rowwise_cosine needs two [N, D] arrays of the same shape, got "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    return (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1)).clamp_min(eps)


def recall_at_k(queries: Any, candidates: Any, k: int,
                query_labels: Sequence[Any] | None = None,
                candidate_labels: Sequence[Any] | None = None) -> float:
    """Fraction of queries with a hit among their ``k`` most cosine-similar candidates (the mean
    of :func:`recall_hits`)."""
    hits = recall_hits(queries, candidates, k, query_labels, candidate_labels)
    return float(sum(hits) / len(hits))


def recall_hits(queries: Any, candidates: Any, k: int,
                query_labels: Sequence[Any] | None = None,
                candidate_labels: Sequence[Any] | None = None) -> list[float]:
    """Per query, whether it has a hit among its ``k`` most cosine-similar candidates (1.0/0.0,
    or a probability when ties straddle the k-th place).

    Pair variant (no labels): query i's partner is candidate i, so ``queries`` and
    ``candidates`` have the same number of rows. Label variant: a hit is any top-k candidate
    whose label equals the query's (the paper's syntax retrieval, labels = POS templates). Ties
    at the k-th similarity are broken at random, in expectation: a query contributes the
    probability that a random order of its tied candidates puts a hit in the top k (so a
    degenerate query, e.g. a zero vector after ablation, scores chance level, not a hit).
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
    above = sims > kth  # certainly in the top k
    tied = sims == kth  # compete for the k - above.sum() remaining slots
    slots = k - above.sum(1)  # [N], >= 1
    if query_labels is None and candidate_labels is None:
        if q.shape[0] != c.shape[0]:
            raise ValueError(f"pair retrieval needs one candidate per query, got {q.shape[0]} "
                             f"queries and {c.shape[0]} candidates (or pass labels)")
        match = torch.eye(q.shape[0], dtype=torch.bool)
    else:
        if query_labels is None or candidate_labels is None:
            raise ValueError("pass both query_labels and candidate_labels, or neither")
        if len(query_labels) != q.shape[0] or len(candidate_labels) != c.shape[0]:
            raise ValueError("one label per query row and one per candidate row")
        ids: dict[Any, int] = {}
        qa = torch.tensor([ids.setdefault(x, len(ids)) for x in query_labels])
        ca = torch.tensor([ids.setdefault(x, len(ids)) for x in candidate_labels])
        match = qa[:, None] == ca[None, :]
    sure = (above & match).any(dim=1).tolist()
    n_tied = tied.sum(1).tolist()
    n_tied_hits = (tied & match).sum(1).tolist()
    hits = [1.0 if ok else  # P(a hit among s draws without replacement from t tied, h hits)
            (1.0 - math.comb(t - h, s) / math.comb(t, s) if h else 0.0)
            for ok, t, h, s in zip(sure, n_tied, n_tied_hits, slots.tolist(), strict=True)]
    return hits
