"""Scheduling invariants (notes section 5): sequential sums, critical path, Graham's bound,
schedule validity, replica additivity and quorum, and the bare agent reproduced."""

import asyncio
import random
from collections.abc import Mapping

import pytest
from icml_tipex.bare import bare_agent
from icml_tipex.clock import run
from icml_tipex.plan import Plan, Subtask
from icml_tipex.runner import ExecutionConfig, TipexRunner
from icml_tipex.scheduler import run_dag

# every test of this module runs on both virtual-clock engines (conftest.py)
pytestmark = pytest.mark.usefixtures("both_engines")


def _random_plan(rng: random.Random, n: int) -> tuple[Plan, dict[str, float]]:
    ids = [f"v{i}" for i in range(n)]
    order = ids[:]
    rng.shuffle(order)  # the plan lists subtasks out of topological order
    deps = {v: tuple(u for u in ids[:i] if rng.random() < 0.25) for i, v in enumerate(ids)}
    plan = Plan(tuple(Subtask(v, v, deps[v]) for v in order))
    return plan, {v: rng.choice((0.5, 1.0, 1.5, 2.0, 3.0)) for v in ids}


def _execute(plan: Plan, cost: dict[str, float], w: int) -> tuple[float, dict, list[str]]:
    spans: dict[str, tuple[float, float]] = {}
    started: list[str] = []
    inflight = [0, 0]

    async def job(sub: Subtask, parents: Mapping[str, str]) -> str:
        loop = asyncio.get_running_loop()
        assert set(parents) == set(sub.deps)
        started.append(sub.id)
        inflight[0] += 1
        inflight[1] = max(inflight[1], inflight[0])
        t = loop.time()
        await asyncio.sleep(cost[sub.id])
        spans[sub.id] = (t, loop.time())
        inflight[0] -= 1
        return sub.id

    async def main() -> float:
        t0 = asyncio.get_running_loop().time()
        out = await run_dag(plan, job, w)
        assert out == {v: v for v in plan.ids}
        return asyncio.get_running_loop().time() - t0

    makespan = run(main(), "virtual")
    assert inflight[1] <= w
    return makespan, spans, started


@pytest.mark.parametrize("seed", range(12))
def test_list_schedule_invariants_on_random_dags(seed: int) -> None:
    rng = random.Random(seed)
    plan, cost = _random_plan(rng, rng.randint(2, 12))
    total, cp, width = sum(cost.values()), plan.critical_path(cost), plan.width()
    by_id = {s.id: s for s in plan.subtasks}
    for w in (1, 2, 3, width, width + 2):
        m, spans, started = _execute(plan, cost, w)
        assert sorted(started) == sorted(plan.ids)  # every subtask exactly once
        for v, s in by_id.items():
            for u in s.deps:
                assert spans[v][0] >= spans[u][1] - 1e-9  # after its parents
        assert cp - 1e-9 <= m <= total / w + (1 - 1 / w) * cp + 1e-9  # Graham
        if w == 1:
            assert m == pytest.approx(total)
        if w >= width:
            assert m == pytest.approx(cp)


def _sum_durations(events: list[dict]) -> float:
    return sum(e["end"] - e["start"] for e in events if e["kind"] in ("model", "tool"))


@pytest.mark.parametrize("level", [1, 2, 3])
def test_one_replica_width_one_is_the_sum_of_calls(runner: TipexRunner, suite, level: int) -> None:
    for task in suite.tasks(level, 5):
        r = run(runner.solve(task, ExecutionConfig(max_inflight=None, width=1, n_replicas=1)))
        calls = r.trace.calls()
        assert r.latency_s == pytest.approx(_sum_durations(r.trace.events))
        assert r.tokens == sum(e["prompt_tokens"] + e["completion_tokens"] for e in calls)
        assert all(e["queued"] == e["start"] for e in calls)


@pytest.mark.parametrize("level", [2, 3])
def test_width_at_least_dag_width_gives_the_critical_path(runner: TipexRunner, suite,
                                                          level: int) -> None:
    for task in suite.tasks(level, 5):
        for g in (2, 4, 16):
            cfg = ExecutionConfig(max_inflight=None, width=64, granularity=g)
            r = run(runner.solve(task, cfg))
            ev = r.trace.events
            plan = next(e for e in ev if e["kind"] == "plan")
            subs = {e["subtask"]: e["end"] - e["start"] for e in ev if e["kind"] == "subtask"}
            p = Plan(tuple(Subtask(d["id"], d["goal"], tuple(d["deps"])) for d in
                           plan["subtasks"]))
            planner = next(e for e in r.trace.calls() if e["role"] == "planner")
            synth = next(e for e in r.trace.calls() if e["role"] == "synthesizer")
            expect = (planner["end"] - planner["start"] + p.critical_path(subs)
                      + synth["end"] - synth["start"])
            assert r.latency_s == pytest.approx(expect)
            # Graham's bound for a width below the DAG's width
            w = max(1, p.width() - 1)
            rw = run(runner.solve(task, ExecutionConfig(max_inflight=None, width=w, granularity=g)))
            span = rw.latency_s - (planner["end"] - planner["start"]) - (
                synth["end"] - synth["start"])
            cp, tot = p.critical_path(subs), sum(subs.values())
            assert cp - 1e-9 <= span <= tot / w + (1 - 1 / w) * cp + 1e-9


