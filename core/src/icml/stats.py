"""The one statistics kit for every plugin: bootstrap intervals, McNemar's test, and the minimum
detectable effect (MDE) of an evaluation.

Why one kit: results from different plugins are compared side by side, so they must mean the
same thing. Every interval here is a *percentile bootstrap* interval of a mean (or of a
difference or ratio of means), returned as an :class:`Estimate` that serialises to the same
``{"value", "lo", "hi", "n", "level", "method"}`` dict in every results file.

Conventions

* **Deterministic.** Every random draw comes from
  ``numpy.random.Generator(numpy.random.PCG64(seed))``: the same inputs and ``seed`` give the same
  numbers (on a given NumPy version; NumPy does not promise identical streams across versions).
* **Vectorised.** Resamples are drawn as count matrices (how often each unit is drawn in each
  resample) and reduced with matrix products, in chunks of at most about 200 MB.
* **Light.** Pure NumPy plus :class:`statistics.NormalDist`; no SciPy. The CLI never imports this
  module, so ``icml --help`` stays free of NumPy.
* **Strict.** Bad input (empty, NaN/inf, ragged where it must not be, ``level`` outside (0, 1),
  ``n_boot < 100``) raises a one-line :class:`ValueError`.

Which unit to resample: the *items* (test examples, prompts, problems) when there is one run;
*seeds and items* (:func:`hierarchical_ci`) when there are several training/sampling seeds,
because then the seed-to-seed variance is part of the uncertainty and an item-only bootstrap over
the pooled values understates it.

Example::

    from icml import stats

    est = stats.mean_ci(per_item_accuracy, seed=0)
    print(est.fmt())                       # "0.613 [0.571, 0.655]"
    results["accuracy"] = est.to_dict()
    stats.mcnemar(ours_correct, baseline_correct).p_value
    stats.mde_proportion(8)                # 0.70: 8 items of a 0/1 score detect only big gaps
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal, Union

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "bootstrap",
    "Estimate", "McNemar", "hierarchical_ci", "hierarchical_diff_ci", "mcnemar", "mde",
    "mde_from_samples", "mde_mean", "mde_proportion", "mean_ci", "paired_diff_ci",
    "proportion_ci", "ratio_ci", "summarize", "unpaired_diff_ci",
]

#: Seeds x items: a 2-D array (crossed design) or a list of per-seed 1-D sequences (nested
#: design, lengths may differ). A 1-D sequence of numbers counts as a single seed.
HierValues = Union[ArrayLike, Sequence[ArrayLike]]
Design = Literal["auto", "crossed", "nested"]

_CHUNK_BYTES = 200_000_000   # memory budget of one vectorised chunk of resamples
_MIN_BOOT = 100              # fewer resamples make the percentile interval's tails mostly noise
_EXACT_BINOM_MAX = 1000      # up to this many discordant pairs McNemar sums exact integers


# --------------------------------------------------------------------------------------------
# Result types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """A point estimate with a two-sided confidence interval ``[lo, hi]`` at ``level``.

    ``n`` is the number of observations behind ``value`` (items, pairs, or seed x item cells);
    ``method`` says in words how the interval was obtained, so a results file is self-describing.
    """

    value: float
    lo: float
    hi: float
    n: int
    level: float = 0.95
    method: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form ``{"value", "lo", "hi", "n", "level", "method"}`` with plain Python
        floats/int/str (no NumPy scalars), ready for ``json.dumps`` or :mod:`icml.jsonio`."""
        return {"value": float(self.value), "lo": float(self.lo), "hi": float(self.hi),
                "n": int(self.n), "level": float(self.level), "method": str(self.method)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Estimate:
        """Inverse of :meth:`to_dict`; ``level`` and ``method`` may be absent (defaults)."""
        missing = sorted({"value", "lo", "hi", "n"} - set(d))
        if missing:
            raise ValueError(f"Estimate.from_dict: missing keys {missing}")
        return cls(value=float(d["value"]), lo=float(d["lo"]), hi=float(d["hi"]), n=int(d["n"]),
                   level=float(d.get("level", 0.95)), method=str(d.get("method", "")))

    def fmt(self, spec: str = ".3g") -> str:
        """``"value [lo, hi]"`` with each number formatted by ``spec`` (e.g. ``".3f"``)."""
        return f"{self.value:{spec}} [{self.lo:{spec}}, {self.hi:{spec}}]"

    def contains(self, x: float) -> bool:
        """Whether ``x`` lies in the closed interval ``[lo, hi]`` (e.g. ``0`` for a difference:
        ``not est.contains(0)`` means the difference is significant at ``1 - level``)."""
        return bool(self.lo <= x <= self.hi)


@dataclass(frozen=True)
class McNemar:
    """McNemar's exact test on paired 0/1 outcomes.

    ``b01``: pairs where A is wrong and B right; ``b10``: A right and B wrong; ``n``: all pairs;
    ``p_value``: exact two-sided binomial p-value on the ``b01 + b10`` discordant pairs.
    """

    b01: int
    b10: int
    n: int
    p_value: float

    def to_dict(self) -> dict[str, Any]:
        """``{"b01", "b10", "n", "p_value"}`` with plain Python ints/float."""
        return {"b01": int(self.b01), "b10": int(self.b10), "n": int(self.n),
                "p_value": float(self.p_value)}


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _check_level(level: float) -> float:
    if isinstance(level, bool) or not isinstance(level, (int, float, np.floating)) \
            or not 0 < level < 1:
        raise ValueError(f"level must be a number in (0, 1), got {level!r}")
    return float(level)


def _check_n_boot(n_boot: int) -> int:
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) \
            or n_boot < _MIN_BOOT:
        raise ValueError(f"n_boot must be an integer >= {_MIN_BOOT}, got {n_boot!r}")
    return int(n_boot)


