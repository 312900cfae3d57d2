"""Clocks: a virtual-time asyncio event loop (deterministic latency, a sweep in seconds) and the
wall clock. Everything in the framework reads time from ``asyncio.get_running_loop().time()``,
so the same code runs on either clock."""

from __future__ import annotations

import asyncio
import contextvars
import os
import selectors
import time
from asyncio import events, futures, tasks
from collections import deque
from collections.abc import Coroutine
from heapq import heapify, heappop, heappush
from typing import Any, Literal, TypeVar

T = TypeVar("T")
ClockName = Literal["virtual", "wall"]
CLOCKS = ("virtual", "wall")
EngineName = Literal["sim", "asyncio"]
ENGINES = ("sim", "asyncio")


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


# -- the "sim" engine: a lean virtual-time loop with asyncio's exact scheduling order ----------
# asyncio's BaseEventLoop spends most of a simulated model call in pure-Python bookkeeping that a
# simulation does not need: a Handle object per callback (with a debug check and a copied
# context), a TimerHandle per timer whose heap comparisons are Python ``__lt__`` calls, a
# selector poll per loop step. SimEventLoop keeps asyncio's C Tasks and Futures (so coroutines
# step exactly as under asyncio) and re-implements only the loop: the same ready FIFO, the same
# timer heap operations (push, pop, cancelled-head removal, the rebuild when more than half of
# over 100 timers are cancelled) with entries that compare by their time alone, as TimerHandle
# does, but in C (a float subclass), and the same time advance (now += when - now). So the
# order of same-time events, and every float, is asyncio's: the golden test checks it.

_MAX_ADVANCE = 24 * 3600.0  # asyncio's MAXIMUM_SELECT_TIMEOUT
_RESOLUTION = time.get_clock_info("monotonic").resolution  # asyncio's _clock_resolution


class _Handle:
    """A ``call_soon`` callback (``asyncio.Handle``'s interface, without debug bookkeeping)."""

    __slots__ = ("_cb", "_args", "_ctx")

    def cancel(self) -> None:
        self._cb = self._args = None

    def cancelled(self) -> bool:
        return self._cb is None

    def get_context(self) -> contextvars.Context:
        return self._ctx


class _Timer(float):
    """A timer: the float value is its time, so ``heapq`` compares timers in C, by time only
    (as ``TimerHandle.__lt__`` does; equal times keep asyncio's heap order)."""

    __slots__ = ("_cb", "_args", "_ctx", "_scheduled", "_loop")

    def cancel(self) -> None:
        if self._cb is not None:
            if self._scheduled:
                self._loop._timer_cancelled_count += 1
            self._cb = self._args = None

    def cancelled(self) -> bool:
        return self._cb is None

    def when(self) -> float:
        return float(self)

    def get_context(self) -> contextvars.Context:
        return self._ctx

    def __repr__(self) -> str:
        return f"<_Timer when={float(self)!r} cancelled={self._cb is None}>"


class Deadlock(RuntimeError):
    """Nothing is ready and no timer is pending: on the virtual clock nothing can happen any
    more (asyncio would wait forever)."""