def test_replicas_are_additive_independent_and_latency_is_their_max(runner, suite) -> None:
    for task in suite.tasks(2, 4):
        r5 = run(runner.solve(task, ExecutionConfig(max_inflight=None, width=2, n_replicas=5)))
        r3 = run(runner.solve(task, ExecutionConfig(max_inflight=None, width=2, n_replicas=3)))
        assert r5.tokens == sum(p.tokens for p in r5.replicas)
        assert [p.tokens for p in r5.replicas[:3]] == [p.tokens for p in r3.replicas]
        assert [p.answer for p in r5.replicas[:3]] == [p.answer for p in r3.replicas]
        assert r5.latency_s == pytest.approx(max(p.finish for p in r5.replicas))


def test_quorum_stops_early_cancels_the_rest_and_spends_no_more(runner, suite) -> None:
    stopped = 0
    for task in suite.tasks(2, 8):
        full = run(runner.solve(task, ExecutionConfig(max_inflight=None, width=4, n_replicas=7)))
        q = run(runner.solve(task, ExecutionConfig(max_inflight=None,
                                                   width=4, n_replicas=7, quorum=3)))
        assert q.tokens <= full.tokens and q.latency_s <= full.latency_s + 1e-9
        if q.decided_by == "quorum":
            ok = sorted(p.finish for p in q.replicas if p.status == "ok")
            assert q.latency_s == pytest.approx(ok[-1])  # decided when agreement was reached
            cancelled = [p for p in q.replicas if p.status == "cancelled"]
            stopped += len(cancelled)
            marked = {e["replica"] for e in q.trace.events
                      if e["kind"] == "path" and e["status"] == "cancelled"}
            assert marked == {p.replica for p in cancelled}
    assert stopped > 0


def test_inflight_limit_is_never_exceeded(runner, suite) -> None:
    for k in (1, 2, 3):
        for task in suite.tasks(3, 2):
            r = run(runner.solve(task, ExecutionConfig(width=8, n_replicas=4, max_inflight=k,
                                                       granularity=8)))
            pts = sorted([(e["start"], 1) for e in r.trace.calls()]
                         + [(e["end"], -1) for e in r.trace.calls()])
            depth = peak = 0
            for _, d in pts:
                depth += d
                peak = max(peak, depth)
            assert peak <= k


def test_same_seed_same_trace_and_seeds_matter(runner, suite) -> None:
    task = suite.tasks(3, 1)[0]
    cfg = ExecutionConfig(width=3, n_replicas=4, max_inflight=3, quorum=2)
    a, b = (run(runner.solve(task, cfg)) for _ in range(2))
    assert a.trace.events == b.trace.events
    others = [run(runner.solve(task, ExecutionConfig(width=3, n_replicas=4, max_inflight=3,
                                                     quorum=2, seed=s))) for s in (1, 2, 3)]
    assert any(o.trace.events != a.trace.events for o in others)


def test_replicas_without_diversity_are_identical(runner, suite) -> None:
    for task in suite.tasks(3, 3):
        r = run(runner.solve(task, ExecutionConfig(max_inflight=None,
                                                   n_replicas=4, temperature=0.0)))
        assert len({p.answer for p in r.replicas}) == 1
        assert len({p.tokens for p in r.replicas}) == 1


@pytest.mark.parametrize("level", [1, 2, 3])
def test_one_replica_width_one_chain_reproduces_the_bare_agent(runner, suite, level) -> None:
    tools = suite.tools()
    for task in suite.tasks(level, 10):
        cfg = ExecutionConfig(max_inflight=None, n_replicas=1, width=1, planner="chain")
        r = run(runner.solve(task, cfg))
        b = run(bare_agent(runner.model, tools, task, temperature=cfg.temperature,
                           seed=cfg.replica_seed(0), max_tokens=cfg.max_tokens))
        assert (r.answer, r.tokens, r.calls) == (b.answer, b.tokens, b.calls)
        assert r.latency_s == pytest.approx(b.latency_s)


def test_without_errors_every_config_is_exact(suite) -> None:
    from icml_tipex.scripted import ScriptedModel, SimParams

    perfect = ScriptedModel(suite, SimParams(eps0=0, beta=0, plan_err=0, synth_err=0))
    r = TipexRunner(perfect, suite.tools())
    for level in (1, 2, 3):
        tasks = suite.tasks(level, 6)
        for cfg in (ExecutionConfig(max_inflight=None, planner="chain"),
                    ExecutionConfig(max_inflight=None, width=2, granularity=1),
                    ExecutionConfig(max_inflight=None, width=3, granularity=3, n_replicas=2),
                    ExecutionConfig(max_inflight=None,
                                    width=16, granularity=32, aggregator="judge")):
            assert all(x.correct for x in r.run(tasks, cfg)), (level, cfg)
