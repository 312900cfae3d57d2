"""Information Imbalance (Glielmo et al. 2022) between two representations of the same points,
and the paper's use of it between syntactic and semantic centroid spaces.

Two estimators (``estimator=``):

* ``"all_pairs"`` (ours): ``Delta(A -> B) = 2 / (N - 2) * mean over (i, j in kNN_A(i)) of
  (rank_B(i, j) - 1)``, ranks 1..N-1 over the other points (ties share the lowest rank). 0 when
  A's neighbours are B's nearest neighbours, 1 in expectation when A says nothing about B.
* ``"official"`` (the paper's ``geometry.py``): the N points are split at random into N//2 rows
  and N - N//2 columns; the distances from each row point to every column point (a rectangular
  matrix) are ranked per row (1..M, ties share the lowest rank); ``Delta = 2 * mean(rank_B - 1)
  / (M - 2)`` over the (row, column) pairs with ``rank_A <= k``. With independent spaces it is
  ``(M - 1) / (M - 2)`` in expectation, slightly above 1.

NumPy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

METRICS = ("normalized_l2", "l2", "cosine")
ESTIMATORS = ("all_pairs", "official")


def distance_matrix(x: Any, y: Any = None, metric: str = "normalized_l2") -> np.ndarray:
    """Distances between the rows of ``x`` (``[N, N]``) or from the rows of ``x`` to the rows of
    ``y`` (``[N, M]``): Euclidean after scaling rows to unit norm (the paper's choice), plain
    Euclidean, or ``1 - cosine``."""
    if isinstance(y, str):  # distance_matrix(x, "l2"): the metric given positionally
        y, metric = None, y
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    x = np.asarray(x, dtype=np.float64)
    y = x if y is None else np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"distance_matrix needs [N, D] and [M, D] rows, got {x.shape} and "
                         f"{y.shape}")
    if metric in ("normalized_l2", "cosine"):
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        y = y / np.maximum(np.linalg.norm(y, axis=1, keepdims=True), 1e-12)
    d2 = np.maximum((x * x).sum(1)[:, None] + (y * y).sum(1)[None, :] - 2.0 * x @ y.T, 0.0)
    return d2 / 2.0 if metric == "cosine" else np.sqrt(d2)


def rank_matrix(dist: Any, exclude_diagonal: bool | None = None) -> np.ndarray:
    """Per row of a ``[N, M]`` distance matrix, the rank of each entry among that row's entries
    (1 = nearest, ties share the lowest rank, like ``scipy.stats.rankdata(method="min")``).
    ``exclude_diagonal`` (default: True for a square matrix) ranks each point among the *other*
    points and sets the diagonal to 0; use False for a square matrix between two different sets
    (e.g. the official rows x columns split)."""
    d = np.asarray(dist, dtype=np.float64)
    if d.ndim != 2 or 0 in d.shape:
        raise ValueError(f"rank_matrix needs a non-empty [N, M] matrix, got shape {d.shape}")
    if exclude_diagonal is None:
        exclude_diagonal = d.shape[0] == d.shape[1]
    if exclude_diagonal:
        if d.shape[0] != d.shape[1]:
            raise ValueError(f"exclude_diagonal needs a square matrix, got {d.shape}")
        d = d.copy()
        np.fill_diagonal(d, np.inf)
    order = np.argsort(d, axis=1, kind="stable")
    s = np.take_along_axis(d, order, axis=1)
    # in each sorted row, every entry takes the position of the first entry equal to it
    pos = np.broadcast_to(np.arange(d.shape[1]), d.shape)
    new = np.ones(d.shape, dtype=bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    first = np.maximum.accumulate(np.where(new, pos, 0), axis=1)
    ranks = np.empty(d.shape, dtype=np.int64)
    np.put_along_axis(ranks, order, first + 1, axis=1)
    if exclude_diagonal:
        np.fill_diagonal(ranks, 0)
    return ranks


def neighbour_ranks(dist: np.ndarray) -> np.ndarray:
    """``[N, N]`` ranks (1 = nearest, ties share the lowest rank) of every other point; the
    diagonal is 0 (:func:`rank_matrix` of a square matrix)."""
    return rank_matrix(dist, exclude_diagonal=True)


def split_half(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The official estimator's random split of ``range(n)`` into ``n // 2`` row indices and
    ``n - n // 2`` column indices (disjoint)."""
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[:n // 2]), np.sort(perm[n // 2:])


def _official_from_dist(da: np.ndarray, db: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                        k: int) -> tuple[float, float]:
    m = len(cols)
    ra = rank_matrix(da[np.ix_(rows, cols)], exclude_diagonal=False)
    rb = rank_matrix(db[np.ix_(rows, cols)], exclude_diagonal=False)

    def delta(x: np.ndarray, y: np.ndarray) -> float:
        return float(2.0 * (y[x <= k] - 1).mean() / (m - 2))

    return delta(ra, rb), delta(rb, ra)


def official_imbalance(a: Any, b: Any, rows: Any, cols: Any, k: int = 1,
                       metric: str = "normalized_l2") -> tuple[float, float]:
    """The official (``geometry.py``) estimator on a given split: distances from the ``rows``
    points to the ``cols`` points in each space, ranked per row (ties share the lowest rank);
    ``Delta(a -> b) = 2 * mean(rank_b - 1) / (M - 2)`` over the pairs with ``rank_a <= k``
    (ties at the k-th place all count), ``M = len(cols)``. Returns ``(a -> b, b -> a)``."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    m = len(cols)
    if m < 3 or len(rows) < 1:
        raise ValueError(f"the official estimator needs >= 1 row and >= 3 column points, got "
                         f"{len(rows)} and {m} (give at least 6 points)")
    da = np.zeros((len(a), len(a)))
    db = np.zeros((len(b), len(b)))
    da[np.ix_(rows, cols)] = distance_matrix(a[rows], a[cols], metric)
    db[np.ix_(rows, cols)] = distance_matrix(b[rows], b[cols], metric)
    return _official_from_dist(da, db, rows, cols, k)


def _delta(ranks_a: np.ndarray, ranks_b: np.ndarray, k: int) -> float:
    n = ranks_a.shape[0]
    nn = (ranks_a >= 1) & (ranks_a <= k)
    return float(2.0 * (ranks_b[nn] - 1).mean() / (n - 2))


def information_imbalance(a: Any, b: Any, k: int = 1, metric: str = "normalized_l2",
                          estimator: str = "all_pairs", seed: int = 0) -> tuple[float, float]:
    """``(Delta(a -> b), Delta(b -> a))`` for two representations ``[N, Da]``, ``[N, Db]`` of the
    same N points (N >= 3). ``estimator="official"`` uses the paper's split-half rows x columns
    estimator (:func:`official_imbalance`) on the split :func:`split_half` draws from ``seed``."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[0]:
        raise ValueError(f"a {a.shape} and b {b.shape} must be [N, Da] and [N, Db] rows of the "
                         "same points")
    n = a.shape[0]
    if n < 3:
        raise ValueError(f"Information Imbalance needs at least 3 points, got {n}")
    if not 1 <= k <= n - 2:
        raise ValueError(f"k={k} must be in [1, {n - 2}]")
    if estimator == "official":
        rows, cols = split_half(n, seed)
        if not 1 <= k <= len(cols) - 1:
            raise ValueError(f"k={k} must be in [1, {len(cols) - 1}]")
        return official_imbalance(a, b, rows, cols, k=k, metric=metric)
    ra = neighbour_ranks(distance_matrix(a, metric=metric))
    rb = neighbour_ranks(distance_matrix(b, metric=metric))
    return _delta(ra, rb, k), _delta(rb, ra, k)


def centroid_imbalance(c_syn: Any, c_sem: Any, groups: Sequence[Any], n_resamples: int,
                       k: int, metric: str = "normalized_l2", seed: int = 0, *,
                       estimator: str) -> dict[str, float]:
    """Information Imbalance between per-sentence syntactic and semantic centroids, averaged over
    ``n_resamples`` draws of one sentence per syntactic group (within a group every syntactic
    centroid is the same point). Returns mean and std of ``syn_to_sem`` and ``sem_to_syn``.
    With ``estimator="official"`` the rows x columns split is drawn once (from ``seed``) and
    kept for every resample, as the official script does."""
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
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    rng = np.random.default_rng(seed)
    lists = list(members.values())
    n = len(lists)
    # distances once; every resample takes a sub-block (the same numbers as recomputing)
    da, db = distance_matrix(c_syn, metric=metric), distance_matrix(c_sem, metric=metric)
    rows, cols = split_half(n, seed)
    if estimator == "official" and not 1 <= k <= len(cols) - 1:
        raise ValueError(f"k={k} must be in [1, {len(cols) - 1}]")
    if estimator == "all_pairs" and not 1 <= k <= n - 2:
        raise ValueError(f"k={k} must be in [1, {n - 2}]")
    vals = np.empty((n_resamples, 2))
    for r in range(n_resamples):
        idx = np.array([m[rng.integers(len(m))] for m in lists])
        sa, sb = da[np.ix_(idx, idx)], db[np.ix_(idx, idx)]
        if estimator == "official":
            vals[r] = _official_from_dist(sa, sb, rows, cols, k)
        else:
            ra, rb = neighbour_ranks(sa), neighbour_ranks(sb)
            vals[r] = _delta(ra, rb, k), _delta(rb, ra, k)
    return {"syn_to_sem": float(vals[:, 0].mean()), "sem_to_syn": float(vals[:, 1].mean()),
            "syn_to_sem_std": float(vals[:, 0].std()), "sem_to_syn_std": float(vals[:, 1].std())}
