"""Fault injection for any chat model: make chosen calls raise, hang forever, or return a given
reply (a cyclic plan, an unknown tool...). Used by the bad-input tests and the README demo."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from icml_tipex.chat import AsyncChatModel, Completion, Message, approx_tokens, messages_tokens
from icml_tipex.roles import role_of

# rule(messages, seed, call_index) -> None (pass through) | "raise" | "hang" | reply text
Rule = Callable[[list[Message], int, int], str | None]


class InjectedFault(RuntimeError):
    """The error a ``"raise"`` fault raises."""


class FaultyModel:
    """Wraps ``inner``; ``rule`` decides per call what goes wrong (see :data:`Rule`)."""

    def __init__(self, inner: AsyncChatModel, rule: Rule) -> None:
        self.inner, self.rule = inner, rule
        self.name = f"faulty({getattr(inner, 'name', 'model')})"
        self.virtual_time = getattr(inner, "virtual_time", False)
        self.calls = 0

    def count_tokens(self, messages: list[Message]) -> int:
        count = getattr(self.inner, "count_tokens", None)
        return count(messages) if count else messages_tokens(messages)

    async def generate(self, messages: list[Message], *, temperature: float = 0.0,
                       seed: int = 0, max_tokens: int = 256) -> Completion:
        i = self.calls
        self.calls += 1
        action = self.rule(messages, seed, i)
        if action is None:
            return await self.inner.generate(messages, temperature=temperature, seed=seed,
                                             max_tokens=max_tokens)
        if action == "raise":
            raise InjectedFault(f"injected failure on call {i} ({role_of(messages)})")
        if action == "hang":
            await asyncio.Event().wait()  # never set: only a timeout or cancellation ends it
        return Completion(action, self.count_tokens(messages), approx_tokens(action))


def on_role(role: str, action: str, seeds: set[int] | None = None) -> Rule:
    """A rule applying ``action`` to every call of ``role`` (optionally only for replica seeds
    in ``seeds``)."""
    def rule(messages: list[Message], seed: int, i: int) -> str | None:
        if role_of(messages) == role and (seeds is None or seed in seeds):
            return action
        return None
    return rule
