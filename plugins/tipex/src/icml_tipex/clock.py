"""Clocks: a virtual-time asyncio event loop (deterministic latency, a sweep in seconds) and the
wall clock. Everything in the framework reads time from ``asyncio.get_running_loop().time()``,
so the same code runs on either clock."""

from __future__ import annotations

import asyncio
import heapq
from asyncio.base_events import MAXIMUM_SELECT_TIMEOUT as _MAX_SELECT_TIMEOUT
from asyncio.base_events import _MIN_CANCELLED_TIMER_HANDLES_FRACTION as _MIN_CANCELLED_FRACTION
from asyncio.base_events import _MIN_SCHEDULED_TIMER_HANDLES as _MIN_SCHEDULED
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


class _Timer(float):
    """A timer-heap entry: the handle's deadline as a float carrying the handle. heapq then
    compares entries in C, with exactly the outcomes of ``TimerHandle.__lt__`` (deadlines only,
    ties False), so the heap evolves and pops as asyncio's own heap of handles would."""

    __slots__ = ("handle",)


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` is virtual: ``asyncio.sleep``, ``asyncio.timeout`` and
    ``wait_for`` all run on it, and idle waits cost no real time. Real work (threads, sockets)
    takes zero virtual time, so use it with models whose latency is simulated
    (``ScriptedModel``).

    ``call_at`` and ``_run_once`` are asyncio's (CPython 3.11-3.13) step for step, with the timer
    heap holding :class:`_Timer` entries (C comparisons instead of a Python ``__lt__`` per heap
    step) and the slow-callback timing of debug mode dropped (it is always 0 s here): same
    callbacks, same order, same virtual times."""

    def __init__(self, start: float = 0.0) -> None:
        sel = _VirtualSelector()
        super().__init__(selector=sel)
        sel.loop = self
        self._vnow = float(start)

    def time(self) -> float:
        return self._vnow

    def _advance(self, dt: float) -> None:
        self._vnow += max(0.0, dt)

    def call_at(self, when: float, callback: Any, *args: Any,
                context: Any = None) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_at")
        timer = asyncio.TimerHandle(when, callback, args, self, context)
        if timer._source_traceback:
            del timer._source_traceback[-1]
        entry = _Timer(when)
        entry.handle = timer
        heapq.heappush(self._scheduled, entry)
        timer._scheduled = True
        return timer

    def _run_once(self) -> None:
        heap: list[_Timer] = self._scheduled
        n = len(heap)
        if n > _MIN_SCHEDULED and self._timer_cancelled_count / n > _MIN_CANCELLED_FRACTION:
            kept = []
            for entry in heap:
                if entry.handle._cancelled:
                    entry.handle._scheduled = False
                else:
                    kept.append(entry)
            heapq.heapify(kept)
            self._scheduled = heap = kept
            self._timer_cancelled_count = 0
        else:
            while heap and heap[0].handle._cancelled:
                self._timer_cancelled_count -= 1
                heapq.heappop(heap).handle._scheduled = False
        ready = self._ready
        timeout = None
        if ready or self._stopping:
            timeout = 0
        elif heap:
            timeout = min(max(0, heap[0].handle._when - self.time()), _MAX_SELECT_TIMEOUT)
        events = self._selector.select(timeout)
        if events:
            self._process_events(events)
        events = None
        end_time = self.time() + self._clock_resolution
        while heap:
            if heap[0].handle._when >= end_time:
                break
            handle = heapq.heappop(heap).handle
            handle._scheduled = False
            ready.append(handle)
        popleft, debug = ready.popleft, self._debug
        for _ in range(len(ready)):
            handle = popleft()
            if handle._cancelled:
                continue
            if debug:
                try:
                    self._current_handle = handle
                    handle._run()
                finally:
                    self._current_handle = None
            else:
                handle._run()
        handle = None  # break cycles when an exception occurs


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
