"""pass@k with the unbiased estimator and simple diversity measures."""

from __future__ import annotations

from collections.abc import Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct:
    ``1 - C(n - c, k) / C(n, k)`` (Chen et al., 2021), computed as a stable product."""
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise ValueError(f"pass_at_k needs integers, got n={n!r}, c={c!r}, k={k!r}")
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n and 1 <= k <= n, got n={n}, "
                         f"c={c}, k={k}: draw at least k samples per problem")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mean_pass_at_k(correct_counts: Sequence[int], n: int, k: int) -> float:
    """pass@k averaged over problems, each with ``n`` samples."""
    if not correct_counts:
        raise ValueError("mean_pass_at_k needs at least one problem")
    return sum(pass_at_k(n, int(c), k) for c in correct_counts) / len(correct_counts)


def distinct_fraction(samples: Sequence[str]) -> float:
    """Fraction of distinct strings among ``samples`` (1 = all different)."""
    if not samples:
        raise ValueError("distinct_fraction needs at least one sample")
    return len(set(samples)) / len(samples)


def pass_at_k_curve(correct_counts: Sequence[int], n: int, ks: Sequence[int]) -> list[float]:
    """Mean pass@k over problems for every k in ``ks``."""
    return [mean_pass_at_k(correct_counts, n, k) for k in ks]


def bootstrap_ci(per_problem: Sequence[float], num_resamples: int = 2000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``per_problem`` values and a percentile bootstrap CI
    with problems (prompts) as the unit of resampling, i.e. :func:`icml.stats.mean_ci` (the
    repository's one bootstrap). For a paired comparison pass the per-problem differences."""
    from icml import stats

    if len(per_problem) == 0:
        raise ValueError("bootstrap_ci needs at least one problem")
    est = stats.mean_ci([float(v) for v in per_problem], n_boot=num_resamples, level=level,
                        seed=seed)
    return est.value, est.lo, est.hi
