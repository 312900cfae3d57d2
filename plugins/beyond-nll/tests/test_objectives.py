"""The family's names, closed forms and limits (no model needed)."""

from __future__ import annotations

import math

import pytest
from icml_beyond_nll import ProbObjective, parse_objectives

KEYS = ["original", "logp", "p", "GeneralFamily-10", "GeneralFamily-0.5", "OnlyTopP-0.1",
        "OnlyBottomP-0.5", "OnlyTopLogP-0.1", "OnlyBottomLogP-0.5"]


@pytest.mark.parametrize("key", KEYS)
def test_official_names_round_trip(key):
    assert ProbObjective.parse(key).name == key


def test_typed_constructors_equal_parsed_names():
    assert ProbObjective.power(10) == ProbObjective.parse("GeneralFamily-10")
    assert ProbObjective.threshold("p", "top", 0.1) == ProbObjective.parse("OnlyTopP-0.1")
    assert ProbObjective.threshold("logp", "bottom", 0.5) == \
        ProbObjective.parse("OnlyBottomLogP-0.5")
    assert ProbObjective.neg_p() == ProbObjective.parse("-p") == ProbObjective.parse("dft")
    assert ProbObjective.nll() == ProbObjective.parse("nll")


def test_prior_leaning_split_matches_the_paper():
    lean = {k: ProbObjective.parse(k).prior_leaning for k in KEYS}
    assert lean == {"original": False, "logp": False, "p": True, "GeneralFamily-10": True,
                    "GeneralFamily-0.5": True, "OnlyTopP-0.1": True, "OnlyBottomP-0.5": False,
                    "OnlyTopLogP-0.1": True, "OnlyBottomLogP-0.5": False}


@pytest.mark.parametrize("bad,match", [
    ("focal", "valid keys are"), ("GeneralFamily-0", "alpha must be > 0"),
    ("GeneralFamily--2", "not a number|alpha must be > 0"), ("GeneralFamily-x", "not a number"),
    ("OnlyTopP-1.5", r"outside \[0, 1\]"), ("OnlyBottomLogP--0.1", "not a number|outside"),
    ("GeneralFamily-inf", "finite"),
])
def test_bad_names_raise_with_the_fix(bad, match):
    with pytest.raises(ValueError, match=match):
        ProbObjective.parse(bad)


def test_bad_typed_parameters():
    with pytest.raises(ValueError, match="alpha must be > 0"):
        ProbObjective.power(-1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ProbObjective.threshold("p", "top", -0.2)
    with pytest.raises(ValueError, match="side"):
        ProbObjective.threshold("p", "middle", 0.2)
    with pytest.raises(ValueError, match="twice"):
        parse_objectives("p,p")
    with pytest.raises(ValueError, match="at least one"):
        parse_objectives(" , ")


@pytest.mark.parametrize("key", KEYS)
def test_value_is_monotone_non_increasing_and_weight_is_minus_p_fprime(key):
    obj = ProbObjective.parse(key)
    grid = [i / 200 for i in range(1, 201)]
    vals = [obj.value(p) for p in grid]
    h = 1e-6
    for p in grid[2:-2]:
        if obj.kind == "threshold" and abs(p - obj.q) < 1e-3:
            continue
        # W(p) = -f'(p) p against a central difference
        fd = -(obj.value(p + h) - obj.value(p - h)) / (2 * h) * p
        assert obj.grad_weight(p) == pytest.approx(fd, rel=1e-4, abs=1e-7)
    if obj.kind != "threshold":  # thresholds jump (to 0) at q by design
        assert all(a >= b - 1e-12 for a, b in zip(vals, vals[1:]))


def test_closed_forms_and_limits():
    p = 0.3
    assert ProbObjective.parse("logp").value(p) == pytest.approx(-math.log(p))
    assert ProbObjective.parse("p").value(p) == pytest.approx(1 - p)
    assert ProbObjective.power(10).value(p) == pytest.approx((1 - p ** 10) / 10)
    assert ProbObjective.power(1e-6).value(p) == pytest.approx(-math.log(p), rel=1e-5)
    assert ProbObjective.power(1).value(p) == pytest.approx(1 - p)
    assert ProbObjective.parse("OnlyTopP-0.5").value(p) == 0.0
    assert ProbObjective.parse("OnlyBottomP-0.5").value(p) == pytest.approx(1 - p)
    assert ProbObjective.parse("OnlyTopLogP-0.3").value(p) == pytest.approx(-math.log(p))  # >=
    assert ProbObjective.parse("OnlyBottomLogP-0.3").value(p) == pytest.approx(-math.log(p))
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        ProbObjective.nll().value(0.0)
