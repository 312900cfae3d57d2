"""The Abstraction Gap and its bootstrap confidence interval.

``AG = (S_T - S_C) / Z`` with S_T, S_C the mean Text-Only and Chain-Text scores (0-10) and the
normaliser ``Z`` a parameter (reconstructed from the abstract; see README):

* ``relative`` (default): ``Z = S_T``; the only choice consistent with "text 6-8, chain < 2.5,
  AG > 0.5". Undefined (NaN) when S_T = 0 < S_C.
* ``max``: ``Z = max(S_T, S_C)``, symmetric, in [-1, 1].
* ``range``: ``Z = 10``, the score range.

Equal scores give AG = 0 in every mode. A responder whose text and chain scores are both near
the floor (below ``floor``, ``gap.floor``) has no gap to measure: AG is *undefined* there (NaN,
with the reason from :func:`gap_flag`), not 0, so a blank responder never shares the oracle's
number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

NORMS = ("relative", "max", "range")


def _floor(floor: float | None) -> float:
    if floor is None:
        from icml_cage.config import GapConfig

        return GapConfig().floor
    return floor


def gap_flag(s_text: float, s_chain: float, norm: str = "relative",
             floor: float | None = None) -> str:
    """Why AG is undefined for these mean scores, or ``""`` when it is defined."""
    floor = _floor(floor)
    if max(s_text, s_chain) < floor:
        return (f"undefined: S_text {s_text:.2f} and S_chain {s_chain:.2f} are both below the "
                f"floor {floor:g} (no answer or chain to compare)")
    if s_text != s_chain and norm == "relative" and s_text <= 0:
        return "undefined: S_text is 0 < S_chain (relative norm divides by S_text)"
    return ""


def abstraction_gap(s_text: float, s_chain: float, norm: str = "relative",
                    scale: float = 10.0, floor: float | None = None) -> float:
    """AG of two mean scores; NaN when undefined (see :func:`gap_flag`): both scores below
    ``floor`` (default ``GapConfig().floor``), or a zero normaliser."""
    if norm not in NORMS:
        raise ValueError(f"norm {norm!r} is not one of {', '.join(NORMS)}")
    if max(s_text, s_chain) < _floor(floor):
        return math.nan
    diff = s_text - s_chain
    if diff == 0:
        return 0.0
    z = {"relative": s_text, "max": max(s_text, s_chain), "range": scale}[norm]
    return diff / z if z > 0 else math.nan


def item_gap(t: float, c: float, eps: float = 1e-6, floor: float | None = None) -> float:
    """One item's relative AG ``(t - c) / t``: 0 when equal, NaN when ``t <= eps < c`` or both
    scores are below ``floor`` (a blank item has no gap)."""
    if max(t, c) < _floor(floor):
        return math.nan
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
                 n_boot: int = 1000, alpha: float = 0.05, seed: int = 0,
                 floor: float | None = None) -> tuple[float, float]:
    """Percentile interval of AG over paired item resamples: a thin call into
    ``icml.stats.bootstrap`` (rows of both score lists resampled together; resamples with an
    undefined AG left out). ``(nan, nan)`` when AG itself is undefined (both means below
    ``floor``) or ``n_boot=0`` (no interval); otherwise
    ``n_boot`` must be at least 100 (icml.stats' minimum)."""
    import numpy as np

    from icml import stats

    t, c = np.asarray(text, dtype=float), np.asarray(chain, dtype=float)
    if t.shape != c.shape or t.size == 0:
        raise ValueError("bootstrap_ci needs two equally long, non-empty score lists")
    floor = _floor(floor)
    if n_boot == 0 or math.isnan(abstraction_gap(float(t.mean()), float(c.mean()), norm,
                                                 floor=floor)):
        return (math.nan, math.nan)
    try:
        est = stats.bootstrap(lambda a, b: abstraction_gap(float(a.mean()), float(b.mean()), norm,
                                                           floor=floor),
                              t, c, level=1 - alpha, n_boot=n_boot, seed=seed)
    except ValueError as e:
        if "finite statistic" in str(e):  # AG undefined in (almost) every resample
            return (math.nan, math.nan)
        raise
    return est.lo, est.hi