class SimEventLoop(asyncio.AbstractEventLoop):
    """The virtual clock's default engine: runs coroutines, ``asyncio.sleep``, timeouts, locks,
    queues and tasks in virtual time with asyncio's own scheduling order, at a fraction of
    ``VirtualEventLoop``'s cost per step. It has no I/O: sockets, threads and executors need
    ``engine="asyncio"`` (:class:`VirtualEventLoop`) or the wall clock."""

    def __init__(self, start: float = 0.0) -> None:
        self._vnow = float(start)
        self._ready: deque[Any] = deque()
        self._scheduled: list[_Timer] = []
        self._timer_cancelled_count = 0
        self._stopping = False
        self._closed = False
        self._running = False
        self._debug = False
        self._task_factory: Any = None
        self._exception_handler: Any = None
        self.steps = 0  # loop iterations run (diagnostics)
        self.rebuilds = 0  # timer heap rebuilds (more than half of over 100 timers cancelled)

    # -- time and scheduling ----------------------------------------------------------------
    def time(self) -> float:
        return self._vnow

    def call_soon(self, callback: Any, *args: Any, context: Any = None) -> _Handle:
        if self._closed:
            raise RuntimeError("Event loop is closed")
        h = _Handle()
        h._cb, h._args = callback, args
        h._ctx = context if context is not None else contextvars.copy_context()
        self._ready.append(h)
        return h

    call_soon_threadsafe = call_soon  # no other thread can run in a simulation

    def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> _Timer:
        if when is None:
            raise TypeError("when cannot be None")
        if self._closed:
            raise RuntimeError("Event loop is closed")
        t = _Timer(when)
        t._cb, t._args, t._loop = callback, args, self
        t._ctx = context if context is not None else contextvars.copy_context()
        heappush(self._scheduled, t)
        t._scheduled = True
        return t

    def call_later(self, delay: float, callback: Any, *args: Any,
                   context: Any = None) -> _Timer:
        if delay is None:
            raise TypeError("delay must not be None")
        return self.call_at(self._vnow + delay, callback, *args, context=context)

    def _run_once(self) -> None:
        """One iteration of ``BaseEventLoop._run_once``, step for step."""
        sched = self._scheduled
        n = len(sched)
        if n > 100 and self._timer_cancelled_count / n > 0.5:
            keep = []
            for t in sched:
                if t._cb is None:
                    t._scheduled = False
                else:
                    keep.append(t)
            heapify(keep)
            self.rebuilds += 1
            self._scheduled = sched = keep
            self._timer_cancelled_count = 0
        else:
            while sched and sched[0]._cb is None:
                self._timer_cancelled_count -= 1
                heappop(sched)._scheduled = False
        ready = self._ready
        if not ready and not self._stopping:
            if not sched:
                raise Deadlock("nothing is ready and no timer is pending: every coroutine "
                               "waits for something that can never happen (asyncio would hang "
                               "here); give the waits a timeout")
            self._vnow += max(0.0, min(max(0, sched[0] - self._vnow), _MAX_ADVANCE))
        end = self._vnow + _RESOLUTION
        while sched and sched[0] < end:
            t = heappop(sched)
            t._scheduled = False
            ready.append(t)
        self.steps += 1
        popleft = ready.popleft
        for _ in range(len(ready)):
            h = popleft()
            cb = h._cb
            if cb is None:
                continue
            try:
                h._ctx.run(cb, *h._args)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # noqa: BLE001 - as asyncio.Handle._run
                self.call_exception_handler({"message": f"Exception in callback {cb!r}",
                                             "exception": exc, "handle": h})

    # -- running ----------------------------------------------------------------------------
    def run_forever(self) -> None:
        if self._closed:
            raise RuntimeError("Event loop is closed")
        if self._running:
            raise RuntimeError("This event loop is already running")
        if events._get_running_loop() is not None:
            raise RuntimeError("Cannot run the event loop while another loop is running")
        self._running = True
        events._set_running_loop(self)
        try:
            while True:
                self._run_once()
                if self._stopping:
                    break
        finally:
            self._stopping = False
            self._running = False
            events._set_running_loop(None)

    def run_until_complete(self, future: Any) -> Any:
        if self._closed:
            raise RuntimeError("Event loop is closed")
        new_task = not futures.isfuture(future)
        future = tasks.ensure_future(future, loop=self)
        if new_task:
            future._log_destroy_pending = False
        future.add_done_callback(self._stop_cb)
        try:
            self.run_forever()
        except BaseException:
            if new_task and future.done() and not future.cancelled():
                future.exception()
            raise
        finally:
            future.remove_done_callback(self._stop_cb)
        if not future.done():
            raise RuntimeError("Event loop stopped before Future completed.")
        return future.result()

    def _stop_cb(self, fut: Any) -> None:
        self._stopping = True

    def stop(self) -> None:
        self._stopping = True

    def is_running(self) -> bool:
        return self._running

    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._running:
            raise RuntimeError("Cannot close a running event loop")
        self._closed = True
        self._ready.clear()
        self._scheduled.clear()

    async def shutdown_asyncgens(self) -> None:
        return None

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:
        return None

    # -- futures and tasks ------------------------------------------------------------------
    def create_future(self) -> asyncio.Future[Any]:
        return futures.Future(loop=self)

    def create_task(self, coro: Any, *, name: str | None = None,
                    context: Any = None) -> asyncio.Task[Any]:
        if self._closed:
            raise RuntimeError("Event loop is closed")
        if self._task_factory is None:
            task = tasks.Task(coro, loop=self, name=name, context=context)
        elif context is None:
            task = self._task_factory(self, coro)
        else:
            task = self._task_factory(self, coro, context=context)
        if name is not None:
            task.set_name(name)
        return task

    def set_task_factory(self, factory: Any) -> None:
        self._task_factory = factory

    def get_task_factory(self) -> Any:
        return self._task_factory

    # -- errors and debug -------------------------------------------------------------------
    def get_exception_handler(self) -> Any:
        return self._exception_handler

    def set_exception_handler(self, handler: Any) -> None:
        self._exception_handler = handler

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        msg = context.get("message") or "Unhandled exception in the simulation loop"
        exc = context.get("exception")
        exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else False
        extra = "".join(f"\n{k}: {v!r}" for k, v in sorted(context.items())
                        if k not in ("message", "exception"))
        asyncio.log.logger.error(msg + extra, exc_info=exc_info)

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        if self._exception_handler is None:
            self.default_exception_handler(context)
        else:
            self._exception_handler(self, context)

    def get_debug(self) -> bool:
        return self._debug

    def set_debug(self, enabled: bool) -> None:
        self._debug = bool(enabled)

    # -- what a simulation cannot do --------------------------------------------------------
    def _no_io(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the virtual clock's 'sim' engine runs no threads, sockets or "
                           "subprocesses; use engine='asyncio' (VirtualEventLoop, real I/O "
                           "in zero virtual time) or clock='wall'")

    run_in_executor = set_default_executor = add_reader = add_writer = _no_io
    remove_reader = remove_writer = sock_recv = sock_sendall = sock_connect = _no_io
    sock_accept = create_connection = create_server = getaddrinfo = _no_io
    subprocess_exec = subprocess_shell = add_signal_handler = _no_io


