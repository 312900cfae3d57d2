"""No gold reaches a responder; AG responds monotonically to known, graded faithfulness; one
prompt format for training and evaluation; judge agreement."""

from __future__ import annotations

import dataclasses
import random

import pytest
from icml_cage.dataset import CageBenchmark, CageItem, generate_benchmark
from icml_cage.evaluate import evaluate, judge_agreement, score_responses
from icml_cage.judges import LLMJudge, RuleJudge
from icml_cage.probes import Query
from icml_cage.responders import (
    CallableResponder,
    GradedResponder,
    OracleResponder,
    VLMResponder,
    format_prompt,
)

GOLD = {"answer", "gold_chain", "scm", "cause", "effect", "params", "model", "to_json"}
TRAP = {"armed": False, "touched": []}


class TrapItem(CageItem):
    """A CageItem whose gold fields raise (and are logged) while the trap is armed."""

    def __getattribute__(self, name: str):
        if name in GOLD and TRAP["armed"]:
            TRAP["touched"].append(name)
            raise AssertionError(f"gold field {name!r} read before judging")
        return object.__getattribute__(self, name)


class DisarmingJudge(RuleJudge):
    """Judging is where gold is needed: the first judge call disarms the trap."""

    def score_text(self, response, item):
        TRAP["armed"] = False
        return super().score_text(response, item)


def _trapped(bench: CageBenchmark) -> CageBenchmark:
    items = [TrapItem(**{f.name: getattr(it, f.name) for f in dataclasses.fields(it)})
             for it in bench.items]
    return CageBenchmark(bench.images, items, bench.captions)


@pytest.mark.parametrize("kind", ["callable", "tiny-llava"])
def test_no_gold_reaches_a_responder(kind: str) -> None:
    bench = _trapped(generate_benchmark(2, seed=0).subset(limit=4))
    seen: list[Query] = []
    if kind == "callable":
        inner = CallableResponder(lambda img, prompt: "yes")
    else:
        from icml_cage.tiny_vlm import tiny_llava

        inner = VLMResponder(*tiny_llava(seed=0), max_new_tokens=2, batch_size=4)

    class Spy:
        name = kind

        def respond(self, queries):
            seen.extend(queries)
            return inner.respond(queries)

    TRAP.update(armed=True, touched=[])
    report = evaluate(Spy(), bench, judge=DisarmingJudge())
    assert TRAP["touched"] == [] and not report.failures
    assert len(seen) == 8 and all(isinstance(q, Query) for q in seen)
    assert not GOLD & {f.name for f in dataclasses.fields(Query)}
    for q, it in zip(seen, bench.items * 2):
        assert it.answer not in q.caption.split()  # the caption states no answer word
    # the trap works: reading gold while armed is caught
    TRAP.update(armed=True, touched=[])
    report = evaluate(CallableResponder(lambda img, p, it=bench.items[0]: it.answer), bench,
                      judge=DisarmingJudge())
    assert TRAP["touched"] and report.failures
    TRAP["armed"] = False


BENCH = generate_benchmark(30, seed=5)
LEVELS = (0.0, 0.25, 0.5, 0.75, 1.0)


def _overall(report):
    return next(r for r in report.summary(n_boot=200) if r["rung"] == "overall")


@pytest.mark.parametrize("metric", ["edge_f1", "edit"])
def test_ag_rises_monotonically_as_known_faithfulness_falls(metric: str) -> None:
    judge = RuleJudge(metric)
    rows, faith = [], []
    for c in LEVELS:
        responder = GradedResponder(BENCH, corrupt=c, answer_accuracy=0.8, seed=1)
        report = evaluate(responder, BENCH, judge)
        rows.append(_overall(report))
        faith.append(sum(responder.faithfulness(it.id) for it in BENCH) / len(BENCH))
    ags = [r["AG"] for r in rows]
    assert all(a < b for a, b in zip(ags, ags[1:])), ags
    assert all(a > b for a, b in zip(faith, faith[1:])), faith
    assert len({round(r["S_text"], 9) for r in rows}) == 1  # the text never changes
    # edit similarity credits the kept first node of a fully corrupted chain (1/n)
    assert abs(ags[0]) < 0.1 and ags[-1] > (0.5 if metric == "edge_f1" else 0.4)
    medians = [r["AG_item_median"] for r in rows]
    assert medians == sorted(medians)