def _rng(seed: int) -> np.random.Generator:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return np.random.Generator(np.random.PCG64(int(seed)))


def _check_finite(x: np.ndarray, name: str) -> None:
    bad = ~np.isfinite(x)
    if bad.any():
        where = np.argwhere(bad)[0]
        at = int(where[0]) if x.ndim == 1 else tuple(int(i) for i in where)
        raise ValueError(f"{name} contains NaN or inf (first at index {at})")


def _as_float(values: Any, name: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numbers ({exc})") from None


def _vector(values: ArrayLike, name: str) -> np.ndarray:
    """``values`` as a finite, non-empty 1-D float64 array, or a one-line ValueError."""
    x = _as_float(values, name)
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {x.shape}; "
                         "use hierarchical_ci for seeds x items")
    if x.size == 0:
        raise ValueError(f"{name} is empty: an estimate needs at least one value")
    _check_finite(x, name)
    return x


def _pair(a: ArrayLike, b: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    x, y = _vector(a, "a"), _vector(b, "b")
    if x.size != y.size:
        raise ValueError(f"paired samples need equal lengths, got {x.size} and {y.size}")
    return x, y


def _z(alpha: float, power: float) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    if isinstance(power, bool) or not isinstance(power, (int, float)) or not 0 < power < 1:
        raise ValueError(f"power must be a number in (0, 1), got {power!r}")
    nd = NormalDist()
    return nd.inv_cdf(1 - alpha / 2) + nd.inv_cdf(power)


# --------------------------------------------------------------------------------------------
# Resampling engines (all vectorised, chunked)
# --------------------------------------------------------------------------------------------


def _chunks(n_boot: int, elems_per_resample: int, bytes_per_elem: int = 32) -> Iterator[int]:
    """Sizes of consecutive chunks of resamples that keep one chunk under ``_CHUNK_BYTES``."""
    step = max(1, _CHUNK_BYTES // max(1, elems_per_resample * bytes_per_elem))
    for start in range(0, n_boot, step):
        yield min(step, n_boot - start)


def _counts(rng: np.random.Generator, n: int, b: int) -> np.ndarray:
    """``(b, n)`` int64: entry ``[r, i]`` is how often unit ``i`` is drawn in resample ``r``
    (``n`` draws with replacement). Counts let a resampled mean be a matrix product."""
    idx = rng.integers(0, n, size=(b, n))
    idx += (np.arange(b, dtype=np.int64) * n)[:, None]
    return np.bincount(idx.ravel(), minlength=b * n).reshape(b, n)


def _boot_means(rng: np.random.Generator, cols: np.ndarray, n_boot: int) -> np.ndarray:
    """``(n_boot, k)`` resampled column means of ``cols`` (``(n, k)``), rows resampled jointly,
    i.e. the k columns are paired by row."""
    n, k = cols.shape
    out = np.empty((n_boot, k))
    pos = 0
    for b in _chunks(n_boot, n):
        idx = rng.integers(0, n, size=(b, n))          # gathering beats count @ values here
        for j in range(k):
            out[pos:pos + b, j] = cols[:, j][idx].mean(axis=1)
        pos += b
    return out


def _boot_crossed(rng: np.random.Generator, x: np.ndarray, n_boot: int) -> np.ndarray:
    """Resampled means of ``x`` (seeds x items) with seed rows and item columns each drawn
    with replacement, independently: the mean of the sub-matrix ``x[rows][:, cols]`` equals
    ``w_rows @ x @ w_cols / (S * I)`` with count vectors ``w``."""
    s, i = x.shape
    out = np.empty(n_boot)
    pos = 0
    for b in _chunks(n_boot, s + 2 * i):
        w_items = _counts(rng, i, b).astype(np.float64)
        w_seeds = _counts(rng, s, b).astype(np.float64)
        out[pos:pos + b] = np.einsum("bi,bi->b", w_seeds @ x, w_items) / (s * i)
        pos += b
    return out


def _boot_nested(rng: np.random.Generator, clusters: list[np.ndarray],
                 n_boot: int) -> np.ndarray:
    """Resampled pooled means of a two-level sample: draw clusters (seeds) with replacement,
    then each drawn cluster's items with replacement (a cluster drawn m times is resampled m
    times independently, i.e. ``m * n_k`` uniform draws from its items)."""
    lengths = np.array([c.size for c in clusters], dtype=np.int64)
    flat = np.concatenate(clusters)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    n_clusters = lengths.size
    worst = n_clusters * int(lengths.max())          # most item draws one resample can need
    out = np.empty(n_boot)
    pos = 0
    for b in _chunks(n_boot, worst + n_clusters, bytes_per_elem=48):
        m = _counts(rng, n_clusters, b)                # (b, C) times each cluster is drawn
        draws = (m * lengths).ravel()                  # item draws per (resample, cluster)
        which = np.repeat(np.tile(np.arange(n_clusters), b), draws)
        rep = np.repeat(np.repeat(np.arange(b), n_clusters), draws)
        item = offsets[which] + rng.integers(0, lengths[which])
        sums = np.bincount(rep, weights=flat[item], minlength=b)
        out[pos:pos + b] = sums / (m @ lengths)
        pos += b
    return out


def _interval(value: float, reps: np.ndarray | None, n: int, level: float,
              method: str) -> Estimate:
    """Percentile interval of the resampled statistics ``reps``; ``None`` = no spread."""
    if reps is None:
        lo = hi = value
    else:
        lo, hi = np.quantile(reps, [(1 - level) / 2, (1 + level) / 2])
    return Estimate(value=float(value), lo=float(lo), hi=float(hi), n=int(n), level=level,
                    method=method)


def _flat_spread(*arrays: np.ndarray) -> bool:
    """True when every array is constant (or a single value): every resample then gives the
    point estimate, so the interval is the point itself, exactly, with no rounding noise."""
    return all(a.size == 1 or np.ptp(a) == 0 for a in arrays)


# --------------------------------------------------------------------------------------------
# One-level bootstrap
# --------------------------------------------------------------------------------------------


def mean_ci(values: ArrayLike, *, level: float = 0.95, n_boot: int = 2000,
            seed: int = 0) -> Estimate:
    """Mean of ``values`` (1-D, one per item) with a percentile bootstrap interval over items.

    Use when there is a single run: the items (examples, prompts, problems) are the random
    sample whose variation the interval should describe. One value gives ``lo == hi == value``.

    >>> mean_ci([1.0, 1.0, 1.0]).fmt()
    '1 [1, 1]'
    """
    level, n_boot, rng = _check_level(level), _check_n_boot(n_boot), _rng(seed)
    x = _vector(values, "values")
    method = f"percentile bootstrap over items (B={n_boot})"
    if _flat_spread(x):
        return _interval(x.mean(), None, x.size, level, method)
    return _interval(x.mean(), _boot_means(rng, x[:, None], n_boot)[:, 0], x.size, level, method)


def paired_diff_ci(a: ArrayLike, b: ArrayLike, *, level: float = 0.95, n_boot: int = 2000,
                   seed: int = 0) -> Estimate:
    """``mean(a - b)`` for paired samples (``a[i]`` and ``b[i]`` score the same item), items
    resampled jointly for ``a`` and ``b``.

    Pairing removes the item-difficulty variance both systems share, so this interval is
    usually far narrower than :func:`unpaired_diff_ci` on the same numbers. ``n`` = pairs.
    """
    level, n_boot, rng = _check_level(level), _check_n_boot(n_boot), _rng(seed)
    x, y = _pair(a, b)
    d = x - y                 # resampling pairs jointly == resampling the differences
    method = f"percentile bootstrap over paired items (B={n_boot})"
    if _flat_spread(d):
        return _interval(d.mean(), None, d.size, level, method)
    return _interval(d.mean(), _boot_means(rng, d[:, None], n_boot)[:, 0], d.size, level, method)


def unpaired_diff_ci(a: ArrayLike, b: ArrayLike, *, level: float = 0.95, n_boot: int = 2000,
                     seed: int = 0) -> Estimate:
    """``mean(a) - mean(b)`` for independent samples (different items, possibly different
    sizes), each resampled independently. ``n`` = ``len(a) + len(b)``."""
    level, n_boot, rng = _check_level(level), _check_n_boot(n_boot), _rng(seed)
    x, y = _vector(a, "a"), _vector(b, "b")
    value = x.mean() - y.mean()
    method = f"percentile bootstrap over items, samples resampled independently (B={n_boot})"
    if _flat_spread(x, y):
        return _interval(value, None, x.size + y.size, level, method)
    reps = _boot_means(rng, x[:, None], n_boot)[:, 0] - _boot_means(rng, y[:, None], n_boot)[:, 0]
    return _interval(value, reps, x.size + y.size, level, method)


def ratio_ci(a: ArrayLike, b: ArrayLike, *, level: float = 0.95, n_boot: int = 2000,
             seed: int = 0) -> Estimate:
    """``mean(a) / mean(b)`` with paired resampling (``a[i]``, ``b[i]`` measured together, e.g.
    the two systems' times on the same batch), e.g. a speed-up ``mean(t_base) / mean(t_ours)``.

    ``b`` must be all positive or all negative so that no resampled denominator is zero. The
    percentile interval of a ratio is asymmetric around ``value``, as it should be.
    """
    level, n_boot, rng = _check_level(level), _check_n_boot(n_boot), _rng(seed)
    x, y = _pair(a, b)
    if not ((y > 0).all() or (y < 0).all()):
        raise ValueError("ratio_ci needs b all positive or all negative (a zero denominator "
                         "mean is possible otherwise)")
    value = x.mean() / y.mean()
    method = f"percentile bootstrap over paired items, ratio of means (B={n_boot})"
    if _flat_spread(x, y):
        return _interval(value, None, x.size, level, method)
    means = _boot_means(rng, np.column_stack([x, y]), n_boot)
    return _interval(value, means[:, 0] / means[:, 1], x.size, level, method)


# --------------------------------------------------------------------------------------------
# Two-level (seeds x items) bootstrap
# --------------------------------------------------------------------------------------------


def bootstrap(statistic: Callable[..., float], *arrays: Any, groups: Sequence[Any] | None = None,
              level: float = 0.95, n_boot: int = 2000, seed: int = 0) -> Estimate:
    """Percentile bootstrap CI of any statistic that is not a mean (a ratio with a ``max``
    normalisation, a rank correlation, a regression slope).

    ``arrays`` are equally long sequences (NumPy arrays, lists) whose rows belong together:
    one resample draws row indices with replacement and calls ``statistic(*resampled)``, so
    paired data stay paired. ``groups`` (one label per row) makes it a cluster bootstrap:
    whole groups are drawn (e.g. every variant of one base dialogue, every item of one seed),
    so the interval counts the variance between groups. The value is ``statistic(*arrays)``.
    Resamples whose statistic is not finite (a zero denominator) are left out; the method
    string says how many. Python calls the statistic ``n_boot`` times: keep it cheap.

    Prefer :func:`mean_ci`, :func:`paired_diff_ci`, :func:`hierarchical_ci` for means: they are
    vectorised and exact in their degenerate cases."""
    level, n_boot = _check_level(level), _check_n_boot(n_boot)
    rng = _rng(seed)
    if not arrays:
        raise ValueError("bootstrap needs at least one array")
    cols = [np.asarray(a) for a in arrays]
    n = len(cols[0])
    if n == 0:
        raise ValueError("bootstrap of empty data")
    if any(len(c) != n for c in cols):
        raise ValueError(f"arrays have different lengths {[len(c) for c in cols]}: rows are "
                         "resampled together")
    value = float(statistic(*cols))
    if groups is None:
        members = [np.array([i]) for i in range(n)]
        unit = "rows"
    else:
        labels = list(groups)
        if len(labels) != n:
            raise ValueError(f"groups has {len(labels)} labels for {n} rows")
        index: dict[Any, list[int]] = {}
        for i, g in enumerate(labels):
            index.setdefault(g, []).append(i)
        members = [np.array(v) for v in index.values()]
        unit = "groups"
    k = len(members)
    if k == 1:
        return _interval(value, None, k, level, f"bootstrap over one {unit[:-1]}: no spread")
    reps = np.empty(n_boot)
    for b in range(n_boot):
        pick = rng.integers(0, k, size=k)
        idx = np.concatenate([members[j] for j in pick])
        reps[b] = float(statistic(*(c[idx] for c in cols)))
    finite = reps[np.isfinite(reps)]
    dropped = n_boot - finite.size
    if finite.size < _MIN_BOOT:
        raise ValueError(f"only {finite.size} of {n_boot} resamples gave a finite statistic")
    method = f"percentile bootstrap over {k} {unit} (B={n_boot}" + \
        (f", {dropped} non-finite resamples left out)" if dropped else ")")
    return _interval(value, finite, k, level, method)


def _parse_hier(values: HierValues, design: Design,
                name: str) -> tuple[str, np.ndarray | list[np.ndarray]]:
    """``("crossed", 2-D array)`` or ``("nested", [1-D arrays])``, validated."""
    if design not in ("auto", "crossed", "nested"):
        raise ValueError(f"design must be 'auto', 'crossed' or 'nested', got {design!r}")
    if not isinstance(values, (list, tuple)) and not (isinstance(values, np.ndarray)
                                                      and values.dtype == object):
        arr = _as_float(values, name)                    # arrays, tensors, data frames
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2:
            raise ValueError(f"{name} must be seeds x items (2-D), got shape {arr.shape}")
        rows = list(arr)
    else:
        try:
            seq = list(values)  # type: ignore[arg-type]
        except TypeError:
            raise ValueError(f"{name} must be a 2-D array or a list of sequences") from None
        if seq and all(np.ndim(v) == 0 for v in seq):
            seq = [seq]                                  # plain numbers: one seed
        if any(np.ndim(v) == 0 for v in seq):
            raise ValueError(f"{name} mixes numbers and sequences; give one sequence per seed")
        rows = [_as_float(v, f"{name}[{k}]") for k, v in enumerate(seq)]
    if not rows:
        raise ValueError(f"{name} is empty: an estimate needs at least one seed")
    for k, r in enumerate(rows):
        if r.ndim != 1:
            raise ValueError(f"{name}[{k}] must be 1-D, got shape {r.shape}")
        if r.size == 0:
            raise ValueError(f"{name}[{k}] is empty: every seed needs at least one item")
        _check_finite(r, f"{name}[{k}]")
    same = len({r.size for r in rows}) == 1
    if design == "crossed" and not same:
        raise ValueError(f"design='crossed' needs the same number of items under every seed, "
                         f"got {sorted({r.size for r in rows})}")
    if design == "nested" or not same:
        return "nested", rows
    return "crossed", np.stack(rows)


def _hier_boot(kind: str, data: np.ndarray | list[np.ndarray], n_boot: int, seed: int,
               what: str = "") -> tuple[float, np.ndarray | None, int, str]:
    """``(value, resampled means or None when there is no spread, n, method)``.

    Degenerate shapes are delegated to the one-level bootstrap with the same generator, so one
    seed gives exactly :func:`mean_ci` of its row and one item per seed the seed bootstrap.
    """
    rng = _rng(seed)
    if kind == "crossed":
        x = np.asarray(data)
        s, i = x.shape
        value, n, flat = x.mean(), x.size, _flat_spread(x.ravel())
        if s == 1 or i == 1:
            unit = "items" if s == 1 else "seeds (one item per seed)"
            col = x.reshape(-1, 1)
            reps = None if flat else _boot_means(rng, col, n_boot)[:, 0]
            return value, reps, n, f"percentile bootstrap over {what}{unit} (B={n_boot})"
        reps = None if flat else _boot_crossed(rng, x, n_boot)
        return value, reps, n, (f"percentile bootstrap over {what}seeds x items, crossed: seeds "
                                f"and items resampled independently (B={n_boot})")
    rows = list(data)
    pooled = np.concatenate(rows)
    value, n, flat = pooled.mean(), pooled.size, _flat_spread(pooled)
    if len(rows) == 1 or all(r.size == 1 for r in rows):
        unit = "items" if len(rows) == 1 else "seeds (one item per seed)"
        reps = None if flat else _boot_means(rng, pooled[:, None], n_boot)[:, 0]
        return value, reps, n, f"percentile bootstrap over {what}{unit} (B={n_boot})"
    reps = None if flat else _boot_nested(rng, rows, n_boot)
    return value, reps, n, (f"percentile bootstrap over {what}seeds, then items within each "
                            f"drawn seed, nested (B={n_boot})")


def hierarchical_ci(values: HierValues, *, level: float = 0.95, n_boot: int = 2000,
                    seed: int = 0, design: Design = "auto") -> Estimate:
    """Mean over seeds and items with a two-level bootstrap that makes seed variance count.

    ``values`` is either

    * **crossed**: a seeds x items 2-D array (or equal-length per-seed lists), the same items
      evaluated under every seed. Each resample draws seed rows *and* item columns with
      replacement, independently, and takes the mean of the drawn sub-matrix; or
    * **nested**: a list of per-seed 1-D sequences of possibly different lengths (different
      items per seed). Each resample draws seeds with replacement, then items with replacement
      within each drawn seed, and takes the pooled mean of everything drawn.

    ``design="auto"`` picks crossed when every seed has the same number of items (the usual case:
    one test set, several training seeds) and nested otherwise; pass ``design="nested"`` for
    equal-sized but different item sets. A 1-D sequence counts as one seed.

    Why: a seed bootstrap ignores that the test set is a sample, and an item bootstrap of the
    pooled values ignores that the seeds are a sample -- with large seed-to-seed variance (a
    fragile training run) its interval is far too narrow. Resampling both levels gives roughly
    ``var_seed / S + var_item / I``. The price: with truly no seed effect the interval is
    somewhat conservative, since the between-seed spread of the resampled rows already carries
    item noise. With one seed this reduces exactly to :func:`mean_ci` on
    that row (same ``seed``, same numbers); with one item per seed, to a bootstrap over seeds.
    ``value`` is the mean of all values; ``n`` is the number of values (cells).
    """
    level, n_boot = _check_level(level), _check_n_boot(n_boot)
    kind, data = _parse_hier(values, design, "values")
    value, reps, n, method = _hier_boot(kind, data, n_boot, seed)
    return _interval(value, reps, n, level, method)


def hierarchical_diff_ci(a: HierValues, b: HierValues, *, level: float = 0.95,
                         n_boot: int = 2000, seed: int = 0,
                         design: Design = "auto") -> Estimate:
    """Paired ``mean(a) - mean(b)`` over seeds and items: the same resampled seeds and items for
    ``a`` and ``b`` (same shape; ``a[s][i]`` and ``b[s][i]`` share seed ``s`` and item ``i``).

    Because both statistics are means of the same resampled cells, this is the two-level
    bootstrap (:func:`hierarchical_ci`) of the cell-wise differences ``a - b``.
    """
    level, n_boot = _check_level(level), _check_n_boot(n_boot)
    kind_a, xa = _parse_hier(a, design, "a")
    kind_b, xb = _parse_hier(b, design, "b")
    shape_a = [r.size for r in xa]
    shape_b = [r.size for r in xb]
    if kind_a != kind_b or shape_a != shape_b:
        raise ValueError(f"a and b must have the same shape (seeds x items), got {len(shape_a)} "
                         f"seeds with {shape_a[:5]}... items and {len(shape_b)} with "
                         f"{shape_b[:5]}...")
    if kind_a == "crossed":
        d: np.ndarray | list[np.ndarray] = np.asarray(xa) - np.asarray(xb)
    else:
        d = [ra - rb for ra, rb in zip(xa, xb)]
    value, reps, n, method = _hier_boot(kind_a, d, n_boot, seed, what="paired ")
    return _interval(value, reps, n, level, method)


# --------------------------------------------------------------------------------------------
# McNemar
# --------------------------------------------------------------------------------------------


def _binary(values: ArrayLike, name: str) -> np.ndarray:
    x = np.asarray(values)
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {x.shape}")
    if x.size == 0:
        raise ValueError(f"{name} is empty: McNemar's test needs at least one pair")
    if x.dtype != bool:
        f = _as_float(x, name)
        if not np.isin(f, (0.0, 1.0)).all():
            raise ValueError(f"{name} must be 0/1 or bool (correct or not)")
        x = f == 1.0
    return x


def _binom_two_sided_p(k: int, n: int) -> float:
    """``min(1, 2 * P(X <= k))`` for ``X ~ Bin(n, 1/2)``: exact integers for small ``n``,
    log-space (lgamma + log-sum-exp) for large ``n`` so ``n`` up to 1e5 and beyond is fast."""
    if n == 0:
        return 1.0
    if n <= _EXACT_BINOM_MAX:
        return min(1.0, 2 * sum(math.comb(n, j) for j in range(k + 1)) / 2**n)
    lg = math.lgamma
    logs = np.array([lg(n + 1) - lg(j + 1) - lg(n - j + 1) for j in range(k + 1)])
    top = logs.max()
    log_tail = top + math.log(np.exp(logs - top).sum()) - n * math.log(2)
    return min(1.0, math.exp(math.log(2) + log_tail))


def proportion_ci(correct: ArrayLike, *, level: float = 0.95) -> Estimate:
    """The share of 0/1 outcomes that are 1, with Wilson's score interval.

    For a single run's accuracy on independent items. Unlike the percentile bootstrap (which
    collapses to ``[0, 0]`` at 0/n and ``[1, 1]`` at n/n, claiming certainty from a few items),
    Wilson's interval stays open at the floor and the ceiling: 0 of 6 gives ``[0, 0.39]``. Use
    :func:`hierarchical_ci` when several seeds add their own variance.

    >>> proportion_ci([0] * 6).fmt(".2f")
    '0.00 [0.00, 0.39]'
    """
    level = _check_level(level)
    if np.asarray(correct).size == 0:
        raise ValueError("correct is empty: a proportion needs at least one outcome")
    x = _binary(correct, "correct")
    n, p = int(x.size), float(x.mean())
    z = NormalDist().inv_cdf(0.5 + level / 2)
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return Estimate(p, max(0.0, centre - half), min(1.0, centre + half), n, level,
                    "Wilson score interval")


def mcnemar(a_correct: ArrayLike, b_correct: ArrayLike) -> McNemar:
    """McNemar's exact test: do systems A and B, scored 0/1 on the same items, differ?

    Only the discordant pairs carry information: ``b01`` (A wrong, B right) and ``b10``
    (A right, B wrong). Under the null each discordant pair goes either way with probability 1/2,
    so ``p = min(1, 2 * P(X <= min(b01, b10)))`` with ``X ~ Bin(b01 + b10, 1/2)``; ``p = 1``
    without discordant pairs. Exact, so valid for the small counts where the chi-square version
    is not.

    >>> mcnemar([1, 1, 1, 1, 1], [0, 0, 0, 0, 0]).p_value
    0.0625
    """
    a, b = _binary(a_correct, "a_correct"), _binary(b_correct, "b_correct")
    if a.size != b.size:
        raise ValueError(f"paired outcomes need equal lengths, got {a.size} and {b.size}")
    b01 = int(np.count_nonzero(~a & b))
    b10 = int(np.count_nonzero(a & ~b))
    return McNemar(b01=b01, b10=b10, n=int(a.size),
                   p_value=_binom_two_sided_p(min(b01, b10), b01 + b10))


# --------------------------------------------------------------------------------------------
# Minimum detectable effect
# --------------------------------------------------------------------------------------------


def mde(se: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Minimum detectable effect ``(z_{1-alpha/2} + z_{power}) * se`` of a two-sided test.

    The smallest true difference that a test at level ``alpha`` detects with probability
    ``power``, given the standard error ``se`` of the estimated difference. Report it next to a
    "no significant difference" so readers see what the evaluation could have seen at all.
    With the defaults the factor is 1.96 + 0.84 = 2.80.

    >>> round(mde(0.1), 3)
    0.28
    """
    se = float(se)
    if math.isnan(se) or se < 0:
        raise ValueError(f"se must be >= 0, got {se!r}")
    return _z(alpha, power) * se


def mde_mean(sd: float, n: int, *, paired: bool = True, alpha: float = 0.05,
             power: float = 0.8) -> float:
    """MDE of a difference of means over ``n`` items.

    ``paired=True``: ``sd`` is the standard deviation of the per-item differences and
    ``se = sd / sqrt(n)``. ``paired=False`` (two independent samples of ``n`` items each, common
    per-arm ``sd``): ``se = sqrt(2) * sd / sqrt(n)``.

    >>> round(mde_mean(1.0, 100), 3)          # paired, sd of differences 1, 100 items
    0.28
    """
    sd = float(sd)
    if not math.isfinite(sd) or sd < 0:
        raise ValueError(f"sd must be a finite number >= 0, got {sd!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    se = sd / math.sqrt(n) if paired else math.sqrt(2) * sd / math.sqrt(n)
    return mde(se, alpha=alpha, power=power)


def mde_proportion(n: int, *, p: float = 0.5, paired: bool = False,
                   discordant: float | None = None, alpha: float = 0.05,
                   power: float = 0.8) -> float:
    """MDE of a difference of two accuracies (0/1 scores) over ``n`` items per system.

    ``paired=False`` (independent items): ``se = sqrt(2 p (1 - p) / n)``, largest at the default
    worst case ``p = 0.5``.

    ``paired=True`` (both systems on the same items): the per-item difference lies in
    {-1, 0, 1} with variance ``p01 + p10 - (p01 - p10)^2 <= p01 + p10``, the discordance rate.
    Pass the expected ``discordant`` rate if known; otherwise the bound uses its worst case for
    accuracy ``p``, ``2 * min(p, 1 - p)``, which is 1 at ``p = 0.5`` (every item discordant).
    Real systems agree on most items, so ``discordant`` is usually much smaller and pairing
    pays: e.g. ``discordant=0.2`` over 100 items gives 0.125 versus 0.198 unpaired.

    n = 8 items of a 0/1 score detect only differences above 0.70:

    >>> round(mde_proportion(8), 2)
    0.7
    >>> round(mde_proportion(1000), 3)
    0.063
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    p = float(p)
    if not 0 <= p <= 1:
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    if discordant is not None and not paired:
        raise ValueError("discordant applies to paired=True only")
    if paired:
        var = 2 * min(p, 1 - p) if discordant is None else float(discordant)
        if not 0 <= var <= 1:
            raise ValueError(f"discordant must be in [0, 1], got {discordant!r}")
    else:
        var = 2 * p * (1 - p)
    return mde(math.sqrt(var / n), alpha=alpha, power=power)


def _boot_se(reps: np.ndarray | None, n: int) -> float:
    """Bootstrap standard error; ``inf`` from a single observation (nothing is detectable),
    0 from a sample without spread."""
    if n == 1:
        return math.inf
    return 0.0 if reps is None else float(reps.std(ddof=1))


def mde_from_samples(values: HierValues, *, alpha: float = 0.05, power: float = 0.8,
                     n_boot: int = 2000, seed: int = 0, design: Design = "auto") -> float:
    """MDE from data: ``mde(se)`` with ``se`` the bootstrap standard error of the mean of
    ``values``, resampled exactly as :func:`hierarchical_ci` does (1-D: items; 2-D: crossed
    seeds x items; list of sequences: nested), so seed variance counts here too.

    Pass per-item (or per-cell) *differences* ``a - b`` to get the MDE of a paired comparison.
    For one system's scores it is the MDE against a fixed reference value; two independent runs
    of similar spread have ``sqrt(2)`` times that. A single value gives ``inf``; a sample
    without spread gives 0 (for 0/1 scores :func:`mde_proportion` gives the worst case).
    """
    _z(alpha, power)
    n_boot = _check_n_boot(n_boot)
    kind, data = _parse_hier(values, design, "values")
    _, reps, n, _ = _hier_boot(kind, data, n_boot, seed)
    return mde(_boot_se(reps, n), alpha=alpha, power=power)


def summarize(values: HierValues, *, level: float = 0.95, n_boot: int = 2000, seed: int = 0,
              alpha: float = 0.05, power: float = 0.8,
              design: Design = "auto") -> dict[str, Any]:
    """``{"mean": Estimate.to_dict(), "mde": float}`` for a results file, from one bootstrap.

    ``values`` as in :func:`hierarchical_ci` (1-D items, seeds x items, or per-seed lists); the
    mean and its interval equal :func:`hierarchical_ci`'s (and :func:`mean_ci`'s for 1-D) and
    ``mde`` equals :func:`mde_from_samples`'s, for the same ``seed``.
    """
    level, n_boot = _check_level(level), _check_n_boot(n_boot)
    _z(alpha, power)
    kind, data = _parse_hier(values, design, "values")
    value, reps, n, method = _hier_boot(kind, data, n_boot, seed)
    return {"mean": _interval(value, reps, n, level, method).to_dict(),
            "mde": mde(_boot_se(reps, n), alpha=alpha, power=power)}
