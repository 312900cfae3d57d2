"""Bad input: each fault is handled without hanging, reported in the trace, and the other
replicas are unaffected."""

import time

import pytest
from icml_tipex.clock import run
from icml_tipex.faults import FaultyModel, on_role
from icml_tipex.runner import ExecutionConfig, TipexRunner

# every test of this module runs on both virtual-clock engines (conftest.py)
pytestmark = pytest.mark.usefixtures("both_engines")


CYCLIC = ('{"subtasks": [{"id": "a", "goal": "x", "deps": ["b"]}, '
          '{"id": "b", "goal": "y", "deps": ["a"]}]}')
UNKNOWN_DEP = '{"subtasks": [{"id": "a", "goal": "x", "deps": ["ghost"]}]}'
UNKNOWN_TOOL = '{"subtasks": [{"id": "a", "goal": "x", "tool": "browser"}]}'


def _solve(runner_model, suite, cfg: ExecutionConfig, level: int = 2):
    r = TipexRunner(runner_model, suite.tools())
    task = suite.tasks(level, 1)[0]
    t = time.perf_counter()
    out = run(r.solve(task, cfg))
    assert time.perf_counter() - t < 5.0  # never hangs (virtual clock)
    return task, out


@pytest.mark.parametrize("reply, kind", [(CYCLIC, "cycle"), (UNKNOWN_DEP, "unknown_dep"),
                                         (UNKNOWN_TOOL, "unknown_tool")])
def test_bad_plans_fail_one_replica_only(runner, suite, reply: str, kind: str) -> None:
    seed0 = ExecutionConfig(max_inflight=None).replica_seed(0)
    model = FaultyModel(runner.model, on_role("planner", reply, seeds={seed0}))
    task, r = _solve(model, suite, ExecutionConfig(max_inflight=None, width=4, n_replicas=3))
    bad, *good = r.replicas
    assert bad.status == "error" and kind in bad.error
    assert all(p.status == "ok" and p.answer is not None for p in good)
    assert r.answer is not None
    ev = [e for e in r.trace.events if e["kind"] == "path" and e["replica"] == 0]
    assert ev and kind in ev[0]["error"]


def test_a_raising_model_call_fails_its_replica(runner, suite) -> None:
    seed1 = ExecutionConfig(max_inflight=None).replica_seed(1)
    model = FaultyModel(runner.model, on_role("worker", "raise", seeds={seed1}))
    _, r = _solve(model, suite, ExecutionConfig(max_inflight=None, width=4, n_replicas=3))
    assert [p.status for p in r.replicas] == ["ok", "error", "ok"]
    assert "InjectedFault" in r.replicas[1].error
    assert any(e["status"] == "error" and e["replica"] == 1 for e in r.trace.calls())


def test_a_call_that_never_returns_times_out(runner, suite) -> None:
    seed2 = ExecutionConfig(max_inflight=None).replica_seed(2)
    model = FaultyModel(runner.model, on_role("synthesizer", "hang", seeds={seed2}))
    _, r = _solve(model, suite, ExecutionConfig(max_inflight=None,
                                                width=4, n_replicas=3, call_timeout_s=30.0))
    assert [p.status for p in r.replicas] == ["ok", "ok", "error"]
    assert "timed out after 30.0 s" in r.replicas[2].error
    assert r.latency_s >= 30.0 and r.answer is not None
    assert any(e["status"] == "timeout" for e in r.trace.calls())


def test_a_replica_that_never_returns_is_cut_by_the_task_timeout(runner, suite) -> None:
    seed0 = ExecutionConfig(max_inflight=None).replica_seed(0)
    model = FaultyModel(runner.model, on_role("planner", "hang", seeds={seed0}))
    cfg = ExecutionConfig(max_inflight=None,
                          width=4, n_replicas=3, call_timeout_s=None, timeout_s=100.0)
    _, r = _solve(model, suite, cfg)
    assert r.decided_by == "timeout" and r.latency_s == pytest.approx(100.0)
    assert r.replicas[0].status == "timeout"
    assert all(p.status == "ok" for p in r.replicas[1:]) and r.answer is not None
    assert any(e["kind"] == "path" and e["status"] == "cancelled" for e in r.trace.events)


def test_an_unknown_tool_call_is_reported_to_the_worker_and_the_trace(runner, suite) -> None:
    calls = {"n": 0}

    def rule(messages, seed, i):
        if messages[0]["content"].startswith("ROLE: worker") and len(messages) == 2 \
                and calls["n"] == 0:
            calls["n"] += 1
            return "CALL browse(the web)"
        return None

    _, r = _solve(FaultyModel(runner.model, rule), suite,
                  ExecutionConfig(max_inflight=None, width=1, n_replicas=1, planner="chain"))
    tools = [e for e in r.trace.events if e["kind"] == "tool"]
    assert tools[0]["tool"] == "browse" and tools[0]["status"] == "error"
    assert "unknown tool 'browse'" in tools[0]["result"]


