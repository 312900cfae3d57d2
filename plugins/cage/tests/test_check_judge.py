"""The yes/no-check LLM judge (``CheckJudge``): the cached, batched check pass equals scoring
each check's full prompt alone; its decomposition of the rubric falls with known chain
corruption (the graded ladder) when the checks are answered right; the real SmolLM2 ladder is
in results/judges.json (and a `pretrained` test below)."""

from __future__ import annotations

import re

import pytest
from icml_cage.dataset import generate_benchmark
from icml_cage.judges import CheckJudge
from icml_cage.probes import Query
from icml_cage.responders import FluentUnfaithfulResponder, GradedResponder

BENCH = generate_benchmark(4, seed=0)
LEVELS = (0.0, 0.25, 0.5, 0.75, 1.0)


def _responses(responder, items, probe):
    return responder.respond([Query(it.id, None, it.question, "", probe, 128) for it in items])


def test_cached_batched_checks_equal_one_prompt_each() -> None:
    import torch

    from icml.models import byte_tokenizer, tiny_causal_lm

    model, tok = tiny_causal_lm(seed=0, max_positions=2048), byte_tokenizer()
    judge = CheckJudge(model, tok, batch_size=3)  # batches of 3 with uneven lengths
    items = BENCH.items[:5]
    resp = _responses(GradedResponder(BENCH, corrupt=0.5, answer_accuracy=0.8), items, "chain")
    lead, yes, no = judge._answer_ids()
    for kind in ("answer", "part"):
        groups = [g for r, it in zip(resp, items) for g in judge.groups(r, it, "chain")
                  if g[0] == kind]
        got = judge.yes_probs([g[1] for g in groups], [g[2] for g in groups], kind)
        for (_, ctx, qs), ps in zip(groups, got):
            assert len(ps) == len(qs)
            for q, p in zip(qs, ps):
                ids = judge._ids(judge.prefix(kind)) + judge._ids(ctx) + judge._ids(q) + lead
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor([ids])).logits[0, -1, [yes, no]]
                assert p == pytest.approx(torch.softmax(logits, -1)[0].item(), abs=1e-5)
    scores = judge.score_many(resp, items, "chain")
    assert all(0.0 <= s <= 10.0 for s in scores)


class ReadingJudge(CheckJudge):
    """The decomposition with checks answered by reading the text (P(yes) 0.9 / 0.1), so the
    test isolates how checks become scores from how well a model answers them."""

    def __init__(self) -> None:
        super().__init__(model=None, tokenizer=None)

    def yes_probs(self, contexts, checks, kind):
        out = []
        for ctx, qs in zip(contexts, checks):
            row = []
            for q in qs:
                if kind == "answer":
                    m = re.search(r"answer\s*:\s*(yes|no)|^Text: \"(yes|no)", ctx, re.I)
                    hit = bool(m) and "yes" in (m.group(1) or m.group(2)).lower()
                elif kind == "part":
                    node = re.search(r"Is (?:the )?(.+) one of the parts", q).group(1)
                    hit = node in ctx.split("Parts: ")[1]
                else:
                    node = re.search(r"mention (?:the )?(.+)\?", q).group(1)
                    hit = node in ctx
                row.append(0.9 if hit else 0.1)
            out.append(row)
        return out


def test_chain_score_falls_with_corruption_and_blank_chains_score_zero() -> None:
    judge, items = ReadingJudge(), BENCH.items
    means = []
    for c in LEVELS:
        g = GradedResponder(BENCH, corrupt=c, answer_accuracy=0.8, seed=0)
        chain = judge.score_many(_responses(g, items, "chain"), items, "chain")
        means.append(sum(chain) / len(chain))
        text = judge.score_many(_responses(g, items, "text"), items, "text")
        assert sum(text) / len(text) > 8.0  # the oracle's prose names the chain
    assert all(a > b + 0.5 for a, b in zip(means, means[1:])), means
    unf = FluentUnfaithfulResponder(BENCH, seed=0)
    resp = _responses(unf, items, "chain")
    scores = judge.score_many(resp, items, "chain")
    assert all(s == 0.0 for s, r in zip(scores, resp) if r.startswith("CHAIN:\n"))


def test_answer_check_reads_the_gold_direction() -> None:
    judge, item = ReadingJudge(), BENCH.items[0]
    gold, other = item.answer, "no" if item.answer == "yes" else "yes"
    chain = " -> ".join(item.gold_chain)
    right = judge.score_chain(f"CHAIN: {chain}\nANSWER: {gold}", item)
    wrong = judge.score_chain(f"CHAIN: {chain}\nANSWER: {other}", item)
    assert right - wrong == pytest.approx(10 * 0.2 * 0.8)  # (1 - w) of 10, P 0.9 vs 0.1


@pytest.mark.pretrained
def test_smollm2_check_judge_falls_with_corruption() -> None:
    import torch

    from icml.models import load_pretrained

    model, tok = load_pretrained("smollm2-135m-instruct", dtype=torch.bfloat16)
    judge, items = CheckJudge(model, tok), BENCH.items[:18]
    means = []
    for c in (0.0, 1.0):
        g = GradedResponder(BENCH, corrupt=c, answer_accuracy=0.8, seed=0)
        s = judge.score_many(_responses(g, items, "chain"), items, "chain")
        means.append(sum(s) / len(s))
    assert means[0] > means[1] + 0.2, means
