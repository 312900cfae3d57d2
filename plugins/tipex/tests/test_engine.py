"""The virtual clock's two engines: the lean ``SimEventLoop`` (default) must schedule exactly as
asyncio's loop (``VirtualEventLoop``) does, same-time ties, cancelled timers and the timer-heap
rebuild included, and refuse what a simulation cannot do with a clear error."""

import asyncio
import random
import time

import pytest
from icml_tipex.clock import Deadlock, SimEventLoop, VirtualEventLoop, is_virtual, new_loop, run
from icml_tipex.runner import ExecutionConfig, TipexRunner
from icml_tipex.scripted import ScriptedModel

DURATIONS = (0.0, 0.5, 0.5, 1.0, 1.5, 0.25)  # few distinct values: many same-time timers


async def _stress(seed: int, workers: int = 60, steps: int = 14) -> tuple[list, float, object]:
    """Workers that sleep, contend for a semaphore, time out (or not), use a queue, spawn and
    cancel children, all on a handful of durations; returns the log of what happened when."""
    loop = asyncio.get_running_loop()
    log: list[tuple] = []
    sem, q, ev = asyncio.Semaphore(3), asyncio.Queue(), asyncio.Event()

    async def child(i: int, d: float) -> float:
        await asyncio.sleep(d)
        log.append(("child", i, loop.time()))
        return d

    async def worker(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        for s in range(steps):
            a, d = rng.randrange(8), rng.choice(DURATIONS)
            try:
                if a == 0:
                    await asyncio.sleep(d)
                elif a == 1:
                    async with sem:
                        await asyncio.sleep(d)
                elif a == 2:  # a timeout that may fire
                    await asyncio.wait_for(asyncio.sleep(d), timeout=rng.choice(DURATIONS[1:]))
                elif a in (3, 7):  # a long timeout that stays in the heap cancelled
                    async with asyncio.timeout(1000.0):
                        await asyncio.sleep(d)
                elif a == 4:
                    q.put_nowait((i, s))
                    await asyncio.sleep(d)
                elif a == 5:
                    t = asyncio.ensure_future(child(i, d))
                    if rng.random() < 0.5:
                        await asyncio.sleep(0.25)
                        t.cancel()
                    await asyncio.gather(t, return_exceptions=True)
                else:
                    kids = [asyncio.ensure_future(child(i, x)) for x in (d, 0.5)]  # in order
                    done = [await f for f in asyncio.as_completed(kids)]
                    log.append(("as_completed", i, done))
            except TimeoutError:
                log.append(("timeout", i, s, loop.time()))
            log.append(("step", i, s, a, loop.time()))
        if i == 0:
            ev.set()

    async def consumer() -> None:
        while True:
            item = await q.get()
            log.append(("got", item, loop.time()))

    cons = asyncio.ensure_future(consumer())
    await asyncio.gather(*(worker(i) for i in range(workers)))
    await ev.wait()
    cons.cancel()
    await asyncio.gather(cons, return_exceptions=True)
    return log, loop.time(), loop


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sim_engine_schedules_exactly_as_asyncio(seed: int) -> None:
    sim_log, sim_t, sim_loop = run(_stress(seed), "virtual", "sim")
    ref_log, ref_t, ref_loop = run(_stress(seed), "virtual", "asyncio")
    assert isinstance(sim_loop, SimEventLoop) and isinstance(ref_loop, VirtualEventLoop)
    assert len(sim_log) > 400 and any(e[0] == "timeout" for e in sim_log)
    assert sim_log == ref_log  # every event, in the same order, at the same float time
    assert repr(sim_t) == repr(ref_t)
    assert sim_loop.rebuilds > 0  # the cancelled-timer rebuild path was exercised


def test_a_wait_that_can_never_end_is_an_error_not_a_hang() -> None:
    t = time.perf_counter()
    with pytest.raises(Deadlock, match="no timer is pending"):
        run(asyncio.Event().wait(), "virtual", "sim")
    assert time.perf_counter() - t < 5.0


def test_the_sim_engine_refuses_real_io_and_names_the_fix() -> None:
    async def main() -> None:
        await asyncio.get_running_loop().run_in_executor(None, time.sleep, 0)

    with pytest.raises(RuntimeError, match="engine='asyncio'"):
        run(main(), "virtual", "sim")
    assert run(main(), "virtual", "asyncio") is None  # the asyncio engine runs threads


def test_a_raising_callback_goes_to_the_exception_handler_and_the_loop_goes_on() -> None:
    seen = []

    async def main() -> float:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda lp, ctx: seen.append(ctx["exception"]))
        loop.call_soon(lambda: 1 / 0)
        await asyncio.sleep(2.0)
        return loop.time()

    assert run(main(), "virtual", "sim") == 2.0
    assert len(seen) == 1 and isinstance(seen[0], ZeroDivisionError)


def test_engine_names_are_checked(monkeypatch: pytest.MonkeyPatch, suite) -> None:
    with pytest.raises(ValueError, match="engine='fast'"):
        TipexRunner(ScriptedModel(suite), suite.tools(), engine="fast")
    with pytest.raises(ValueError, match="engine='fast'"):
        new_loop("virtual", "fast")
    with pytest.raises(ValueError, match="engine='fast'"):
        run(asyncio.sleep(0), "virtual", "fast")
    monkeypatch.setenv("TIPEX_ENGINE", "fast")
    with pytest.raises(ValueError, match="TIPEX_ENGINE='fast'"):
        new_loop("virtual")
    monkeypatch.setenv("TIPEX_ENGINE", "asyncio")
    loop = new_loop("virtual")
    assert isinstance(loop, VirtualEventLoop)
    loop.close()


def test_both_engines_are_virtual_and_give_the_same_runs_with_a_shared_k(suite) -> None:
    tasks = suite.tasks(2, 6)
    cfg = ExecutionConfig(width=4, n_replicas=3, max_inflight=4, seed=5)
    out = {}
    for e in ("sim", "asyncio"):
        r = TipexRunner(ScriptedModel(suite), suite.tools(), engine=e)
        res = r.run(tasks, cfg, trace=True, concurrency=6, shared_inflight=3)
        out[e] = [(x.answer, repr(x.latency_s), x.tokens, x.calls, x.trace.events)
                  for x in res]
        assert run(_is_virtual(), "virtual", e)
    assert out["sim"] == out["asyncio"]


async def _is_virtual() -> bool:
    return is_virtual()