def test_an_exhausted_budget_stops_new_calls(runner, suite) -> None:
    _, r = _solve(runner.model, suite, ExecutionConfig(max_inflight=None,
                                                       width=4, n_replicas=3, token_budget=50))
    assert r.answer is None and all(p.status == "error" for p in r.replicas)
    assert all("BudgetExhausted" in p.error for p in r.replicas)


@pytest.mark.parametrize("key, value, match", [
    ("n_replicas", 0, "n_replicas=0: at least one replica"),
    ("width", 0, "width=0: at least one subtask"),
    ("granularity", 0, "granularity=0"),
    ("quorum", 4, "quorum=4: must be in 1..n_replicas"),
    ("aggregator", "vote", "aggregator='vote': choose one of"),
    ("max_inflight", 0, "max_inflight=0"),
    ("timeout_s", 0.0, "timeout_s=0.0"),
])
def test_bad_configs_name_the_key(key, value, match) -> None:
    with pytest.raises(ValueError, match=match):
        ExecutionConfig(**{"n_replicas": 3, "max_inflight": None, key: value})


def test_real_models_are_refused_on_the_virtual_clock(suite) -> None:
    class Real:
        name, virtual_time = "real", False

    r = TipexRunner(Real(), suite.tools())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="use clock='wall'"):
        run(r.solve(suite.tasks(1, 1)[0], ExecutionConfig(max_inflight=None)))
    with pytest.raises(ValueError, match="tools is empty"):
        TipexRunner(Real(), {})  # type: ignore[arg-type]


def test_plugin_config_rejects_inconsistent_settings() -> None:
    from icml_tipex.config import EvaluateConfig, ExecutionSettings, InferConfig

    with pytest.raises(ValueError, match="base_url"):
        InferConfig(model="http", clock="wall")
    with pytest.raises(ValueError, match="set clock=wall"):
        InferConfig(model="tiny")
    with pytest.raises(ValueError, match="quorum=5 exceeds"):
        EvaluateConfig(execution=ExecutionSettings(quorum=5), replicas=[1, 9])
    with pytest.raises(ValueError, match="engine='des' runs the scripted model"):
        InferConfig(engine="des", model="tiny", clock="wall")
    with pytest.raises(ValueError, match="shared_inflight: engine='des'"):
        InferConfig(engine="des", shared_inflight=2)
    with pytest.raises(ValueError, match="constrained=True: model='scripted'"):
        InferConfig(constrained=True)


def test_a_judge_without_a_valid_choice_falls_back_to_plurality(runner, suite) -> None:
    model = FaultyModel(runner.model, on_role("judge", "I cannot decide."))
    r = TipexRunner(model, suite.tools())
    tasks = suite.tasks(3, 12)
    judged = r.run(tasks, ExecutionConfig(max_inflight=None,
                                          width=4, n_replicas=5, aggregator="judge"), trace=True)
    plural = r.run(tasks, ExecutionConfig(max_inflight=None, width=4, n_replicas=5))
    assert [a.answer for a in judged] == [b.answer for b in plural]
    assert any(e["kind"] == "judge_fallback" for a in judged for e in a.trace.events)


def test_execution_section_is_what_the_runner_takes() -> None:
    """``--set execution.*`` builds the ExecutionSettings that the runner's ExecutionConfig is
    made of, unchanged; the job's config is that section at the job's design point; the
    default K is the one the default job always used (8); the old top-level keys are one-line
    config errors."""
    from dataclasses import fields

    from icml_tipex.config import EvaluateConfig, ExecutionSettings, InferConfig
    from icml_tipex.job import execution_config

    from icml import ConfigError
    from icml.config import build_config

    assert ExecutionConfig().max_inflight == ExecutionSettings().max_inflight == 8
    cfg = build_config(InferConfig, {}, ["execution.max_inflight=none", "execution.quorum=2",
                                         "execution.granularity=6", "n_replicas=3"])
    ec = execution_config(cfg, seed=7)
    assert isinstance(ec, ExecutionSettings)
    for f in fields(ExecutionSettings):
        assert getattr(ec, f.name) == getattr(cfg.execution, f.name), f.name
    assert (ec.max_inflight, ec.quorum, ec.granularity) == (None, 2, 6)
    assert (ec.n_replicas, ec.width, ec.planner, ec.seed) == (3, 4, "dag", 7)
    ev = execution_config(build_config(EvaluateConfig, {}, []), seed=0)
    assert (ev.n_replicas, ev.width, ev.max_inflight) == (1, 1, 8)
    for old in ("max_inflight=4", "granularity=2", "quorum=2"):
        with pytest.raises(ConfigError, match=old.split("=")[0]):
            build_config(InferConfig, {}, [old])
    with pytest.raises(ConfigError, match="quorum"):
        build_config(InferConfig, {}, ["n_replicas=2", "execution.quorum=3"])
