"""Tier 2, structural parallelism: a ready-set list scheduler that runs a plan's subtasks with
at most ``width`` in flight, each after all of its parents, each exactly once."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Mapping

from icml_tipex.plan import Plan, Subtask

RunSubtask = Callable[[Subtask, Mapping[str, str]], Awaitable[str]]


async def run_dag(plan: Plan, run_subtask: RunSubtask, width: int) -> dict[str, str]:
    """Run every subtask of ``plan`` with at most ``width`` concurrently (ready subtasks start
    FIFO: the initial ones in plan order, then as their last parent finishes, children in plan
    order); returns ``{id: result}``. If a subtask raises, the running ones are cancelled
    and the error propagates."""
    if width < 1:
        raise ValueError(f"width={width} must be >= 1")
    by_id = {s.id: s for s in plan.subtasks}
    children = plan.children()
    missing = {s.id: len(s.deps) for s in plan.subtasks}
    ready = deque(s.id for s in plan.subtasks if not s.deps)
    running: dict[str, asyncio.Future[str]] = {}
    results: dict[str, str] = {}
    finished: asyncio.Queue[str] = asyncio.Queue()  # O(1) per completion, in completion order
    try:
        while ready or running:
            while ready and len(running) < width:
                v = ready.popleft()
                sub = by_id[v]
                t = asyncio.ensure_future(run_subtask(sub, {u: results[u] for u in sub.deps}))
                t.add_done_callback(lambda _, v=v: finished.put_nowait(v))
                running[v] = t
            v = await finished.get()
            results[v] = running.pop(v).result()
            for c in children[v]:
                missing[c] -= 1
                if missing[c] == 0:
                    ready.append(c)
    finally:
        for t in running.values():
            t.cancel()
        if running:
            await asyncio.gather(*running.values(), return_exceptions=True)
    return results
