"""The one async chat protocol every model adapter implements, and its completion record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

Message = dict[str, str]


@dataclass(frozen=True)
class Completion:
    """One model reply: its text and token usage (prompt and completion)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str = "stop"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@runtime_checkable
class AsyncChatModel(Protocol):
    """An LLM behind one coroutine. ``virtual_time`` says whether its latency is simulated on the
    loop clock (so it may run on the virtual clock); real models run on the wall clock."""

    name: str
    virtual_time: bool

    async def generate(self, messages: list[Message], *, temperature: float, seed: int,
                       max_tokens: int) -> Completion: ...

    def count_tokens(self, messages: list[Message]) -> int: ...


def approx_tokens(text: str) -> int:
    """A tokenizer-free count: one token per four characters, rounded up (at least one)."""
    return (len(text) + 3) // 4 or 1


def messages_tokens(messages: list[Message]) -> int:
    """``approx_tokens`` over a chat (content plus a few tokens of role framing per message)."""
    return sum([(len(m["content"]) + 3) // 4 or 1 for m in messages]) + 3 * len(messages)


class ModelCallError(RuntimeError):
    """A model call raised or timed out; the path it belongs to fails, the others go on."""
