"""The benchmark's lower bound "real logic with no scheduling" (``bench.py --parts floor``)
must execute the same logic as the runner: each replica's path run straight through with no
event loop (zero-latency model and tools, no K, no call timeout) gives the same answer, tokens
and calls per replica as the virtual-clock run, on chains, DAGs and replicated DAGs."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest
from icml_tipex.runner import ExecutionConfig, TipexRunner
from icml_tipex.scripted import ScriptedModel
from icml_tipex.synthgaia import SynthGAIA

from icml.testing import load_script

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(_BENCH))  # bench.py imports throughput_ab's grid from there
    try:
        mod = load_script(_BENCH / "bench.py", "tipex_bench")
        yield mod
    finally:
        sys.path.remove(str(_BENCH))


@pytest.mark.parametrize(("level", "kw"), [
    (1, dict(planner="chain")), (2, dict(width=4)), (3, dict(n_replicas=3, width=4, seed=2)),
    (3, dict(n_replicas=2, width=8, granularity=8, max_inflight=2))])
def test_straight_run_executes_the_runners_logic(bench, level: int, kw: dict) -> None:
    suite = SynthGAIA(seed=0)
    zero = SynthGAIA(seed=0, tool_latency={"lookup": 0, "search": 0, "calc": 0})
    cfg = ExecutionConfig(**{"max_inflight": None, **kw})
    out = TipexRunner(ScriptedModel(suite), suite.tools()).run(suite.tasks(level, 6), cfg)
    want = [[(p.replica, p.answer, p.tokens, p.calls) for p in o.replicas] for o in out]
    zrunner = TipexRunner(ScriptedModel(zero, latency_scale=0.0), zero.tools())
    zcfg = replace(cfg, max_inflight=None, call_timeout_s=None)
    got = [bench.straight(zrunner, t, zcfg) for t in zero.tasks(level, 6)]
    assert got == want
    assert any(c > 1 for row in got for *_, c in row)  # the paths did run


def test_straight_run_refuses_a_coroutine_that_waits(bench) -> None:
    """``drive`` runs a coroutine to its end in one ``send``; one that suspends is an error (a
    model or tool with latency would instead fail inside the path for want of a loop, which
    the equality above catches)."""
    import asyncio

    async def waits() -> int:
        await asyncio.sleep(0)  # yields once, even with no loop
        return 1

    async def done() -> int:
        return 2

    assert bench.drive(done()) == 2
    with pytest.raises(RuntimeError, match="waited"):
        bench.drive(waits())
