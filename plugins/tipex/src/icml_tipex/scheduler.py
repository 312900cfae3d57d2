"""Tier 2, structural parallelism: a ready-set list scheduler that runs a plan's subtasks with
at most ``width`` in flight, each after all of its parents, each exactly once."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Mapping

from icml_tipex.plan import Plan, Subtask

RunSubtask = Callable[[Subtask, Mapping[str, str]], Awaitable[str]]


async def run_dag(plan: Plan, run_subtask: RunSubtask, width: int) -> dict[str, str]:
    """Run every subtask of ``plan`` (ready ones in plan order, FIFO) with at most ``width``
    concurrently; returns ``{id: result}``. If a subtask raises, the running ones are cancelled
    and the error propagates."""
    if width < 1:
        raise ValueError(f"width={width} must be >= 1")
    by_id = {s.id: s for s in plan.subtasks}
    order = {s.id: i for i, s in enumerate(plan.subtasks)}
    children = plan.children()
    missing = {s.id: len(s.deps) for s in plan.subtasks}
    ready = deque(s.id for s in plan.subtasks if not s.deps)
    running: dict[asyncio.Task[str], str] = {}
    results: dict[str, str] = {}
    try:
        while ready or running:
            while ready and len(running) < width:
                v = ready.popleft()
                sub = by_id[v]
                parents = {u: results[u] for u in sub.deps}
                running[asyncio.ensure_future(run_subtask(sub, parents))] = v
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for t in sorted(done, key=lambda t: order[running[t]]):
                v = running.pop(t)
                results[v] = t.result()
                for c in sorted(children[v], key=order.__getitem__):
                    missing[c] -= 1
                    if missing[c] == 0:
                        ready.append(c)
    finally:
        for t in running:
            t.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
    return results
