"""The three rungs: gold answers agree with brute-force enumeration of the exogenous states,
rung-2 and rung-3 answers differ exactly where abduction matters, and answers are balanced."""

from __future__ import annotations

import itertools

import pytest
from icml_cage.dataset import balance, generate_benchmark, rung_disagreement
from icml_cage.scm import ChainSCM, Node

BENCH = generate_benchmark(60, seed=3)


def _change(item) -> dict:
    return {k: {int(i): bool(v) for i, v in pairs} for k, pairs in item.params["change"].items()}


def _apply(u: tuple[bool, ...], change: dict) -> tuple[dict, dict]:
    ex = dict(enumerate(u))
    ex.update(change.get("exogenous", {}))
    return change.get("do", {}), ex


def brute_force(item) -> bool:
    """The gold answer recomputed from the mechanisms alone (ChainSCM.solve), enumerating every
    exogenous state: rung 3 keeps the states that reproduce what the picture shows (visible
    enablers and every node state) and needs them all to agree; rung 2 weights the hidden
    enabler by its prior over the states that match the visible enablers."""
    scm = item.model
    n, h = len(scm.nodes), scm.hidden
    visible = {i: u for i, u in enumerate(scm.exogenous) if i != h}
    evidence = scm.solve()
    states = [u for u in itertools.product([False, True], repeat=n)
              if all(u[i] == v for i, v in visible.items())]
    assert len(states) == 2  # exactly the covered enabler is unknown
    if item.template.startswith(("observe", "abduce")):
        consistent = [u for u in states if scm.solve(exogenous=dict(enumerate(u))) == evidence]
        assert len(consistent) == 1, "the picture must identify the covered part"
        u = consistent[0]
        if item.template == "abduce_hidden":
            return u[h]
        k = scm.index(item.effect)
        return scm.solve(exogenous=dict(enumerate(u)))[k]
    change = _change(item)
    if item.rung == "counterfactual":
        consistent = [u for u in states if scm.solve(exogenous=dict(enumerate(u))) == evidence]
        outcomes = {scm.solve(*_apply(u, change))[-1] for u in consistent}
        assert len(outcomes) == 1, "abduction must determine the counterfactual"
        return outcomes.pop()
    p = sum((scm.prior if u[h] else 1 - scm.prior) * scm.solve(*_apply(u, change))[-1]
            for u in states)
    return p > 0.5


def test_gold_answers_agree_with_brute_force_enumeration() -> None:
    for item in BENCH:
        assert (item.answer == "yes") == brute_force(item), (item.id, item.question)


def test_rung_two_and_three_differ_exactly_where_abduction_matters() -> None:
    by = {(it.image_id, it.template): it for it in BENCH}
    differ = {"node": 0, "enabler": 0, "hidden": 0}
    for (img, template), cf in by.items():
        if not template.startswith("cf_"):
            continue
        kind = template[3:]
        do = by[(img, f"do_{kind}")]
        assert _change(do) == _change(cf) and do.gold_chain == cf.gold_chain
        scm, change = cf.model, _change(cf)
        h = scm.hidden
        abduced = scm.factual()[h]  # X_(h-1) is on in every scene: U_h = X_h
        mode = scm.prior > 0.5
        hidden_matters = len({scm.solve(*_apply(tuple(v if i != h else b for i, v in
                                                      enumerate(scm.exogenous)), change))[-1]
                              for b in (False, True)}) == 2
        must_differ = abduced != mode and hidden_matters
        assert (do.answer != cf.answer) == must_differ, (img, kind)
        differ[kind] += do.answer != cf.answer
    n = len(BENCH.images)
    assert differ["hidden"] == 0  # the change fixes the covered part: nothing to abduce
    assert differ["node"] / n > 0.2 and differ["enabler"] / n > 0.2
    rates = rung_disagreement(BENCH.items)
    assert rates["do_node vs cf_node"] == pytest.approx(differ["node"] / n)
    assert rates["observe_effect vs cf_*"] > 0.2  # copying the picture does not answer rung 3


def test_answers_are_balanced_per_rung_and_template() -> None:
    rows = balance(BENCH.items)
    assert len(rows) == 12  # 9 templates + 3 rung totals
    for row in rows:
        lo, hi = (0.4, 0.6) if row["template"] == "all" else (0.3, 0.7)
        assert lo <= row["yes"] <= hi, row


def test_unidentified_covered_part_is_refused() -> None:
    nodes = tuple(Node(f"x{i}", "on", "off", "u", "not u") for i in range(4))
    scm = ChainSCM(nodes, (True, False, True, True), hidden=2)  # x1 off: x2 says nothing
    with pytest.raises(ValueError, match="not identified"):
        scm.counterfactual(do={1: True})
    assert scm.interventional(do={1: True})[-1] == pytest.approx(0.75)
    seen = ChainSCM(nodes, (True, True, False, True), hidden=2, prior=0.25)
    assert seen.abduce() == (True, True, False, True)
    assert seen.counterfactual(do={1: True})[-1] is False  # the covered part is broken
    assert seen.interventional(exogenous={2: True})[-1] == 1.0
    with pytest.raises(ValueError, match="prior"):
        ChainSCM(nodes, (True,) * 4, hidden=1, prior=0.5)
    with pytest.raises(ValueError, match="hidden must index"):
        ChainSCM(nodes, (True,) * 4, hidden=0)
