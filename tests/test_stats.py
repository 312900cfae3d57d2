"""icml.stats: bootstrap intervals against closed forms, determinism, McNemar against hand
computation (and SciPy when installed), MDE closed forms, and one-line errors."""

from __future__ import annotations

import doctest
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from icml import stats
from icml.stats import (
    Estimate,
    hierarchical_ci,
    hierarchical_diff_ci,
    mcnemar,
    mde,
    mde_from_samples,
    mde_mean,
    mde_proportion,
    mean_ci,
    paired_diff_ci,
    ratio_ci,
    summarize,
    unpaired_diff_ci,
)

Z = 1.959963984540054 + 0.8416212335729143   # z_{0.975} + z_{0.8}


def _normal(n: int, seed: int = 0, loc: float = 0.0, sd: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(loc, sd, n)


def _half(e: Estimate) -> float:
    return (e.hi - e.lo) / 2


# ---- Estimate --------------------------------------------------------------------------------


def test_estimate_round_trips_and_formats() -> None:
    e = mean_ci(_normal(50), seed=3)
    d = e.to_dict()
    assert list(d) == ["value", "lo", "hi", "n", "level", "method"]
    assert all(type(d[k]) is float for k in ("value", "lo", "hi", "level"))
    assert type(d["n"]) is int and d["n"] == 50
    assert Estimate.from_dict(json.loads(json.dumps(d))) == e
    assert Estimate.from_dict({"value": 1, "lo": 0, "hi": 2, "n": 3}) == Estimate(1.0, 0.0, 2.0, 3)
    assert Estimate(0.5, 0.25, 0.75, 4).fmt() == "0.5 [0.25, 0.75]"
    assert Estimate(0.5, 0.25, 0.75, 4).fmt(".1f") == "0.5 [0.2, 0.8]"
    assert e.contains(e.value) and e.contains(e.lo) and not e.contains(e.hi + 1e-9)
    with pytest.raises(ValueError, match="missing keys"):
        Estimate.from_dict({"value": 1.0})


# ---- one-level bootstrap ---------------------------------------------------------------------


def test_mean_ci_matches_normal_theory() -> None:
    x = _normal(400, seed=1, loc=2.0, sd=3.0)
    e = mean_ci(x, seed=0)
    theory = 1.959964 * x.std(ddof=1) / math.sqrt(x.size)
    assert e.value == pytest.approx(x.mean())
    assert _half(e) == pytest.approx(theory, rel=0.15)
    assert (e.lo + e.hi) / 2 == pytest.approx(x.mean(), abs=0.15 * theory)
    assert e.n == 400 and e.level == 0.95 and "items" in e.method
    assert _half(mean_ci(x, level=0.5, seed=0)) < _half(e)


def test_same_seed_same_numbers_other_seed_other_numbers() -> None:
    x = _normal(60, seed=2)
    X = _normal(4 * 30, seed=3).reshape(4, 30)
    nested = [_normal(k, seed=k) for k in (5, 9, 13)]
    for f in (lambda s: mean_ci(x, seed=s), lambda s: paired_diff_ci(x, x[::-1], seed=s),
              lambda s: unpaired_diff_ci(x, x[:20], seed=s),
              lambda s: ratio_ci(x + 10, x[::-1] + 10, seed=s),
              lambda s: hierarchical_ci(X, seed=s), lambda s: hierarchical_ci(nested, seed=s)):
        assert f(7) == f(7)
        assert f(7) != f(8)
    assert mde_from_samples(X, seed=5) == mde_from_samples(X, seed=5)


def test_degenerate_samples_give_the_point() -> None:
    assert mean_ci([0.7]) == Estimate(0.7, 0.7, 0.7, 1, 0.95, mean_ci([0.7]).method)
    e = mean_ci([0.1] * 7)
    assert e.lo == e.value == e.hi
    e = hierarchical_ci(np.full((3, 4), 0.5))
    assert (e.lo, e.value, e.hi) == (0.5, 0.5, 0.5)
    e = paired_diff_ci([1, 2, 3], [0, 1, 2])
    assert (e.lo, e.value, e.hi) == (1.0, 1.0, 1.0)


def test_paired_is_narrower_than_unpaired_for_correlated_scores() -> None:
    item = _normal(200, seed=4, sd=2.0)              # shared item difficulty
    a = item + 0.3 + _normal(200, seed=5, sd=0.3)
    b = item + _normal(200, seed=6, sd=0.3)
    p, u = paired_diff_ci(a, b, seed=0), unpaired_diff_ci(a, b, seed=0)
    assert p.value == pytest.approx(u.value) == pytest.approx(a.mean() - b.mean())
    assert p.n == 200 and u.n == 400
    assert _half(p) < 0.3 * _half(u)
    assert not p.contains(0.0) and u.contains(0.0)
    assert _half(p) == pytest.approx(1.96 * (a - b).std(ddof=1) / math.sqrt(200), rel=0.15)


def test_unpaired_matches_welch_standard_error() -> None:
    a, b = _normal(300, seed=7, sd=1.0), _normal(120, seed=8, loc=1.0, sd=2.0)
    se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    assert _half(unpaired_diff_ci(a, b, seed=1)) == pytest.approx(1.96 * se, rel=0.15)


def test_ratio_ci() -> None:
    base = np.random.default_rng(9).uniform(1.0, 1.2, 80)
    ours = base / 2 * np.random.default_rng(10).uniform(0.95, 1.05, 80)
    e = ratio_ci(base, ours, seed=0)
    assert e.value == pytest.approx(base.mean() / ours.mean())
    assert e.lo < e.value < e.hi and e.contains(2.0) and e.hi - e.lo < 0.1
    with pytest.raises(ValueError, match="all positive or all negative"):
        ratio_ci([1.0, 2.0], [1.0, -1.0])
    with pytest.raises(ValueError, match="equal lengths"):
        ratio_ci([1.0, 2.0], [1.0])


# ---- two-level bootstrap ---------------------------------------------------------------------


def _seeds_by_items(s: int, i: int, seed_sd: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(0, seed_sd, (s, 1)) + rng.normal(0, 1, (1, i)) + rng.normal(0, .5, (s, i))


def test_crossed_counts_seed_variance() -> None:
    X = _seeds_by_items(5, 200, seed_sd=1.0)
    h, flat = hierarchical_ci(X, seed=0), mean_ci(X.ravel(), seed=0)
    assert h.value == pytest.approx(X.mean()) and h.n == 1000 and "crossed" in h.method
    assert _half(h) > 3 * _half(flat)
    # Roughly normal theory for the two-way random-effects mean: var_seed/S + var_item/I.
    theory = 1.96 * math.sqrt(X.mean(axis=1).var(ddof=1) / 5 + X.mean(axis=0).var(ddof=1) / 200)
    assert _half(h) == pytest.approx(theory, rel=0.35)
    # Without a seed effect, the seeds add little over the item bootstrap of the seed means.
    X0 = _seeds_by_items(5, 200, seed_sd=0.0, seed=1)
    assert _half(hierarchical_ci(X0, seed=0)) < 1.6 * _half(mean_ci(X0.mean(axis=0), seed=0))


def test_hierarchical_reduces_to_one_level() -> None:
    X = _seeds_by_items(4, 30, seed_sd=1.0)
    one_seed = hierarchical_ci(X[:1], seed=3)
    assert one_seed == mean_ci(X[0], seed=3)                     # bit for bit, same method
    assert hierarchical_ci(list(X[0]), seed=3) == one_seed       # 1-D = one seed
    assert hierarchical_ci([X[0].tolist()], seed=3) == one_seed
    one_item = hierarchical_ci(X[:, :1], seed=3)
    assert (one_item.lo, one_item.hi) == (mean_ci(X[:, 0], seed=3).lo, mean_ci(X[:, 0],
                                                                             seed=3).hi)
    assert "seeds" in one_item.method
    nested_one = hierarchical_ci([X[0, :10]], seed=3)
    assert nested_one == mean_ci(X[0, :10], seed=3)


def test_nested_design() -> None:
    rng = np.random.default_rng(11)
    rows = [rng.normal(m, 1.0, k) for m, k in zip(rng.normal(0, 1.0, 6), (40, 80, 60, 120, 50,
                                                                         70))]
    h = hierarchical_ci(rows, seed=0)
    pooled = np.concatenate(rows)
    assert h.value == pytest.approx(pooled.mean()) and h.n == pooled.size
    assert "nested" in h.method
    assert _half(h) > 3 * _half(mean_ci(pooled, seed=0))
    # Equal lengths: crossed by default, nested on request, both sensible and different.
    X = _seeds_by_items(4, 50, seed_sd=1.0)
    assert "crossed" in hierarchical_ci(list(X)).method
    nested = hierarchical_ci(list(X), design="nested")
    assert "nested" in nested.method and nested.contains(X.mean())
    with pytest.raises(ValueError, match="same number of items"):
        hierarchical_ci(rows, design="crossed")


def test_hierarchical_diff_is_the_bootstrap_of_differences() -> None:
    a = _seeds_by_items(4, 60, seed_sd=1.0, seed=2)
    b = a - 0.2 + np.random.default_rng(12).normal(0, 0.1, a.shape)
    d = hierarchical_diff_ci(a, b, seed=4)
    ref = hierarchical_ci(a - b, seed=4)
    assert (d.value, d.lo, d.hi, d.n) == (ref.value, ref.lo, ref.hi, ref.n)
    assert "paired" in d.method and d.contains(0.2) and not d.contains(0.0)
    ra, rb = [a[0, :10], a[1, :20]], [b[0, :10], b[1, :20]]
    dn = hierarchical_diff_ci(ra, rb, seed=4)
    assert dn.value == pytest.approx(np.concatenate([ra[0] - rb[0], ra[1] - rb[1]]).mean())
    with pytest.raises(ValueError, match="same shape"):
        hierarchical_diff_ci(a, b[:, :-1])
    with pytest.raises(ValueError, match="same shape"):
        hierarchical_diff_ci(ra, [rb[0], rb[1][:-1]])


def test_large_inputs_are_chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats, "_CHUNK_BYTES", 20_000)   # force many small chunks
    x = _normal(300, seed=13)
    X = _seeds_by_items(3, 40, seed_sd=1.0)
    rows = [X[0, :10], X[1], X[2, :25]]
    small = (mean_ci(x, seed=1), hierarchical_ci(X, seed=1), hierarchical_ci(rows, seed=1))
    monkeypatch.undo()
    big = (mean_ci(x, seed=1), hierarchical_ci(X, seed=1), hierarchical_ci(rows, seed=1))
    for s, b in zip(small, big):     # different chunking, other draws, same interval roughly
        assert s.value == b.value and _half(s) == pytest.approx(_half(b), rel=0.15)


# ---- McNemar ---------------------------------------------------------------------------------


def _pairs(b01: int, b10: int, same: int = 3) -> tuple[list[int], list[int]]:
    a = [0] * b01 + [1] * b10 + [1] * same
    b = [1] * b01 + [0] * b10 + [1] * same
    return a, b


@pytest.mark.parametrize(("b01", "b10", "p"), [
    (0, 5, 0.0625), (5, 0, 0.0625), (3, 3, 1.0), (0, 0, 1.0), (1, 9, 22 / 1024),
    (0, 1, 1.0), (2, 8, 2 * (1 + 10 + 45) / 1024)])
def test_mcnemar_hand_values(b01: int, b10: int, p: float) -> None:
    r = mcnemar(*_pairs(b01, b10))
    assert (r.b01, r.b10, r.n) == (b01, b10, b01 + b10 + 3)
    assert r.p_value == pytest.approx(p, rel=1e-12)
    assert r.to_dict() == {"b01": b01, "b10": b10, "n": b01 + b10 + 3, "p_value": r.p_value}


def test_mcnemar_accepts_bools_and_rejects_non_binary() -> None:
    assert mcnemar([True, False], [False, True]) == mcnemar([1, 0], [0, 1])
    with pytest.raises(ValueError, match="0/1 or bool"):
        mcnemar([0.5, 1], [1, 0])
    with pytest.raises(ValueError, match="equal lengths"):
        mcnemar([1, 0], [1])
    with pytest.raises(ValueError, match="empty"):
        mcnemar([], [])


def test_mcnemar_large_n_log_space() -> None:
    # Normal approximation with continuity correction is excellent at this size.
    b01, b10 = 49_500, 50_500
    a = np.r_[np.zeros(b01), np.ones(b10)].astype(bool)
    r = mcnemar(a, ~a)
    z = (abs(b01 - b10) - 1) / math.sqrt(b01 + b10)
    assert r.p_value == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-2)
    assert mcnemar(*_pairs(600, 650)).p_value == pytest.approx(
        stats._binom_two_sided_p(600, 1250), rel=1e-12)


