"""Aggregation (normalisation, permutation invariance, closed-form majority vote) and the token
budget bound."""

import itertools
import random

import pytest
from icml_tipex.aggregate import (
    Candidate,
    first_finish,
    majority_vote_accuracy,
    normalize_answer,
    plurality,
)
from icml_tipex.clock import run
from icml_tipex.runner import ExecutionConfig


@pytest.mark.parametrize("a, b", [(" 1,234 ", "1234"), ("$12", "12.0"), ("Paris", "paris."),
                                  ("a, b ,C", "A,b,c"), ("3.50", "3.5"), ("50%", "50")])
def test_gaia_normalisation_matches(a: str, b: str) -> None:
    assert normalize_answer(a) == normalize_answer(b)


@pytest.mark.parametrize("a, b", [("12", "13"), ("a, b", "b, a"), ("Paris", "Lyon")])
def test_gaia_normalisation_separates(a: str, b: str) -> None:
    assert normalize_answer(a) != normalize_answer(b)


def test_empty_answers_never_vote() -> None:
    assert normalize_answer("  ") is None and normalize_answer(None) is None
    assert plurality([Candidate(0, None, 1.0), Candidate(1, "", 2.0)]) is None


def test_aggregators_are_permutation_invariant() -> None:
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 9)
        cands = [Candidate(i, rng.choice(["7", "7.0", "8", "9", None, "1,000", "1000"]),
                           float(rng.randint(0, 3))) for i in range(n)]
        ref_p, ref_f = plurality(cands), first_finish(cands)
        for _ in range(5):
            rng.shuffle(cands)
            assert normalize_answer(plurality(cands)) == normalize_answer(ref_p)
            assert first_finish(cands) == ref_f


def test_plurality_ties_go_to_the_earliest_finish() -> None:
    c = [Candidate(0, "1", 5.0), Candidate(1, "2", 3.0), Candidate(2, "1", 6.0),
         Candidate(3, "2", 4.0), Candidate(4, "3", 0.0)]
    assert plurality(c) == "2" and first_finish(c) == "3"


@pytest.mark.parametrize("n", [1, 3, 5, 7])
@pytest.mark.parametrize("p", [0.2, 0.5, 0.6, 0.8, 0.95])
def test_plurality_of_binary_replicas_has_the_closed_form_accuracy(n: int, p: float) -> None:
    exact = 0.0
    for outcome in itertools.product((True, False), repeat=n):
        cands = [Candidate(i, "right" if ok else "wrong", float(i)) for i, ok in
                 enumerate(outcome)]
        k = sum(outcome)
        exact += (plurality(cands) == "right") * p ** k * (1 - p) ** (n - k)
    assert exact == pytest.approx(majority_vote_accuracy(p, n), abs=1e-12)


def test_majority_vote_gains_peak_in_the_middle() -> None:
    gain = {p: majority_vote_accuracy(p, 5) - p for p in (0.2, 0.5, 0.6, 0.8, 0.95)}
    assert gain[0.2] == pytest.approx(-0.142, abs=1e-3) and gain[0.5] == pytest.approx(0)
    assert gain[0.8] > gain[0.6] > gain[0.95] > 0 > gain[0.2]
    with pytest.raises(ValueError, match="0 <= p <= 1"):
        majority_vote_accuracy(1.5, 3)


def test_monte_carlo_votes_through_the_runner_match_the_closed_form(suite) -> None:
    """i.i.d. binary replicas from a model that is right with probability p per replica."""
    from icml_tipex.chat import Completion
    from icml_tipex.runner import TipexRunner

    class Coin:
        name, virtual_time = "coin", True

        def count_tokens(self, messages: list) -> int:
            return 10

        async def generate(self, messages, *, temperature, seed, max_tokens) -> Completion:
            ok = random.Random(f"{seed}|{messages[1]['content']}").random() < 0.7
            return Completion("ANSWER: " + (task_answer[0] if ok else "-1"), 10, 2)

    task_answer = [""]
    r = TipexRunner(Coin(), suite.tools())
    tasks = suite.tasks(1, 400)
    hits = 0
    for i, t in enumerate(tasks):
        task_answer[0] = t.answer
        hits += run(r.solve(t, ExecutionConfig(max_inflight=None,
                                               n_replicas=5, planner="chain", seed=i),
                            trace=False)).correct
    expect = majority_vote_accuracy(0.7, 5)  # 0.837
    sd = (expect * (1 - expect) / len(tasks)) ** 0.5
    assert abs(hits / len(tasks) - expect) < 4 * sd


