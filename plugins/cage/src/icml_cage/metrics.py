"""The Abstraction Gap and its bootstrap confidence interval.

``AG = (S_T - S_C) / Z`` with S_T, S_C the mean Text-Only and Chain-Text scores (0-10) and the
normaliser ``Z`` a parameter (reconstructed from the abstract; see README):

* ``relative`` (default): ``Z = S_T``; the only choice consistent with "text 6-8, chain < 2.5,
  AG > 0.5". Undefined (NaN) when S_T = 0 < S_C.
* ``max``: ``Z = max(S_T, S_C)``, symmetric, in [-1, 1].
* ``range``: ``Z = 10``, the score range.

Equal scores give AG = 0 in every mode (also when both are 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

NORMS = ("relative", "max", "range")


def abstraction_gap(s_text: float, s_chain: float, norm: str = "relative",
                    scale: float = 10.0) -> float:
    if norm not in NORMS:
        raise ValueError(f"norm {norm!r} is not one of {', '.join(NORMS)}")
    diff = s_text - s_chain
    if diff == 0:
        return 0.0
    z = {"relative": s_text, "max": max(s_text, s_chain), "range": scale}[norm]
    return diff / z if z > 0 else math.nan


def item_gap(t: float, c: float, eps: float = 1e-6) -> float:
    """One item's relative AG ``(t - c) / t``: 0 when equal, NaN when ``t <= eps < c``."""
    if t == c:
        return 0.0
    return (t - c) / t if t > eps else math.nan


def per_item_gap(text: Sequence[float], chain: Sequence[float], eps: float = 1e-6) -> float:
    """Mean over items of ``(t_i - c_i) / t_i``; items with t_i = c_i give 0, and items whose
    text score is 0 (``t_i <= eps``) but chain score is not are left out, like the NaN of the
    relative AG (dividing by ``eps`` would let one such item swamp the mean). NaN when no
    item is left."""
    if len(text) != len(chain) or not text:
        raise ValueError("per_item_gap needs two equally long, non-empty score lists")
    gaps = [0.0 if t == c else (t - c) / t for t, c in zip(text, chain) if t == c or t > eps]
    return sum(gaps) / len(gaps) if gaps else math.nan


def bootstrap_ci(text: Sequence[float], chain: Sequence[float], norm: str = "relative",
                 n_boot: int = 1000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of AG over paired item resamples: a thin call into
    ``icml.stats.bootstrap`` (rows of both score lists resampled together; resamples with an
    undefined AG left out). ``n_boot=0`` means no interval, ``(nan, nan)``; otherwise
    ``n_boot`` must be at least 100 (icml.stats' minimum)."""
    import numpy as np

    from icml import stats

    t, c = np.asarray(text, dtype=float), np.asarray(chain, dtype=float)
    if t.shape != c.shape or t.size == 0:
        raise ValueError("bootstrap_ci needs two equally long, non-empty score lists")
    if n_boot == 0:
        return (math.nan, math.nan)
    try:
        est = stats.bootstrap(lambda a, b: abstraction_gap(float(a.mean()), float(b.mean()), norm),
                              t, c, level=1 - alpha, n_boot=n_boot, seed=seed)
    except ValueError as e:
        if "finite statistic" in str(e):  # AG undefined in (almost) every resample
            return (math.nan, math.nan)
        raise
    return est.lo, est.hi
