"""Chain parsing and scoring, the rule judge, the LLM-judge adapter, and AG's limits."""

from __future__ import annotations

import math

import pytest
from icml_cage.dataset import generate_benchmark
from icml_cage.judges import JudgeError, LLMJudge, RuleJudge, edge_f1, edit_similarity
from icml_cage.metrics import abstraction_gap, bootstrap_ci, per_item_gap
from icml_cage.probes import chain_text_probe, parse_answer, parse_chain

ITEM = next(it for it in generate_benchmark(3, seed=0) if len(it.gold_chain) == 3)
GOLD = ITEM.gold_chain


@pytest.mark.parametrize("arrow", [" -> ", "->", " → ", " => ", " --> ", " causes ",
                                   " leads to ", " ⟶ "])
def test_arrow_variants_are_equivalent(arrow: str) -> None:
    text = f"CHAIN: {arrow.join(GOLD)}\nANSWER: {ITEM.answer}"
    assert parse_chain(text) == [g.lower() for g in GOLD]
    assert RuleJudge().score_chain(text, ITEM) == pytest.approx(10.0)


def test_gold_chain_full_marks_empty_zero_reversed_low() -> None:
    judge = RuleJudge()
    assert judge.score_chain(f"CHAIN: {' -> '.join(GOLD)}\nANSWER: {ITEM.answer}", ITEM) == 10
    assert judge.score_chain(f"CHAIN:\nANSWER: {ITEM.answer}", ITEM) == 0
    assert judge.score_chain("", ITEM) == 0
    assert judge.score_chain("I cannot tell. ¯\\_(ツ)_/¯", ITEM) == 0
    assert edge_f1(GOLD[::-1], GOLD) == 0.0
    assert edge_f1(GOLD[:2], GOLD) == pytest.approx(2 * 1 * 0.5 / 1.5)
    assert edit_similarity(GOLD, GOLD) == 1.0 and edit_similarity([], GOLD) == 0.0
    assert RuleJudge("edit").score_chain(f"CHAIN: {' -> '.join(GOLD)}", ITEM) == \
        pytest.approx(8.0)  # chain perfect, answer missing: 10 * 0.8


def test_text_rubric_parts() -> None:
    judge = RuleJudge()
    good = f"{ITEM.answer.capitalize()}. The {GOLD[0]} acts on the {GOLD[1]} and the {GOLD[2]}."
    assert judge.score_text(good, ITEM) == pytest.approx(10.0)
    wrong = good.replace(ITEM.answer.capitalize(), "No" if ITEM.answer == "yes" else "Yes", 1)
    assert judge.score_text(wrong, ITEM) == pytest.approx(6.0)
    assert judge.score_text("", ITEM) == 0.0
    assert judge.score_text(None, ITEM) == 0.0  # type: ignore[arg-type]


def test_parsers_never_crash_on_junk() -> None:
    for junk in ["", "\x00\x01", "ANSWER:", "CHAIN: ->", "->->", None, 42]:
        assert isinstance(parse_chain(junk), list)  # type: ignore[arg-type]
        assert parse_answer(junk) in (None, "yes", "no")  # type: ignore[arg-type]
    assert parse_answer("Well, no. Actually yes.\nANSWER: yes") == "yes"


def test_llm_judge_adapter_and_failures() -> None:
    prompts = []

    def judge_model(prompt: str) -> str:
        prompts.append(prompt)
        return "SCORE: 7.5"

    judge = LLMJudge(judge_model)
    assert judge.score_text("Yes.", ITEM) == 7.5
    assert ITEM.question in prompts[0] and " -> ".join(GOLD) in prompts[0]
    assert judge.score_chain("no chain here", ITEM) == 0.0 and len(prompts) == 1
    with pytest.raises(JudgeError, match="no SCORE"):
        LLMJudge(lambda p: "great answer").score_text("Yes.", ITEM)
    with pytest.raises(JudgeError, match="judge failed"):
        LLMJudge(lambda p: 1 / 0).score_text("Yes.", ITEM)  # type: ignore[arg-type,return-value]


