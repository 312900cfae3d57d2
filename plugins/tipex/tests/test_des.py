"""The structured fast path (``fast.StructuredModel``) and the discrete-event engine
(``des.DesRunner``): the structured model is the scripted model with other draws (same replies,
tokens and latencies without errors), the engine gives the asyncio runner's results and traces
(the exact relation: equal wherever no two replicas' events coincide; with K = none and no
budget, equal even with ties), and every scheduling invariant of ``test_scheduling.py`` holds
on it."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from icml_tipex import roles
from icml_tipex.chat import messages_tokens
from icml_tipex.clock import Deadlock, run
from icml_tipex.des import DesRunner
from icml_tipex.fast import StructuredModel, sync_tools
from icml_tipex.plan import Plan, Subtask
from icml_tipex.runner import ExecutionConfig, SolveResult, TipexRunner
from icml_tipex.scripted import ScriptedModel, SimParams
from icml_tipex.synthgaia import SynthGAIA

from icml.testing import load_script

golden = load_script(Path(__file__).with_name("golden.py"), "tipex_golden_des")

PERFECT = SimParams(eps0=0, beta=0, plan_err=0, synth_err=0)


def _key(r: SolveResult) -> tuple:
    return (r.task_id, r.answer, repr(r.latency_s), r.tokens, r.calls, r.decided_by, r.correct,
            [(p.replica, p.answer, repr(p.finish), p.tokens, p.calls, p.status, p.error)
             for p in r.replicas])


def _canon(events: list[dict]) -> list[str]:
    return sorted(json.dumps(e, sort_keys=True, default=str) for e in events)


def _faults(cfg: ExecutionConfig, fault: str | None) -> dict[str, Any]:
    if fault == "raise_r1":
        return {"faults": {"planner": "raise"}, "fault_seeds": {cfg.replica_seed(1)}}
    if fault == "hang_synth":
        return {"faults": {"synthesizer": "hang"}}
    return {}


@pytest.fixture(scope="module")
def suite1() -> SynthGAIA:
    return SynthGAIA(seed=1)


# -- the structured model is the scripted model ------------------------------------------------
@pytest.mark.parametrize("engine", ["sim", "asyncio"])
def test_without_errors_the_structured_path_is_the_text_path(suite, engine: str) -> None:
    """Same replies, token counts, latencies and traces as ScriptedModel (whose draws differ,
    so the comparison is at zero error rates), on both event loops."""
    cfgs = [ExecutionConfig(planner="chain", max_inflight=None),
            ExecutionConfig(width=4, n_replicas=3, max_inflight=None),
            ExecutionConfig(width=2, n_replicas=5, max_inflight=2, granularity=8),
            ExecutionConfig(width=4, n_replicas=3, aggregator="judge", granularity=1),
            ExecutionConfig(width=3, n_replicas=2, max_tokens=40)]  # replies cut off
    for cfg in cfgs:
        for lvl in (1, 2, 3):
            tasks = suite.tasks(lvl, 3)
            a = TipexRunner(ScriptedModel(suite, PERFECT), suite.tools(), engine=engine).run(
                tasks, cfg, trace=True)
            b = TipexRunner(StructuredModel(suite, PERFECT), suite.tools(), engine=engine).run(
                tasks, cfg, trace=True)
            for x, y in zip(a, b):
                assert _key(x) == _key(y), (cfg, lvl)
                assert x.trace.events == y.trace.events


def test_token_counts_without_rendering_equal_the_rendered_counts(suite) -> None:
    """Worker and synthesizer prompts: the exact length from the parts, JSON escapes
    included (they fall back to rendering)."""
    m = StructuredModel(suite)
    rng = random.Random(0)
    values = ["123", "-45", "f1=12; f3=-7", "Belcor", "no result", 'a "quoted" one',
              "tab\there", "naïve", "back\\slash", "", "x" * 50]
    for lvl in (1, 2, 3):
        for task in suite.tasks(lvl, 4):
            for g in (1, 4, 8):
                plan, _, _ = m.plan(task, g, ("lookup", "search", "calc"), 0, 0.7, 4096, 0)
                assert isinstance(plan, Plan)
                assert m.plan_tokens(task, g) == messages_tokens(
                    roles.planner_messages(task.task_id, task.question, g))
                for sub in plan.subtasks:
                    parents = {d: rng.choice(values) for d in sub.deps}
                    w = m.worker_state(task, sub, parents, 3, 0.7)
                    msgs = roles.worker_messages(task.task_id, task.question, sub, parents)
                    assert w.ctx == messages_tokens(msgs)
                    for _ in range(3):  # the context grows by exactly the two messages
                        text, result = rng.choice(values) + " x", rng.choice(values)
                        w.observe(text, result)
                        msgs = msgs + [{"role": "assistant", "content": text},
                                       {"role": "user", "content": f"RESULT: {result}"}]
                        assert w.ctx == messages_tokens(msgs)
                    assert m.messages("worker", task, sub=sub, parents=parents, steps=[
                        (msgs[i]["content"], msgs[i + 1]["content"][8:])
                        for i in range(2, len(msgs), 2)]) == msgs
                results = {s.id: rng.choice(values) for s in plan.subtasks}
                ordered, final, pt = m.synth_inputs(task, plan, results)
                assert pt == messages_tokens(roles.synth_messages(task.task_id, task.question,
                                                                  ordered, final))
            agent = m.agent_subtask(task)
            assert m.worker_state(task, agent, {}, 0, 0.7).ctx == messages_tokens(
                roles.worker_messages(task.task_id, task.question,
                                      Subtask("agent", task.question, meta={"step": "all"}),
                                      {}))


def test_structured_draws_are_deterministic_and_keyed(suite) -> None:
    m1, m2 = StructuredModel(suite), StructuredModel(suite)
    assert m1.key("L1-0-0", "s1", 2, 7, 0.7) == m2.key("L1-0-0", "s1", 2, 7, 0.7)
    keys = {m1.key("L1-0-0", w, s, seed, 0.7) for w in ("s1", "s2") for s in range(4)
            for seed in range(5)}
    assert len(keys) == 40
    # at T = 0 the replica seed drops out (replicas without diversity are identical)
    assert m1.key("L1-0-0", "s1", 0, 1, 0.0) == m1.key("L1-0-0", "s1", 0, 2, 0.0)


# -- the discrete-event engine equals the asyncio runner ------------------------------------------
@pytest.mark.parametrize("name", list(golden.configs()))
def test_des_equals_asyncio_on_every_golden_config_without_ties(suite1, name: str) -> None:
    """Every golden config (K, quorum, judge, first, budget, timeout, T = 0, a raising planner,
    a hanging synthesizer): with tie_jitter no two replicas' events coincide, and the engines
    give the same results (floats bit for bit) and the same trace events."""
    cfg, fault = golden.configs()[name]
    for lvl in (1, 2, 3):
        tasks = suite1.tasks(lvl, 3)
        kw = _faults(cfg, fault)
        ma = StructuredModel(suite1, seed=2, tie_jitter=1e-3, **kw)
        mb = StructuredModel(suite1, seed=2, tie_jitter=1e-3, **kw)
        a = TipexRunner(ma, suite1.tools()).run(tasks, cfg, trace=True, concurrency=len(tasks))
        b = DesRunner(mb, sync_tools(suite1)).run(tasks, cfg, trace=True)
        for x, y in zip(a, b):
            assert _key(x) == _key(y), (name, lvl)
            assert _canon(x.trace.events) == _canon(y.trace.events), (name, lvl)
            # in time order the same events (same-time order may differ)
            tk = [(e.get("t", e.get("end")), e["kind"]) for e in x.trace.events]
            assert sorted(tk, key=repr) == sorted(
                [(e.get("t", e.get("end")), e["kind"]) for e in y.trace.events], key=repr)
        assert ma.calls == mb.calls


def test_des_equals_asyncio_with_ties_when_nothing_is_shared(suite1) -> None:
    """K = none and no budget: same-time order cannot change anything, so the engines agree
    without jitter too (the asyncio run one task per fresh loop, as the engine's are)."""
    for name, (cfg, fault) in golden.configs().items():
        if cfg.max_inflight is not None or cfg.token_budget is not None:
            continue
        for lvl in (1, 3):
            tasks = suite1.tasks(lvl, 2)
            kw = _faults(cfg, fault)
            ra = TipexRunner(StructuredModel(suite1, seed=2, **kw), suite1.tools())
            rb = DesRunner(StructuredModel(suite1, seed=2, **kw), sync_tools(suite1))
            for t in tasks:
                x = run(ra.solve(t, cfg, trace=True), "virtual", "sim")
                y = rb.solve(t, cfg, trace=True)
                assert _key(x) == _key(y), (name, lvl)
                assert _canon(x.trace.events) == _canon(y.trace.events), (name, lvl)


def test_des_without_trace_gives_the_traced_results(suite1) -> None:
    """Untraced, unshared runs take the lean worker loop (no trace, K or budget bookkeeping):
    the same results as the traced loop and as the asyncio runner."""
    for name, (cfg, fault) in golden.configs().items():
        kw = _faults(cfg, fault)
        for lvl in (1, 3):
            tasks = suite1.tasks(lvl, 2)
            d = DesRunner(StructuredModel(suite1, seed=2, tie_jitter=1e-3, **kw),
                          sync_tools(suite1))
            lean, full = d.run(tasks, cfg, trace=False), d.run(tasks, cfg, trace=True)
            a = TipexRunner(StructuredModel(suite1, seed=2, tie_jitter=1e-3, **kw),
                            suite1.tools()).run(tasks, cfg, trace=False, concurrency=len(tasks))
            for x, y, z in zip(lean, full, a):
                assert _key(x) == _key(y) == _key(z), (name, lvl)
                assert not x.trace.events


# -- the scheduling invariants, on the discrete-event engine ------------------------------------
@pytest.fixture(scope="module", params=[0.0, 1e-3], ids=["ties", "jitter"])
def des(request: pytest.FixtureRequest, suite) -> DesRunner:
    return DesRunner(StructuredModel(suite, tie_jitter=request.param), sync_tools(suite))


def _sum_durations(events: list[dict]) -> float:
    return sum(e["end"] - e["start"] for e in events if e["kind"] in ("model", "tool"))


@pytest.mark.parametrize("level", [1, 2, 3])
def test_des_one_replica_width_one_is_the_sum_of_calls(des, suite, level: int) -> None:
    for task in suite.tasks(level, 5):
        r = des.solve(task, ExecutionConfig(max_inflight=None, width=1, n_replicas=1))
        calls = r.trace.calls()
        assert r.latency_s == pytest.approx(_sum_durations(r.trace.events))
        assert r.tokens == sum(e["prompt_tokens"] + e["completion_tokens"] for e in calls)
        assert all(e["queued"] == e["start"] for e in calls)


def test_des_width_gives_the_critical_path_and_grahams_bound(des, suite) -> None:
    for level in (2, 3):
        for task in suite.tasks(level, 4):
            for g in (2, 4, 16):
                r = des.solve(task, ExecutionConfig(max_inflight=None, width=64, granularity=g))
                ev = r.trace.events
                plan = next(e for e in ev if e["kind"] == "plan")
                subs = {e["subtask"]: e["end"] - e["start"] for e in ev
                        if e["kind"] == "subtask"}
                p = Plan(tuple(Subtask(d["id"], d["goal"], tuple(d["deps"]))
                               for d in plan["subtasks"]))
                pl = next(e for e in r.trace.calls() if e["role"] == "planner")
                sy = next(e for e in r.trace.calls() if e["role"] == "synthesizer")
                fixed = pl["end"] - pl["start"] + sy["end"] - sy["start"]
                assert r.latency_s == pytest.approx(fixed + p.critical_path(subs))
                w = max(1, p.width() - 1)
                rw = des.solve(task, ExecutionConfig(max_inflight=None, width=w, granularity=g))
                span, cp, tot = rw.latency_s - fixed, p.critical_path(subs), sum(subs.values())
                assert cp - 1e-9 <= span <= tot / w + (1 - 1 / w) * cp + 1e-9
                # each subtask once, after its parents, at most w at once
                sp = {e["subtask"]: (e["start"], e["end"]) for e in rw.trace.events
                      if e["kind"] == "subtask"}
                assert sorted(sp) == sorted(p.ids)
                for s in p.subtasks:
                    assert all(sp[s.id][0] >= sp[u][1] - 1e-9 for u in s.deps)
                pts = sorted([(a, 1) for a, _ in sp.values()] + [(b, -1) for _, b in sp.values()])
                depth = peak = 0
                for _, d in pts:
                    depth += d
                    peak = max(peak, depth)
                assert peak <= w


def test_des_replicas_are_additive_and_latency_is_their_max(des, suite) -> None:
    for task in suite.tasks(2, 4):
        r5 = des.solve(task, ExecutionConfig(max_inflight=None, width=2, n_replicas=5))
        r3 = des.solve(task, ExecutionConfig(max_inflight=None, width=2, n_replicas=3))
        assert r5.tokens == sum(p.tokens for p in r5.replicas)
        assert [p.tokens for p in r5.replicas[:3]] == [p.tokens for p in r3.replicas]
        assert [p.answer for p in r5.replicas[:3]] == [p.answer for p in r3.replicas]
        assert r5.latency_s == pytest.approx(max(p.finish for p in r5.replicas))


def test_des_quorum_stops_early_and_cancels_the_rest(des, suite) -> None:
    stopped = 0
    for task in suite.tasks(2, 8):
        full = des.solve(task, ExecutionConfig(max_inflight=None, width=4, n_replicas=7))
        q = des.solve(task, ExecutionConfig(max_inflight=None, width=4, n_replicas=7, quorum=3))
        assert q.tokens <= full.tokens and q.latency_s <= full.latency_s + 1e-9
        if q.decided_by == "quorum":
            ok = sorted(p.finish for p in q.replicas if p.status == "ok")
            assert q.latency_s == pytest.approx(ok[-1])
            cancelled = [p for p in q.replicas if p.status == "cancelled"]
            stopped += len(cancelled)
            marked = {e["replica"] for e in q.trace.events
                      if e["kind"] == "path" and e["status"] == "cancelled"}
            assert marked == {p.replica for p in cancelled}
            # a cancelled call is charged nothing and ends at the decision
            for e in q.trace.calls("cancelled"):
                assert e["completion_tokens"] == 0 and e["end"] == pytest.approx(q.latency_s)
    assert stopped > 0


@pytest.mark.parametrize("k", [1, 2, 3])
def test_des_inflight_limit_is_never_exceeded_and_is_fifo(des, suite, k: int) -> None:
    for task in suite.tasks(3, 2):
        r = des.solve(task, ExecutionConfig(width=8, n_replicas=4, max_inflight=k,
                                            granularity=8))
        calls = r.trace.calls()
        pts = sorted([(e["start"], 1) for e in calls] + [(e["end"], -1) for e in calls])
        depth = peak = 0
        for _, d in pts:
            depth += d
            peak = max(peak, depth)
        assert peak <= k
        assert any(e["start"] > e["queued"] for e in calls)  # some waited for the slot
        waited = sorted((e for e in calls if e["start"] > e["queued"]),
                        key=lambda e: (e["queued"], e["start"]))
        starts = [e["start"] for e in waited]  # first come, first served
        assert all(a <= b + 1e-12 for a, b in zip(starts, starts[1:])) or k > 1


@pytest.mark.parametrize("budget", [300, 1500, 9000])
@pytest.mark.parametrize("k", [None, 2])
def test_des_budget_is_never_exceeded_by_more_than_one_call(des, suite, budget, k) -> None:
    for task in suite.tasks(3, 3):
        cfg = ExecutionConfig(width=4, n_replicas=6, max_inflight=k, token_budget=budget,
                              max_tokens=256)
        r = des.solve(task, cfg)
        calls = r.trace.calls()
        assert r.tokens <= budget + max(e["prompt_tokens"] for e in calls) + cfg.max_tokens
        assert r.tokens == sum(e["prompt_tokens"] + e["completion_tokens"] for e in calls
                               if e["status"] == "ok")
        if budget <= 1500:
            refused = [e for e in calls if e["status"] == "budget"]
            assert refused and all("token budget" in e["detail"] for e in refused)


def test_des_timeouts_and_faults(suite) -> None:
    task = suite.tasks(2, 1)[0]
    hang = DesRunner(StructuredModel(suite, faults={"synthesizer": "hang"}), sync_tools(suite))
    r = hang.solve(task, ExecutionConfig(width=2, n_replicas=2, call_timeout_s=3.0))
    assert all(p.status == "error" and "timed out after 3.0 s" in p.error for p in r.replicas)
    assert r.answer is None and len(r.trace.calls("timeout")) == 2
    r = hang.solve(task, ExecutionConfig(width=2, n_replicas=2, call_timeout_s=None,
                                         timeout_s=20.0))
    assert r.decided_by == "timeout" and r.latency_s == pytest.approx(20.0)
    assert all(p.status == "timeout" for p in r.replicas)
    with pytest.raises(Deadlock, match="hangs"):
        hang.solve(task, ExecutionConfig(width=2, n_replicas=1, call_timeout_s=None))
    boom = DesRunner(StructuredModel(suite, faults={"planner": "raise"}, fault_seeds={1}),
                     sync_tools(suite))
    r = boom.solve(task, ExecutionConfig(width=2, n_replicas=2, seed=0, replica_seeds=True))
    assert [p.status for p in r.replicas] == ["ok", "error"]
    assert "InjectedFault" in r.replicas[1].error


def test_des_same_seed_same_trace_seeds_matter_and_t0_replicas_agree(des, suite) -> None:
    task = suite.tasks(3, 1)[0]
    cfg = ExecutionConfig(width=3, n_replicas=4, max_inflight=3, quorum=2)
    a, b = des.solve(task, cfg), des.solve(task, cfg)
    assert a.trace.events == b.trace.events
    others = [des.solve(task, replace(cfg, seed=s)) for s in (1, 2, 3)]
    assert any(o.trace.events != a.trace.events for o in others)
    for t in suite.tasks(3, 3):
        r = des.solve(t, ExecutionConfig(max_inflight=None, n_replicas=4, temperature=0.0))
        assert len({p.answer for p in r.replicas}) == 1
        assert len({p.tokens for p in r.replicas}) == 1


def test_des_without_errors_every_config_is_exact(suite) -> None:
    d = DesRunner(StructuredModel(suite, PERFECT), sync_tools(suite))
    for level in (1, 2, 3):
        tasks = suite.tasks(level, 6)
        for cfg in (ExecutionConfig(max_inflight=None, planner="chain"),
                    ExecutionConfig(max_inflight=2, width=2, granularity=1),
                    ExecutionConfig(max_inflight=None, width=3, granularity=3, n_replicas=2),
                    ExecutionConfig(max_inflight=None,
                                    width=16, granularity=32, aggregator="judge")):
            assert all(x.correct for x in d.run(tasks, cfg)), (level, cfg)


def test_des_refuses_what_it_cannot_run(suite) -> None:
    with pytest.raises(ValueError, match="not a structured model"):
        DesRunner(ScriptedModel(suite), sync_tools(suite))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"tools\['lookup'\] must be \(function, latency s\)"):
        DesRunner(StructuredModel(suite), suite.tools())  # type: ignore[arg-type]
    d = DesRunner(StructuredModel(suite), sync_tools(suite))
    with pytest.raises(ValueError, match="shared_inflight"):
        d.run(suite.tasks(1, 1), ExecutionConfig(), shared_inflight=2)
    with pytest.raises(ValueError, match="tie_jitter"):
        StructuredModel(suite, tie_jitter=-1.0)
    with pytest.raises(ValueError, match="faults"):
        StructuredModel(suite, faults={"planner": "explode"})