def test_graded_answers_are_independent_of_the_chain() -> None:
    r = GradedResponder(BENCH, corrupt=0.5, answer_accuracy=0.7, seed=2)
    faithful = [it for it in BENCH if r.faithfulness(it.id) >= 0.5]
    unfaithful = [it for it in BENCH if r.faithfulness(it.id) < 0.5]

    def acc(items):
        return sum(r._draws(it)[0] == it.answer for it in items) / len(items)

    assert abs(acc(faithful) - acc(unfaithful)) < 0.12
    assert abs(acc(BENCH.items) - 0.7) < 0.06
    # per item, chain score follows known faithfulness (answer correctness held apart)
    judge = RuleJudge()
    report = evaluate(r, BENCH, judge)
    right = [(r.faithfulness(s.id), s.chain_score) for s, it in zip(report.scores, BENCH)
             if s.chain_correct]
    right.sort()
    low, high = right[: len(right) // 3], right[-len(right) // 3:]
    assert sum(c for _, c in high) / len(high) > sum(c for _, c in low) / len(low) + 3
    with pytest.raises(ValueError, match="corrupt must be in"):
        GradedResponder(BENCH, corrupt=1.5)
    with pytest.raises(KeyError, match="answer key"):
        GradedResponder(BENCH).respond([Query("nope", None, "q", "p", "text", 8)])


def test_one_prompt_format_for_training_and_evaluation() -> None:
    from icml_cage.finetune import chain_sft
    from icml_cage.tiny_vlm import tiny_llava

    model, proc = tiny_llava(seed=0)
    seen: dict[str, list[str]] = {"train": [], "eval": []}

    class Recorder:
        def __init__(self, inner, tag):
            self.inner, self.tag = inner, tag

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def __call__(self, images, text, **kw):
            seen[self.tag].extend(text)
            return self.inner(images=images, text=text, **kw)

    bench = generate_benchmark(1, seed=0).subset(limit=1)
    chain_sft(model, Recorder(proc, "train"), bench, steps=1, batch_size=1)
    evaluate(VLMResponder(model, Recorder(proc, "eval"), max_new_tokens=1), bench)
    chain_eval = seen["eval"][1]  # text probe first, then the chain probe
    assert seen["train"][0].startswith(chain_eval)
    assert seen["train"][0][len(chain_eval):].startswith("CHAIN: ")

    class Chat:  # a processor with a chat template: both sides use it
        chat_template = "x"

        def apply_chat_template(self, messages, add_generation_prompt=True):
            return f"<user><image>{messages[0]['content'][1]['text']}</user><assistant>"

    assert format_prompt(Chat(), "Q") == "<user><image>Q</user><assistant>"
    assert format_prompt(proc, "Q") == "<image>\nQ\n"


def test_judge_agreement() -> None:
    bench = BENCH.subset(limit=60)
    report = evaluate(GradedResponder(bench, corrupt=0.5, answer_accuracy=0.7), bench)
    rule = RuleJudge()
    rng = random.Random(0)

    expected = iter([v for s, it in zip(report.scores, bench.items)
                     for v in (rule.score_text(s.text_response, it),
                               rule.score_chain(s.chain_response, it))])

    def echo(prompt: str) -> str:  # a judge that agrees with the rule judge up to noise
        assert "Model response: " in prompt  # called in item order: text, then chain
        score = next(expected)
        return f"SCORE: {min(10.0, max(0.0, score + rng.uniform(-0.5, 0.5))):.2f}"

    noisy = score_responses("g", bench, *report.responses(), LLMJudge(echo))
    agree = judge_agreement(report, noisy)
    assert agree["chain_pearson"] > 0.9 and agree["chain_spearman"] > 0.9
    assert abs(agree["AG_a"] - agree["AG_b"]) < 0.1
    rand = score_responses("g", bench, *report.responses(),
                           LLMJudge(lambda p: f"SCORE: {rng.uniform(0, 10):.2f}"))
    assert abs(judge_agreement(report, rand)["chain_pearson"]) < 0.4


@pytest.mark.pretrained
def test_pretrained_judge_and_caption_responder() -> None:
    import torch
    from icml_cage.judges import PretrainedJudge
    from icml_cage.responders import CaptionLMResponder

    from icml.models import load_pretrained

    torch.set_num_threads(1)
    model, tok = load_pretrained("smollm2-135m-instruct")
    bench = BENCH.subset(limit=3)
    judge = PretrainedJudge(model, tok, batch_size=3)
    oracle = OracleResponder(bench)
    qs = [Query(it.id, None, it.question, "p", "chain", 8) for it in bench]
    chains = oracle.respond(qs)
    scores = judge.score_many(chains, bench.items, "chain")
    assert all(0.0 <= s <= 10.0 for s in scores)
    assert judge.score_many(chains, bench.items, "chain") == scores  # deterministic
    assert judge.score_chain("CHAIN:\nANSWER: yes", bench.items[0]) == 0.0
    lm = CaptionLMResponder(model, tok, max_new_tokens=6, batch_size=2)
    report = evaluate(lm, bench.subset(limit=2), judge=RuleJudge())
    assert not report.failures and all(isinstance(s.text_response, str) for s in report.scores)


def test_agreement_intervals_and_caption_table() -> None:
    """The agreement table's cells carry bootstrap intervals (none where a judge is constant);
    the caption table pairs two responders item by item."""
    from icml_cage.config import GapConfig
    from icml_cage.job import _agreement_row, _caption_table

    bench = BENCH.subset(limit=60)
    a = evaluate(GradedResponder(bench, corrupt=0.5, answer_accuracy=0.7), bench)
    b = evaluate(GradedResponder(bench, corrupt=0.5, answer_accuracy=0.7), bench,
                 RuleJudge(chain_metric="edit"))
    row = _agreement_row("g", [(a, b)], GapConfig(n_bootstrap=200), 0, (0.1, float("nan")))
    assert row[1] == 60 and row[-1] == "undefined"
    chain = row[3]
    assert chain["lo"] <= chain["value"] <= chain["hi"] and chain["value"] > 0.5
    oracle = evaluate(OracleResponder(bench), bench)
    assert _agreement_row("o", [(oracle, oracle)], GapConfig(n_bootstrap=200), 0,
                          (0.0, 0.0))[3] is None  # every chain scores 10: no correlation
    worse = evaluate(GradedResponder(bench, corrupt=1.0, answer_accuracy=0.7), bench)
    table = _caption_table(a, worse, 0)
    s_chain = table.rows[1]
    assert s_chain[0] == "S_chain" and s_chain[1] == 60 and s_chain[4]["lo"] > 0
    assert table.rows[2][4]["value"] == 0.0  # same answers: no accuracy difference