def test_mcnemar_matches_scipy() -> None:
    sp = pytest.importorskip("scipy.stats")
    for b01, b10 in [(0, 5), (3, 3), (1, 9), (7, 20), (40, 61), (400, 470), (2000, 2100)]:
        ref = sp.binomtest(min(b01, b10), b01 + b10, 0.5).pvalue
        assert mcnemar(*_pairs(b01, b10)).p_value == pytest.approx(ref, rel=1e-9)


# ---- MDE -------------------------------------------------------------------------------------


def test_mde_closed_forms() -> None:
    assert mde(1.0) == pytest.approx(Z)
    assert mde(0.0) == 0.0 and mde(math.inf) == math.inf
    assert mde(1.0, alpha=0.01, power=0.9) == pytest.approx(2.5758293 + 1.2815516)
    assert mde_proportion(8) == pytest.approx(Z * math.sqrt(2 * 0.25 / 8))
    assert round(mde_proportion(8), 2) == 0.70
    assert mde_proportion(100, p=0.9) == pytest.approx(Z * math.sqrt(2 * 0.09 / 100))
    assert mde_proportion(8, paired=True) == pytest.approx(Z / math.sqrt(8))
    assert mde_proportion(100, paired=True, discordant=0.2) == pytest.approx(Z * math.sqrt(.002))
    assert mde_proportion(100, p=0.9, paired=True) == pytest.approx(Z * math.sqrt(0.2 / 100))
    assert mde_mean(2.0, 50) == pytest.approx(Z * 2.0 / math.sqrt(50))
    assert mde_mean(2.0, 50, paired=False) == pytest.approx(Z * math.sqrt(2) * 2 / math.sqrt(50))