def default_engine() -> EngineName:
    """The virtual clock's engine when none is given: ``$TIPEX_ENGINE`` if set, else "sim"."""
    e = os.environ.get("TIPEX_ENGINE", "sim")
    if e not in ENGINES:
        raise ValueError(f"TIPEX_ENGINE={e!r} is not one of {ENGINES}")
    return e  # type: ignore[return-value]


def new_loop(clock: ClockName = "virtual",
             engine: EngineName | None = None) -> asyncio.AbstractEventLoop:
    """A fresh event loop for ``clock`` ("virtual" or "wall"). ``engine`` picks the virtual
    clock's loop: "sim" (:class:`SimEventLoop`, the default) or "asyncio"
    (:class:`VirtualEventLoop`, which also runs real I/O); both give the same schedule."""
    if engine is not None and engine not in ENGINES:
        raise ValueError(f"engine={engine!r} is not one of {ENGINES}")
    if clock == "virtual":
        if (engine or default_engine()) == "sim":
            return SimEventLoop()
        return VirtualEventLoop()
    if clock == "wall":
        return asyncio.new_event_loop()
    raise ValueError(f"clock={clock!r} is not one of {CLOCKS}")


def run(coro: Coroutine[Any, Any, T], clock: ClockName = "virtual",
        engine: EngineName | None = None) -> T:
    """Run ``coro`` to completion on a fresh loop of the given clock (and, for the virtual
    clock, engine) and close the loop."""
    if clock not in CLOCKS or (engine is not None and engine not in ENGINES):
        coro.close()
        if clock not in CLOCKS:
            raise ValueError(f"clock={clock!r} is not one of {CLOCKS}")
        raise ValueError(f"engine={engine!r} is not one of {ENGINES}")
    with asyncio.Runner(loop_factory=lambda: new_loop(clock, engine)) as runner:
        return runner.run(coro)


def now() -> float:
    """The running loop's time (virtual seconds on a ``VirtualEventLoop``)."""
    return asyncio.get_running_loop().time()


def is_virtual() -> bool:
    """Whether the running loop keeps virtual time."""
    return isinstance(asyncio.get_running_loop(), (SimEventLoop, VirtualEventLoop))
