"""The bare agent: one ReAct loop written with plain awaits, no scheduler, semaphore, budget or
trace. ``TipexRunner`` with ``n_replicas=1, width=1, planner="chain"`` must reproduce it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from icml_tipex.chat import AsyncChatModel
from icml_tipex.plan import Subtask
from icml_tipex.roles import _ANSWER, parse_call, worker_messages


@dataclass(frozen=True)
class BareResult:
    answer: str
    tokens: int
    calls: int
    latency_s: float


async def bare_agent(model: AsyncChatModel, tools: Mapping[str, Callable[..., Awaitable[str]]],
                     task: Any, *, temperature: float = 0.7, seed: int = 0,
                     max_tokens: int = 512, max_steps: int = 24) -> BareResult:
    """Solve ``task`` (``task_id``, ``question``) as a single tool-using agent."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    messages = worker_messages(task.task_id, task.question,
                               Subtask("agent", task.question, meta={"step": "all"}), {})
    tokens = calls = 0
    for _ in range(max_steps):
        c = await model.generate(messages, temperature=temperature, seed=seed,
                                 max_tokens=max_tokens)
        tokens += c.total_tokens
        calls += 1
        text = c.text.strip()
        tc = parse_call(text, tools)
        if tc is None:
            m = _ANSWER.search(text)
            return BareResult((m.group(1) if m else text).strip(), tokens, calls,
                              loop.time() - t0)
        name, args = tc
        result = await tools[name](*args) if name in tools else f"error: unknown tool {name!r}"
        messages = messages + [{"role": "assistant", "content": text},
                               {"role": "user", "content": f"RESULT: {result}"}]
    return BareResult("", tokens, calls, loop.time() - t0)