def test_ag_limits_and_norms() -> None:
    for norm in ("relative", "max", "range"):
        assert abstraction_gap(6.0, 6.0, norm) == 0.0
        assert math.isnan(abstraction_gap(0.0, 0.0, norm))  # at the floor: undefined
        assert abstraction_gap(0.0, 0.0, norm, floor=0.0) == 0.0  # floor off: equal gives 0
    assert abstraction_gap(7.0, 0.0) == 1.0
    assert abstraction_gap(6.0, 2.5) == pytest.approx(3.5 / 6)
    assert abstraction_gap(6.0, 2.5, "range") == pytest.approx(0.35)
    assert abstraction_gap(2.0, 8.0, "max") == pytest.approx(-0.75)
    assert math.isnan(abstraction_gap(0.0, 3.0))
    with pytest.raises(ValueError, match="norm 'ratio'"):
        abstraction_gap(1, 1, "ratio")
    assert per_item_gap([10, 0, 5], [0, 0, 5]) == pytest.approx(1 / 3)
    # a text score of 0 under a chain score > 0 is undefined, not a -5e6 outlier
    assert per_item_gap([10, 0, 5], [0, 5, 5]) == pytest.approx(1 / 2)
    assert math.isnan(per_item_gap([0.0], [3.0]))


def test_ag_is_flagged_undefined_at_the_floor_not_zero() -> None:
    """A blank responder (both scores ~0) and the oracle (both 10) never share a number: the
    blank one's AG is NaN with a reason, its interval NaN, its items undefined too."""
    from icml_cage.config import GapConfig
    from icml_cage.evaluate import evaluate
    from icml_cage.job import _row
    from icml_cage.metrics import gap_flag, item_gap
    from icml_cage.responders import CallableResponder, OracleResponder

    bench = generate_benchmark(2, seed=0)
    blank = evaluate(CallableResponder(lambda img, prompt: "", name="blank"), bench)
    oracle = evaluate(OracleResponder(bench), bench)
    b = blank.summary(n_boot=200)[-1]
    o = oracle.summary(n_boot=200)[-1]
    assert b["S_text"] == b["S_chain"] == 0.0
    assert math.isnan(b["AG"]) and math.isnan(b["AG_lo"]) and math.isnan(b["AG_hi"])
    assert "below the floor" in b["AG_flag"] and b["n_item_AG"] == 0
    assert o["AG"] == 0.0 and o["AG_flag"] == "" and o["AG_lo"] == o["AG_hi"] == 0.0
    cells = _row("blank", "rule", b, GapConfig().floor)
    assert cells[6].startswith("undefined") and cells[7] == "-" and cells[9] is None
    assert _row("oracle", "rule", o, GapConfig().floor)[6] == 0.0
    # just above the floor it is a number again; 0 turns the flag off
    assert gap_flag(1.2, 0.0) == "" and abstraction_gap(1.2, 0.0) == 1.0
    assert gap_flag(0.5, 0.2) and gap_flag(0.5, 0.2, floor=0.0) == ""
    assert math.isnan(item_gap(0.0, 0.0)) and item_gap(10.0, 10.0) == 0.0
    with pytest.raises(ValueError, match="gap.floor"):
        GapConfig(floor=11.0)


def test_bootstrap_interval_brackets_the_point_estimate() -> None:
    import random

    rng = random.Random(0)
    t = [rng.uniform(6, 8) for _ in range(200)]
    c = [rng.uniform(0, 2.5) for _ in range(200)]
    ag = abstraction_gap(sum(t) / 200, sum(c) / 200)
    lo, hi = bootstrap_ci(t, c, n_boot=500, seed=1)
    assert lo < ag < hi and hi - lo < 0.1
    assert bootstrap_ci(t, c, n_boot=500, seed=1) == (lo, hi)


def test_probe_template_needs_question() -> None:
    with pytest.raises(ValueError, match="no {question} placeholder"):
        chain_text_probe("Write a chain.").prompt("q")
    with pytest.raises(ValueError, match="placeholder other than"):
        chain_text_probe("Q: {question} as {format}").prompt("q")


def test_sft_export_checks_its_prompt_template(tmp_path) -> None:
    from icml_cage.sft_export import export_sft

    bench = generate_benchmark(1, seed=0)
    with pytest.raises(ValueError, match="no {question} placeholder"):
        export_sft(bench, tmp_path / "a", "Write a chain.")  # would train on question-less prompts
    with pytest.raises(ValueError, match="placeholder other than"):
        export_sft(bench, tmp_path / "b", "Q: {question} {x}")


