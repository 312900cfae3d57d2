"""The pre-registered claims (README, "Pre-registered comparison ..."), checked against their
results files. For each, the verdict of the primary comparison (paired by seed) is recomputed
from the file's per-seed values with :func:`~icml_dr_mmsearch.metrics.paired_verdict` and must
be what the file's comparison table says, what the README states, and what was measured
(``MEASURED``). A rerun whose numbers flip a verdict, or a README that claims otherwise, fails.

* ``results/prereg.json`` (0.3.0): held-out 3-hop collapse rate, ``both`` - ``baseline_nopen``;
  the claim holds if it is detected and negative.
* ``results/heldout.json`` (0.4.0): held-out accuracy on an unseen fact world, ``both`` -
  ``baseline_nopen``; the claim holds if it is detected and positive."""

import json
import re
from pathlib import Path

import pytest
from icml_dr_mmsearch.metrics import paired_verdict

PLUGIN = Path(__file__).resolve().parents[1]
CLAIMS = {
    # file: (label, a, b, per-seed key, comparison column, sign that makes the claim hold,
    #        README verdict marker, README section, measured verdict or None before the run)
    "prereg": ("arms_prereg", "both", "baseline_nopen", "heldout_collapse_rate",
               "detected Δ held-out collapse 3-hop", -1, "primary, pre-registered",
               "### Pre-registered comparison (0.3.0)", "holds"),
    "heldout": ("arms_heldout", "both", "baseline_nopen", "heldout_accuracy",
                "detected Δ held-out acc", +1, "held-out accuracy, pre-registered",
                "### Pre-registered comparison on held-out fact worlds",
                "does not hold"),   # results/heldout.json, 0.4.0
}


def _file(name: str) -> Path:
    return PLUGIN / "results" / f"{name}.json"


def _tables(name: str) -> dict:
    data = json.loads(_file(name).read_text(encoding="utf-8"))
    return {t["name"]: t for t in data["tables"]}


def _values(per_seed: dict, arm: str, key: str) -> list[float]:
    cols = per_seed["columns"]
    rows = sorted((r for r in per_seed["rows"] if r[0] == arm), key=lambda r: r[1])
    return [r[cols.index(key)] for r in rows]


def _verdict(tables: dict, label: str, a: str, b: str, key: str) -> dict:
    per = tables[f"{label}_per_seed"]
    x, y = _values(per, a, key), _values(per, b, key)
    assert len(x) == len(y) >= 5, "the pre-registration asks for >= 5 seeds, paired"
    return paired_verdict(x, y, seed=0)


def _section(readme: str, head: str) -> str:
    sec = readme[readme.index(head):]
    return sec[:sec.index("\n### ", 5)]


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_without_the_file_the_readme_claims_nothing(name):
    """Until a pre-registered run's file is committed, its README section says the results are
    pending and states no verdict."""
    if _file(name).is_file():
        pytest.skip("the results file exists: the verdict tests below apply")
    *_, marker, head, _measured = CLAIMS[name]
    readme = (PLUGIN / "README.md").read_text(encoding="utf-8")
    assert "Results: pending" in _section(readme, head)
    assert f"Verdict ({marker})" not in readme


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_primary_verdict_is_the_files_the_readmes_and_the_measured_one(name):
    if not _file(name).is_file():
        pytest.skip("pre-registered run not committed yet")
    label, a, b, key, column, sign, marker, _head, measured = CLAIMS[name]
    t = _tables(name)
    v = _verdict(t, label, a, b, key)
    comp = t[f"{label}_comparisons"]
    (row,) = [r for r in comp["rows"] if r[0] == a and r[1] == b]
    assert row[comp["columns"].index(column)] == v["label"]
    holds = v["detected"] and v["sign"] == sign
    readme = (PLUGIN / "README.md").read_text(encoding="utf-8")
    m = re.search(r"\*\*Verdict \(" + re.escape(marker) + r"\): the claim (holds|does not hold)",
                  readme)
    assert m, "the README states the primary verdict"
    assert m.group(1) == ("holds" if holds else "does not hold")
    assert measured == m.group(1)


@pytest.mark.parametrize("name", sorted(CLAIMS))
@pytest.mark.parametrize("key,column", [
    ("heldout_accuracy", "detected Δ held-out acc"),
    ("heldout_collapse_rate", "detected Δ held-out collapse 3-hop"),
    ("collapse_rate", "detected Δ train collapse 3-hop")])
def test_every_comparison_in_the_file_follows_the_rule(name, key, column):
    if not _file(name).is_file():
        pytest.skip("pre-registered run not committed yet")
    label = CLAIMS[name][0]
    t = _tables(name)
    comp = t[f"{label}_comparisons"]
    for row in comp["rows"]:
        v = _verdict(t, label, row[0], row[1], key)
        assert row[comp["columns"].index(column)] == v["label"], row[:2]


def test_the_rule_can_fail():
    """Noise around zero is not detected, a shift far beyond the seed spread is, and a shift
    inside the seed spread is not."""
    base = [0.20, 0.35, 0.10, 0.30, 0.25]
    assert not paired_verdict([x + d for x, d in zip(base, (.1, -.1, .05, -.05, 0))],
                              base)["detected"]
    clear = paired_verdict([x - 0.2 + 0.01 * i for i, x in enumerate(base)], base)
    assert clear["detected"] and clear["sign"] == -1
    wide = paired_verdict([x + d for x, d in zip(base, (.3, -.1, .25, -.05, .1))], base)
    assert not wide["detected"]


def test_a_detected_difference_below_the_mde_stays_detected():
    """The MDE is a design quantity: an interval that excludes 0 with a mean above the seed
    spread is a detected difference even when it is smaller than the MDE (its size is
    imprecise, the label says so)."""
    base = [0.20, 0.35, 0.10, 0.30, 0.25]
    v = paired_verdict([x + d for x, d in zip(base, (-.01, .02, .04, .07, .08))], base)
    assert v["diff"].lo > 0 and v["sd"] < v["diff"].value < v["mde"]
    assert v["detected"] and v["below_mde"] and v["sign"] == 1
    assert v["label"] == "yes, below MDE"
    big = paired_verdict([x + d for x, d in zip(base, (.02, .09, .03, .08, .05))], base)
    assert big["label"] == "yes" and not big["below_mde"]
