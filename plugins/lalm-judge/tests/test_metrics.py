import numpy as np
import pytest
from icml_lalm_judge import (
    bootstrap_ci,
    classify_modality,
    sensitivity,
    severity_order_specificity,
    turn_position_bias,
)

SEV = np.repeat(np.arange(1, 6), 4)


def test_specificity_bounds_and_extremes():
    rng = np.random.default_rng(0)
    dec = 1 - SEV / 5 + 0.01 * rng.standard_normal(len(SEV))
    assert severity_order_specificity(dec, SEV) == 1.0
    assert severity_order_specificity(-dec, SEV) == 0.0
    assert severity_order_specificity(dec, SEV, "spearman") == pytest.approx(1.0)
    assert severity_order_specificity(-dec, SEV, "spearman") == pytest.approx(-1.0)
    for _ in range(20):
        s = rng.random(len(SEV))
        for v in ("pairs", "item"):
            assert 0.0 <= severity_order_specificity(s, SEV, v) <= 1.0
        # multiples of 0.1 for 5 levels
        x = severity_order_specificity(s, SEV) * 10
        assert abs(x - round(x)) < 1e-9


def test_specificity_invariant_to_monotone_transform():
    rng = np.random.default_rng(1)
    s = rng.random(len(SEV))
    for f in (lambda x: x ** 3, lambda x: np.exp(5 * x), lambda x: 0.2 + 0.5 * x):
        # pair variant uses means, so only affine maps keep it; rank-based ones keep any
        # strictly increasing map
        assert severity_order_specificity(f(s), SEV, "item") == \
            severity_order_specificity(s, SEV, "item")
    assert severity_order_specificity(0.2 + 0.5 * s, SEV) == severity_order_specificity(s, SEV)
    mu = np.array([0.9, 0.7, 0.72, 0.3, 0.1])  # one inverted pair: 9/10
    assert severity_order_specificity(mu, np.arange(1, 6)) == pytest.approx(0.9)


def test_sensitivity_shift_and_flip():
    rng = np.random.default_rng(2)
    b, v = rng.random(50), rng.random(50)
    s = sensitivity(b, v)
    assert sensitivity(b + 0.3, v + 0.3) == pytest.approx(s)
    assert sensitivity(1 - b, 1 - v) == pytest.approx(-s)
    assert sensitivity(b, b) == 0
    with pytest.raises(ValueError, match="paired"):
        sensitivity(b, v[:3])


def test_position_bias_zero_for_position_blind_and_known_slope():
    pos = np.array([1, 2, 3, 4, 5] * 3)
    length = np.full(15, 5)
    d = np.full(15, 0.4)
    pb = turn_position_bias(d, pos, length)
    assert abs(pb["slope"]) < 1e-12 and abs(pb["spread"]) < 1e-12
    assert pb["stability"] == pytest.approx(1)
    r = (pos - 1) / 4
    pb = turn_position_bias(0.5 - 0.3 * r, pos, length)
    assert pb["slope"] == pytest.approx(-0.3)
    assert pb["spread"] > 0
    with pytest.raises(ValueError, match="positions"):
        turn_position_bias(d, pos + 5, length)


def test_bootstrap_ci_contains_estimate_and_is_seeded():
    rng = np.random.default_rng(3)
    b, v = rng.random(80), rng.random(80) - 0.2
    lo, hi = bootstrap_ci(sensitivity, b, v, n=300, seed=0)
    assert lo <= sensitivity(b, v) <= hi and lo < hi
    assert bootstrap_ci(sensitivity, b, v, n=300, seed=0) == (lo, hi)
    g = np.repeat(np.arange(20), 4)
    glo, ghi = bootstrap_ci(sensitivity, b, v, n=300, seed=0, groups=g)
    assert glo <= sensitivity(b, v) <= ghi


def test_modality_classes():
    assert classify_modality(0.2, 0.1, 0.2) == "text-anchored"
    assert classify_modality(0.1, 0.2, 0.2) == "audio-dominant"
    assert classify_modality(0.1, 0.2, 0.3) == "balanced"
    assert classify_modality(0.1, 0.3, 0.2) == "conservative"
    assert classify_modality(0.2, 0.3, 0.0) == "interfering"
    assert classify_modality(0.2, 0.2, 0.2) == "invariant"