def test_mde_from_samples_and_summarize() -> None:
    x = _normal(400, seed=14, sd=2.0)
    m = mde_from_samples(x, seed=0)
    assert m == pytest.approx(Z * x.std(ddof=1) / math.sqrt(400), rel=0.15)
    X = _seeds_by_items(5, 100, seed_sd=1.0)
    assert mde_from_samples(X) > 3 * mde_from_samples(X.ravel())
    assert mde_from_samples([3.0]) == math.inf and mde_from_samples([1.0, 1.0]) == 0.0
    s = summarize(x, seed=2)
    assert list(s) == ["mean", "mde"]
    assert s["mean"] == mean_ci(x, seed=2).to_dict()
    assert s["mde"] == mde_from_samples(x, seed=2)
    assert summarize(X, seed=2)["mean"] == hierarchical_ci(X, seed=2).to_dict()
    json.dumps(summarize(X))


# ---- errors and light import -----------------------------------------------------------------


@pytest.mark.parametrize(("call", "match"), [
    (lambda: mean_ci([]), "empty"),
    (lambda: mean_ci([1.0, math.nan]), "NaN"),
    (lambda: mean_ci([1.0, math.inf]), "NaN or inf"),
    (lambda: mean_ci([[1.0, 2.0]]), "1-D"),
    (lambda: mean_ci(["a", "b"]), "numbers"),
    (lambda: mean_ci([1.0, 2.0], level=1.0), "level"),
    (lambda: mean_ci([1.0, 2.0], level=0), "level"),
    (lambda: mean_ci([1.0, 2.0], n_boot=99), "n_boot"),
    (lambda: mean_ci([1.0, 2.0], n_boot=500.0), "n_boot"),
    (lambda: mean_ci([1.0, 2.0], seed=-1), "seed"),
    (lambda: mean_ci([1.0, 2.0], seed=None), "seed"),
    (lambda: paired_diff_ci([1.0, 2.0], [1.0]), "equal lengths"),
    (lambda: unpaired_diff_ci([1.0], []), "empty"),
    (lambda: hierarchical_ci([]), "empty"),
    (lambda: hierarchical_ci([[1.0], []]), "empty"),
    (lambda: hierarchical_ci([[1.0, math.nan], [2.0, 3.0]]), r"values\[0\] contains NaN"),
    (lambda: hierarchical_ci([1.0, [2.0]]), "mixes"),
    (lambda: hierarchical_ci(np.zeros((2, 2, 2))), "2-D"),
    (lambda: hierarchical_ci([[1.0]], design="flat"), "design"),
    (lambda: mde(-1.0), "se"),
    (lambda: mde(1.0, alpha=0.0), "alpha"),
    (lambda: mde(1.0, power=1.0), "power"),
    (lambda: mde_mean(1.0, 0), "n must be"),
    (lambda: mde_proportion(0), "n must be"),
    (lambda: mde_proportion(10, p=1.5), "p must be"),
    (lambda: mde_proportion(10, discordant=0.2), "paired=True"),
    (lambda: mde_proportion(10, paired=True, discordant=2.0), "discordant"),
])
def test_errors_are_one_line_value_errors(call, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


def test_docstring_examples() -> None:
    assert doctest.testmod(stats, raise_on_error=False).failed == 0


def test_cli_does_not_import_stats() -> None:
    probe = "import sys, icml, icml.cli; print('icml.stats' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_bootstrap_of_any_statistic() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=60)
    y = 2 * x + rng.normal(scale=0.1, size=60)

    def slope(a, b):
        return float(np.polyfit(a, b, 1)[0])

    est = stats.bootstrap(slope, x, y, seed=1)
    assert est.lo < 2 < est.hi and est.hi - est.lo < 0.2 and est.n == 60
    assert est == stats.bootstrap(slope, x, y, seed=1)  # seeded
    # a mean through the generic path agrees with mean_ci's interval within Monte Carlo noise
    generic = stats.bootstrap(lambda a: float(a.mean()), x, seed=2)
    fast = stats.mean_ci(x, seed=2)
    assert abs(generic.lo - fast.lo) < 0.05 and abs(generic.hi - fast.hi) < 0.05
    # groups: whole clusters are drawn, so a between-group effect widens the interval
    groups = np.repeat(np.arange(6), 10)
    shifted = x + np.repeat(rng.normal(scale=2.0, size=6), 10)
    rows = stats.bootstrap(lambda a: float(a.mean()), shifted, seed=3)
    clustered = stats.bootstrap(lambda a: float(a.mean()), shifted, groups=groups, seed=3)
    assert clustered.n == 6 and (clustered.hi - clustered.lo) > 2 * (rows.hi - rows.lo)
    # non-finite resamples (a zero denominator) are left out and counted
    num, den = np.ones(20), np.r_[np.zeros(2), np.ones(18)]
    ratio = stats.bootstrap(lambda a, b: float(a.sum() / b.sum()), num, den, seed=0)
    assert np.isfinite(ratio.lo) and ratio.value == 20 / 18
    with pytest.raises(ValueError, match="different lengths"):
        stats.bootstrap(slope, x, y[:5])
    with pytest.raises(ValueError, match="groups has"):
        stats.bootstrap(slope, x, y, groups=[0, 1])


def test_proportion_ci_is_wilsons_and_stays_open_at_the_floor_and_ceiling() -> None:
    est = stats.proportion_ci([1, 0, 1, 1] * 25)
    assert est.value == 0.75 and est.n == 100 and est.method == "Wilson score interval"
    assert abs(est.lo - 0.65696) < 1e-4 and abs(est.hi - 0.82455) < 1e-4  # textbook values
    floor, ceiling = stats.proportion_ci([0] * 6), stats.proportion_ci([True] * 6)
    assert floor.lo == 0 and 0.38 < floor.hi < 0.40 and ceiling.hi == 1 and ceiling.lo > 0.6
    assert stats.proportion_ci([0] * 6, level=0.5).hi < floor.hi
    for bad in ([], [0.5, 1]):
        with pytest.raises(ValueError, match="correct"):
            stats.proportion_ci(bad)
