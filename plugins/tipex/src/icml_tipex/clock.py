"""Clocks: a virtual-time asyncio event loop (deterministic latency, a sweep in seconds) and the
wall clock. Everything in the framework reads time from ``asyncio.get_running_loop().time()``,
so the same code runs on either clock."""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

T = TypeVar("T")
ClockName = Literal["virtual", "wall"]
CLOCKS = ("virtual", "wall")


class _VirtualSelector(selectors.BaseSelector):
    """Wraps the real selector: real I/O is polled without waiting; when nothing is ready and a
    timer is due, virtual time jumps to it instead of sleeping."""

    def __init__(self) -> None:
        self._sel = selectors.DefaultSelector()
        self.loop: VirtualEventLoop | None = None
        self._skipped = 0
        self._n = 0  # registered file objects

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = self._sel.register(fileobj, events, data)
        self._n = len(self._sel.get_map())
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        key = self._sel.unregister(fileobj)
        self._n = len(self._sel.get_map())
        return key

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._sel.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        # With nothing registered but the loop's self-pipe (no sockets: a pure simulation),
        # polling it on every iteration costs a syscall per loop step and can only find a
        # wake-up byte whose callback is already queued; poll it every 128th step instead.
        self._skipped += 1
        if self._n <= 1 and timeout is not None and self._skipped & 127:
            events = []
        else:
            events = self._sel.select(0)
        if events or timeout == 0:
            return events
        if timeout is None:  # no timer pending: only real I/O (a thread, a socket) can wake us
            return self._sel.select(None)
        assert self.loop is not None
        self.loop._advance(timeout)
        return []

    def get_map(self) -> Any:
        return self._sel.get_map()

    def close(self) -> None:
        self._sel.close()


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` is virtual: ``asyncio.sleep``, ``asyncio.timeout`` and
    ``wait_for`` all run on it, and idle waits cost no real time. Real work (threads, sockets)
    takes zero virtual time, so use it with models whose latency is simulated
    (``ScriptedModel``)."""

    def __init__(self, start: float = 0.0) -> None:
        sel = _VirtualSelector()
        super().__init__(selector=sel)
        sel.loop = self
        self._vnow = float(start)

    def time(self) -> float:
        return self._vnow

    def _advance(self, dt: float) -> None:
        self._vnow += max(0.0, dt)


def new_loop(clock: ClockName = "virtual") -> asyncio.AbstractEventLoop:
    """A fresh event loop for ``clock`` ("virtual" or "wall")."""
    if clock == "virtual":
        return VirtualEventLoop()
    if clock == "wall":
        return asyncio.new_event_loop()
    raise ValueError(f"clock={clock!r} is not one of {CLOCKS}")


def run(coro: Coroutine[Any, Any, T], clock: ClockName = "virtual") -> T:
    """Run ``coro`` to completion on a fresh loop of the given clock and close the loop."""
    if clock not in CLOCKS:
        coro.close()
        raise ValueError(f"clock={clock!r} is not one of {CLOCKS}")
    with asyncio.Runner(loop_factory=lambda: new_loop(clock)) as runner:
        return runner.run(coro)


def now() -> float:
    """The running loop's time (virtual seconds on a ``VirtualEventLoop``)."""
    return asyncio.get_running_loop().time()


def is_virtual() -> bool:
    """Whether the running loop keeps virtual time."""
    return isinstance(asyncio.get_running_loop(), VirtualEventLoop)
