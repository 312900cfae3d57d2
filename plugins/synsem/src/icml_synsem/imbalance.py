"""Information Imbalance (Glielmo et al. 2022) between two representations of the same points,
and the paper's use of it between syntactic and semantic centroid spaces.

``Delta(A -> B) = 2 / (N - 2) * mean over (i, j in kNN_A(i)) of (rank_B(i, j) - 1)``, with ranks
1..N-1 over the other points (ties share the lowest rank). It is 0 when A's neighbours are B's
nearest neighbours and about 1 when A says nothing about B. NumPy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

METRICS = ("normalized_l2", "l2", "cosine")


def distance_matrix(x: Any, metric: str = "normalized_l2") -> np.ndarray:
    """``[N, N]`` distances between rows: Euclidean after scaling rows to unit norm (the paper's
    choice), plain Euclidean, or ``1 - cosine``."""
    x = np.asarray(x, dtype=np.float64)
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    if metric in ("normalized_l2", "cosine"):
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    sq = (x * x).sum(1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * x @ x.T, 0.0)
    return d2 / 2.0 if metric == "cosine" else np.sqrt(d2)


def neighbour_ranks(dist: np.ndarray) -> np.ndarray:
    """``[N, N]`` ranks (1 = nearest, ties share the lowest rank) of every other point; the
    diagonal is 0."""
    n = dist.shape[0]
    d = dist.astype(np.float64).copy()
    np.fill_diagonal(d, np.inf)
    s = np.sort(d, axis=1)
    ranks = np.empty((n, n), dtype=np.int64)
    for i in range(n):
        ranks[i] = np.searchsorted(s[i], d[i], side="left") + 1
    np.fill_diagonal(ranks, 0)
    return ranks


def _delta(ranks_a: np.ndarray, ranks_b: np.ndarray, k: int) -> float:
    n = ranks_a.shape[0]
    nn = (ranks_a >= 1) & (ranks_a <= k)
    return float(2.0 * (ranks_b[nn] - 1).mean() / (n - 2))


def information_imbalance(a: Any, b: Any, k: int = 1, metric: str = "normalized_l2"
                          ) -> tuple[float, float]:
    """``(Delta(a -> b), Delta(b -> a))`` for two representations ``[N, Da]``, ``[N, Db]`` of the
    same N points (N >= 3)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[0]:
        raise ValueError(f"a {a.shape} and b {b.shape} must be [N, Da] and [N, Db] rows of the "
                         "same points")
    n = a.shape[0]
    if n < 3:
        raise ValueError(f"Information Imbalance needs at least 3 points, got {n}")
    if not 1 <= k <= n - 2:
        raise ValueError(f"k={k} must be in [1, {n - 2}]")
    ra = neighbour_ranks(distance_matrix(a, metric))
    rb = neighbour_ranks(distance_matrix(b, metric))
    return _delta(ra, rb, k), _delta(rb, ra, k)


def centroid_imbalance(c_syn: Any, c_sem: Any, groups: Sequence[Any], n_resamples: int = 200,
                       k: int = 1, metric: str = "normalized_l2", seed: int = 0
                       ) -> dict[str, float]:
    """Information Imbalance between per-sentence syntactic and semantic centroids, averaged over
    ``n_resamples`` draws of one sentence per syntactic group (within a group every syntactic
    centroid is the same point). Returns mean and std of ``syn_to_sem`` and ``sem_to_syn``."""
    c_syn, c_sem = np.asarray(c_syn, dtype=np.float64), np.asarray(c_sem, dtype=np.float64)
    if len(groups) != c_syn.shape[0] or c_syn.shape[0] != c_sem.shape[0]:
        raise ValueError("c_syn, c_sem and groups must have one entry per sentence")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    members: dict[Any, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    if len(members) < 3:
        raise ValueError(f"only {len(members)} syntactic groups: the imbalance needs >= 3")
    rng = np.random.default_rng(seed)
    lists = list(members.values())
    vals = np.empty((n_resamples, 2))
    for r in range(n_resamples):
        idx = np.array([m[rng.integers(len(m))] for m in lists])
        vals[r] = information_imbalance(c_syn[idx], c_sem[idx], k=k, metric=metric)
    return {"syn_to_sem": float(vals[:, 0].mean()), "sem_to_syn": float(vals[:, 1].mean()),
            "syn_to_sem_std": float(vals[:, 0].std()), "sem_to_syn_std": float(vals[:, 1].std())}