def test_rubric_edge_cases_wording_duplicates_unknown_nodes() -> None:
    judge, scm = RuleJudge(), ITEM.model
    nodes = [scm.nodes[scm.index(g)] for g in GOLD]
    # nodes written with their states ("domino 1 falls") name the same scene nodes
    worded = " -> ".join(f"The {n.name} {n.phrase(ITEM.answer == 'yes' or n is not nodes[-1])}"
                         for n in nodes)
    assert judge.score_chain(f"CHAIN: {worded}\nANSWER: {ITEM.answer}", ITEM) == \
        pytest.approx(10.0)
    upper = " -> ".join(g.upper() for g in GOLD)
    assert judge.score_chain(f"CHAIN: {upper}\nANSWER: {ITEM.answer.upper()}", ITEM) == \
        pytest.approx(10.0)
    # a repeated chain is not the gold chain: edges count with multiplicity (P 2/5, R 1)
    assert edge_f1(GOLD + GOLD, GOLD) == pytest.approx(2 * 0.4 / 1.4)
    # an unknown node in the middle breaks the edges it sits on (P 1/3, R 1/2)
    extra = [GOLD[0], "battery", GOLD[1], GOLD[2]]
    assert judge.chain_similarity(extra, ITEM) == pytest.approx(0.4)
    # a node naming two scene nodes is unknown, not silently mapped to one of them
    assert judge.chain_similarity([f"{GOLD[0]} and {GOLD[1]}", GOLD[2]], ITEM) == 0.0


@pytest.mark.parametrize("text,answer", [("Yes, the lamp is lit.", "yes"), ("NO", "no"),
                                         ("no.", "no"), ("ANSWER: No.", "no"),
                                         ("CHAIN: a -> b\nANSWER: YES,", "yes"),
                                         ("Nothing happens; yes it rings", "yes"),
                                         ("Noted.", None)])
def test_answer_variants(text: str, answer: str | None) -> None:
    assert parse_answer(text) == answer


def test_chain_on_the_line_after_the_chain_label() -> None:
    text = f"CHAIN:\n{' -> '.join(GOLD)}\nANSWER: {ITEM.answer}"
    assert RuleJudge().score_chain(text, ITEM) == pytest.approx(10.0)
    assert parse_chain(f"CHAIN:\nANSWER: {ITEM.answer}") == []  # still blank
    assert parse_chain("CHAIN:\n\nno idea") == []


def test_answer_chain_consistency_uses_the_stated_effect_state() -> None:
    from icml_cage.judges import answer_chain_consistency, canonical_nodes, stated_effect_state

    item = next(it for it in generate_benchmark(6, seed=0)
                if it.family == "lamp" and it.effect == "lamp")
    on, off = "is lit", "is dark"
    chain = " -> ".join(item.gold_chain[:-1])
    yes_on = f"CHAIN: {chain} -> lamp ({on})\nANSWER: yes"
    yes_off = f"CHAIN: {chain} -> the lamp {off}\nANSWER: yes"
    assert stated_effect_state(["switch", f"lamp ({on})"], item) is True
    assert answer_chain_consistency(yes_on, item) is True
    assert answer_chain_consistency(yes_off, item) is False
    assert answer_chain_consistency(f"CHAIN: {chain} -> lamp\nANSWER: yes", item) is None
    assert answer_chain_consistency(f"CHAIN: {chain} -> lamp ({on})", item) is None
    judge = RuleJudge()
    bare = judge.score_chain(f"CHAIN: {chain} -> lamp\nANSWER: yes", item)
    assert judge.score_chain(yes_off, item) == pytest.approx(0.5 * bare)
    assert judge.score_chain(yes_on, item) == pytest.approx(bare)
    assert RuleJudge(inconsistency_penalty=0.0).score_chain(yes_off, item) == pytest.approx(bare)
    with pytest.raises(ValueError, match="inconsistency_penalty"):
        RuleJudge(inconsistency_penalty=2.0)
    names = ["ball", "ramp", "bell"]
    assert canonical_nodes(["the ramp carries the rolling ball", "ramp (carries no ball)"],
                           names) == ["ramp", "ramp"]


def test_oracle_chains_are_consistent_and_bare_chains_uncheckable() -> None:
    from icml_cage.evaluate import evaluate
    from icml_cage.responders import FluentUnfaithfulResponder, OracleResponder

    bench = generate_benchmark(6, seed=2)
    oracle = next(r for r in evaluate(OracleResponder(bench), bench).summary(
        n_boot=100)
                  if r["rung"] == "overall")
    assert oracle["consistency"] == 1.0 and oracle["n_consistency"] == len(bench)
    assert oracle["S_chain"] == pytest.approx(10.0)
    fluent = next(r for r in evaluate(FluentUnfaithfulResponder(bench), bench).summary(
        n_boot=100)
                  if r["rung"] == "overall")
    assert fluent["n_consistency"] == 0 and math.isnan(fluent["consistency"])


def test_bootstrap_zero_means_no_interval_and_small_counts_are_refused() -> None:
    assert all(math.isnan(x) for x in bootstrap_ci([6.0, 7.0], [1.0, 2.0], n_boot=0))
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap_ci([6.0, 7.0], [1.0, 2.0], n_boot=50)