@pytest.mark.parametrize("budget", [300, 1500, 4000, 9000])
@pytest.mark.parametrize("k", [None, 2])
def test_budget_is_never_exceeded_by_more_than_one_call(runner, suite, budget, k) -> None:
    for task in suite.tasks(3, 3):
        cfg = ExecutionConfig(width=4, n_replicas=6, max_inflight=k, token_budget=budget,
                              max_tokens=256)
        r = run(runner.solve(task, cfg))
        calls = r.trace.calls()
        biggest = max(e["prompt_tokens"] for e in calls) + cfg.max_tokens
        assert r.tokens <= budget + biggest
        assert r.tokens == sum(e["prompt_tokens"] + e["completion_tokens"] for e in
                               calls if e["status"] == "ok")
        if budget <= 1500:
            refused = [e for e in calls if e["status"] == "budget"]
            assert refused and all("token budget" in e["detail"] for e in refused)
            assert all(p.status == "error" for p in r.replicas if p.answer is None)


def test_judge_and_first_finish_aggregators(suite) -> None:
    from icml_tipex.runner import TipexRunner
    from icml_tipex.scripted import ScriptedModel, SimParams

    tasks = suite.tasks(3, 60, offset=500)
    skilled = TipexRunner(ScriptedModel(suite, SimParams(judge_skill=1.0)), suite.tools())
    cfg = ExecutionConfig(max_inflight=None, width=4, n_replicas=5)
    plural = skilled.run(tasks, cfg)
    judged = skilled.run(tasks, ExecutionConfig(max_inflight=None,
                                                width=4, n_replicas=5, aggregator="judge"))
    first = skilled.run(tasks, ExecutionConfig(max_inflight=None,
                                               width=4, n_replicas=5, aggregator="first"))
    # a judge that verifies is right whenever any replica is
    for j, p in zip(judged, plural):
        any_right = any(x.answer is not None and x.answer == t.answer
                        for x, t in [(q, task) for q in p.replicas for task in tasks
                                     if task.task_id == p.task_id])
        assert j.correct == any_right
    assert sum(j.correct for j in judged) >= sum(p.correct for p in plural)
    assert all(f.decided_by == "first" for f in first if f.answer is not None)
    assert all(f.latency_s <= p.latency_s + 1e-9 for f, p in zip(first, plural))
    assert sum(f.tokens for f in first) < sum(p.tokens for p in plural)


class _Counting:
    """Counts model calls in flight at once across every task."""

    virtual_time = True
    name = "counting"

    def __init__(self, inner) -> None:
        self.inner, self.active, self.peak = inner, 0, 0

    def count_tokens(self, messages):
        return self.inner.count_tokens(messages)

    async def generate(self, messages, **kw):
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            return await self.inner.generate(messages, **kw)
        finally:
            self.active -= 1


def test_shared_inflight_limit_holds_across_concurrent_tasks(suite) -> None:
    from icml_tipex.runner import ExecutionConfig, TipexRunner
    from icml_tipex.scripted import ScriptedModel

    tasks = suite.tasks(2, 8)
    cfg = ExecutionConfig(n_replicas=3, width=4, max_inflight=4)
    free, capped = _Counting(ScriptedModel(suite)), _Counting(ScriptedModel(suite))
    a = TipexRunner(free, suite.tools()).run(tasks, cfg, concurrency=8)
    b = TipexRunner(capped, suite.tools()).run(tasks, cfg, concurrency=8, shared_inflight=3)
    assert free.peak > 4 and capped.peak == 3  # per-task K alone lets 8 tasks exceed 3
    # plurality over all replicas: the answers and tokens do not depend on timing ...
    assert [(r.answer, r.tokens, r.calls) for r in a] == [(r.answer, r.tokens, r.calls)
                                                          for r in b]
    # ... but waiting for the other tasks' calls makes tasks slower
    assert all(y.latency_s >= x.latency_s - 1e-9 for x, y in zip(a, b))
    assert sum(y.latency_s for y in b) > 1.5 * sum(x.latency_s for x in a)
    with pytest.raises(ValueError, match="shared_inflight"):
        TipexRunner(free, suite.tools()).run(tasks, cfg, shared_inflight=0)
