"""A discrete-event engine for TIPEX on the structured fast path: the runner's execution
semantics (N replicas of planner -> DAG (w at a time) -> workers -> synthesizer, plurality /
judge / first-finish, quorum with cancellation, the in-flight limit K, the token budget B, the
per-task timeout tau and the per-call timeout, the same trace events) as Python generators
driven by one heap of (time, sequence, process) and a FIFO of same-time wake-ups. No asyncio:
no task, future, handle or loop step per event.

What is the same as the asyncio runner (``TipexRunner`` with the same structured model): every
call goes through the same model methods in the same order per replica, the budget is reserved
and settled at the same points, K is a FIFO semaphore that hands a freed slot to the first
waiter, a cancelled call is charged nothing, time advances as asyncio's loop advances it
(``now += when - now``, timers less than the clock resolution apart fire together), and a
replica finishing at the instant of a quorum decision is kept. What may differ: the order of
events of *different* processes at the *same* virtual time (asyncio's order follows its timer
heap's shape; here it is FIFO). So the two engines give the same results and the same trace
events (as a multiset; in time order) whenever no two replicas' events coincide, which
``StructuredModel(tie_jitter=...)`` guarantees in the equality tests; with ties and a finite K
(or a budget) which call gets the slot (or the tokens) first may differ, the invariants
(K, budget, w, each subtask once after its parents, timeouts, cancellation) hold on both.

``DesRunner.solve(task, cfg)`` returns the same :class:`~icml_tipex.runner.SolveResult`
(a plain call, not a coroutine); ``run(tasks, cfg)`` solves tasks one after another, each from
time 0 (as ``TipexRunner.run`` does when every task starts at once)."""

from __future__ import annotations

import gc
import itertools
from collections import deque
from collections.abc import Callable, Generator, Mapping, Sequence
from heapq import heappop, heappush
from typing import Any

from icml_tipex.aggregate import (
    Candidate,
    answers_match,
    first_finish,
    max_agreement,
    normalize_answer,
    plurality,
    ranked,
)
from icml_tipex.budget import BudgetExhausted, TokenBudget
from icml_tipex.chat import ModelCallError
from icml_tipex.clock import _RESOLUTION, Deadlock
from icml_tipex.fast import ANSWER, StructuredModel, SyncTool
from icml_tipex.plan import Plan, Subtask
from icml_tipex.runner import ExecutionConfig, PathResult, SolveResult, _respond
from icml_tipex.trace import Trace

assert ANSWER == 1  # subtask() tests `if kind:`
_ACQ, _WAIT, _HANG = object(), object(), object()  # what a process may yield (else a delay)
_NO_PARENTS: Mapping[str, str] = {}  # (never written to)


class _Cancelled(BaseException):
    """Thrown into a process that is cancelled (asyncio's CancelledError, here)."""


class _Timeout(Exception):
    pass


class _Proc:
    """A process: a generator and its scheduling state (class defaults: creation is cheap)."""

    gen: Generator[Any, Any, Any] | None = None
    parent: _Proc | None = None
    tag: Any = None
    fire: Callable[[], None] | None = None
    token = 0
    done = cancelled = granted = waiting_k = waiting = False
    inbox: deque[tuple[Any, Any, BaseException | None]] | None = None

    def __init__(self, gen: Generator[Any, Any, Any] | None, parent: _Proc | None = None,
                 tag: Any = None, fire: Callable[[], None] | None = None) -> None:
        if gen is not None:
            self.gen = gen
        if parent is not None:
            self.parent = parent
        if tag is not None:
            self.tag = tag
        if fire is not None:
            self.fire = fire


Gen = Generator[Any, Any, Any]


class _Fire:
    """A timer's stand-in for a generator: ``send`` runs the callback and ends."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn

    def send(self, _: Any) -> None:
        self.fn()
        raise StopIteration

    def throw(self, exc: BaseException) -> None:
        raise exc


class _Sim:
    """One task's run: the clock, the heap, the ready FIFO, K, the budget and the trace."""

    def __init__(self, runner: DesRunner, task: Any, cfg: ExecutionConfig, trace: bool) -> None:
        self.r, self.model, self.tools = runner, runner.model, runner.tools
        self.task, self.cfg = task, cfg
        self.now = 0.0
        self.heap: list[tuple[float, int, _Proc, int]] = []
        self.ready: deque[tuple[_Proc, int, Any, BaseException | None]] = deque()
        self.seq = itertools.count(1)
        self.stop = False  # set when the replicas' outcome is decided
        self.k_free = cfg.max_inflight
        self.k_waiters: deque[_Proc] = deque()
        self.budget = TokenBudget(cfg.token_budget)
        self.trace = Trace(0.0, task.task_id, trace)
        model, cto = self.model, cfg.call_timeout_s
        # what every worker step reads, gathered once per task
        self.hot = (model, self.trace, self.trace.enabled, cfg.max_tokens, cto,
                    float("inf") if cto is None else cto * (1 - 1e-6),  # only dt near cto or
                    # above needs the exact test t_s + cto <= t_s + dt
                    self.k_free is not None, self.tools, range(cfg.max_worker_steps),
                    cfg.temperature)
        self.general = self.budget.limit is not None  # a worker step takes call()
        self.worker_fault = bool(model.faults) and "worker" in model.faults
        # the worker loop: the lean one where nothing is traced or shared
        self.worker = (self.subtask_lean if not (trace or self.general or self.worker_fault
                                                 or self.k_free is not None)
                       else self.subtask)
        # per replica, the judge (replica -1) last
        self.tokens = [0] * (cfg.n_replicas + 1)
        self.calls = [0] * (cfg.n_replicas + 1)

    # -- the engine -----------------------------------------------------------------------------
    def spawn(self, gen: Gen, parent: _Proc | None = None, tag: Any = None) -> _Proc:
        p = _Proc(gen, parent, tag)
        self.ready.append((p, 0, None, None))
        return p

    def at(self, when: float, fire: Callable[[], None]) -> _Proc:
        """A timer: ``fire()`` at ``when`` (cancel it with ``cancel``)."""
        p = _Proc(_Fire(fire))  # type: ignore[arg-type]
        heappush(self.heap, (when, next(self.seq), p, 0))
        return p

    def _step(self, p: _Proc, value: Any, exc: BaseException | None) -> None:
        try:
            r = p.gen.throw(exc) if exc is not None else p.gen.send(value)  # type: ignore[union-attr]
        except StopIteration as e:
            self._finish(p, e.value, None)
            return
        except BaseException as e:  # noqa: BLE001 - delivered to the parent
            self._finish(p, None, e)
            return
        if r.__class__ is float:
            heappush(self.heap, (self.now + r, next(self.seq), p, p.token))
        else:
            self._yielded(p, r)

    def _yielded(self, p: _Proc, r: Any) -> None:
        if r is _WAIT:
            if p.inbox:
                self.ready.append((p, p.token, None, None))
            else:
                p.waiting = True
        elif r is _ACQ or r is _HANG:
            pass  # woken by release() / only cancellation ends it
        else:
            raise TypeError(f"a process yielded {r!r}")

    def _finish(self, p: _Proc, value: Any, exc: BaseException | None) -> None:
        p.done = True
        if p.cancelled:
            return
        par = p.parent
        if par is None:
            if exc is not None:
                raise exc
            return
        if par.__class__ is _Root:
            par.on_done(p.tag, value, exc)  # type: ignore[attr-defined]
            return
        if par.done:
            return
        par.inbox.append((p.tag, value, exc))  # type: ignore[union-attr]  # (dag() made it)
        if par.waiting:  # the parent resumes now (it waits for exactly this)
            par.waiting = False
            try:
                r = par.gen.send(None)  # type: ignore[union-attr]
            except StopIteration as e:
                self._finish(par, e.value, None)
            except BaseException as e:  # noqa: BLE001 - delivered to its parent
                self._finish(par, None, e)
            else:
                if r.__class__ is float:
                    heappush(self.heap, (self.now + r, next(self.seq), par, par.token))
                else:
                    self._yielded(par, r)

    def cancel(self, p: _Proc) -> None:
        """Cancel ``p`` now: ``_Cancelled`` is thrown into it (its handlers run at once)."""
        if p.done or p.cancelled:
            return
        p.cancelled = True
        p.token += 1  # its pending wake-ups are stale
        p.waiting = False
        if p.waiting_k:
            p.waiting_k = False
            self.k_waiters.remove(p)
        if p.gen is None:
            p.done = True
            return
        self._step(p, None, _Cancelled())

    def release(self) -> None:
        """Free a K slot: the first waiter gets it (FIFO), now."""
        while self.k_waiters:
            w = self.k_waiters.popleft()
            w.waiting_k = False
            w.granted = True
            self.ready.append((w, w.token, None, None))
            return
        self.k_free += 1  # type: ignore[operator]

    def loop(self) -> None:
        """Run until ``self.stop`` is set or nothing is left to run."""
        heap, ready, step, finish, seq = self.heap, self.ready, self._step, self._finish, self.seq
        popleft, pop, push = ready.popleft, heappop, heappush
        res = _RESOLUTION
        while True:
            while ready:
                p, tok, v, e = popleft()
                if p.token == tok and not p.done:
                    step(p, v, e)
            if self.stop or not heap:
                return
            when, _, p, tok = pop(heap)
            if p.token != tok:  # a cancelled timer: dropped without advancing the clock
                continue
            now = self.now
            if when > now:  # asyncio's advance, float for float
                self.now = now = now + (when - now)
            end = now + res
            # every timer due before ``end`` fires now, in order (a delay under the clock
            # resolution joins this batch); the processes it resumes run before the ready
            # FIFO (_step inlined: the hot path)
            while True:
                try:
                    r = p.gen.send(None)  # type: ignore[union-attr]
                except StopIteration as e:
                    finish(p, e.value, None)
                except BaseException as e:  # noqa: BLE001 - delivered to the parent
                    finish(p, None, e)
                else:
                    if r.__class__ is float:
                        push(heap, (now + r, next(seq), p, tok))
                    else:
                        self._yielded(p, r)
                try:
                    if heap[0][0] >= end:
                        break
                except IndexError:  # (nothing left)
                    break
                while heap and heap[0][0] < end:
                    _, _, p, tok = pop(heap)
                    if p.token == tok:
                        break
                else:
                    break

    # -- one model call (TipexRunner._scall) ----------------------------------------------------
    def call(self, proc: _Proc, replica: int, seed: int, role: str, sub: str, est: int,
             respond: Callable[[], tuple[Any, int, float]]) -> Gen:
        cfg, trace = self.cfg, self.trace
        t_q = self.now
        try:
            res = self.budget.reserve(est + cfg.max_tokens)
        except BudgetExhausted as e:
            trace.add("model", replica=replica, subtask=sub, role=role, queued=t_q, start=None,
                      end=None, prompt_tokens=0, completion_tokens=0, status="budget",
                      detail=str(e))
            raise
        ct: int | None = None
        status, detail, t_s = "ok", None, None
        held = False
        try:
            try:
                if self.k_free is not None:
                    if self.k_free > 0 and not self.k_waiters:
                        self.k_free -= 1
                    else:
                        proc.waiting_k = True
                        self.k_waiters.append(proc)
                        yield _ACQ
                        proc.granted = False
                    held = True
                t_s = self.now
                value, n_out, dt = _respond(self.model, role, seed, respond)
                cto = cfg.call_timeout_s
                if dt is None:  # hangs
                    if cto is None:
                        yield _HANG
                    yield float(cto)
                    raise _Timeout
                if cto is not None and t_s + cto <= t_s + dt:
                    yield float(cto)
                    raise _Timeout
                if dt > 0:
                    yield dt
                ct = n_out
            finally:
                if held or proc.granted:
                    proc.granted = False
                    self.release()
            return value
        except _Cancelled:
            status = "cancelled"
            raise
        except _Timeout:
            status = detail = "timeout"
            raise ModelCallError(f"{role} call on {sub!r} timed out after "
                                 f"{cfg.call_timeout_s} s (call_timeout_s)") from None
        except Exception as e:
            status, detail = "error", f"{type(e).__name__}: {e}"
            raise ModelCallError(f"{role} call on {sub!r} raised {detail}") from e
        finally:
            used = est + ct if ct is not None else 0
            self.budget.settle(res, used)
            self.tokens[replica] += used
            self.calls[replica] += 1
            if trace.enabled:
                trace.add("model", replica=replica, subtask=sub, role=role, queued=t_q,
                          start=t_s, end=self.now, prompt_tokens=est,
                          completion_tokens=ct if ct is not None else 0,
                          status=status, detail=detail)

    def tool(self, replica: int, sub: str, name: str, args: list[str]) -> Gen:
        t_s, status = self.now, "ok"
        spec = self.tools.get(name)
        if spec is None:
            status, result = "error", f"error: unknown tool {name!r}"
        else:
            fn, lat = spec
            try:
                result = fn(*args)
            except Exception as e:  # noqa: BLE001 - the worker sees the error
                status, result = "error", f"error: {type(e).__name__}: {e}"
            else:
                if lat > 0:
                    try:
                        yield float(lat)
                    except _Cancelled:
                        self.trace.add("tool", replica=replica, subtask=sub, tool=name,
                                       start=t_s, end=self.now, status="cancelled", args=args)
                        raise
        if self.trace.enabled:
            self.trace.add("tool", replica=replica, subtask=sub, tool=name, start=t_s,
                           end=self.now, status=status, args=args, result=result)
        return result

    # -- one subtask, one DAG, one path -----------------------------------------------------------
    def subtask(self, proc: _Proc, replica: int, seed: int, sub: Subtask,
                parents: Mapping[str, str]) -> Gen:
        """A worker's ReAct loop on ``sub``: ``call`` and ``tool`` inlined (the hot path: the
        same steps in the same order; a budget limit or an injected fault takes ``call``)."""
        model, trace, tracing, mt, cto, near_cto, k_limited, tools, steps, temp = self.hot
        general = self.general or (self.worker_fault and model.fault("worker", seed))
        sid = sub.id
        t = self.now
        w = model.worker_state(self.task, sub, parents, seed, temp)
        work, results, actions, lookups = model.work, w.results, w.actions, w.lookups
        n_actions = len(actions)
        used = n_calls = 0  # this subtask's tokens and calls, added to its replica's at the end
        try:
            for _ in steps:
                if general:
                    kind, value, text = yield from self.call(
                        proc, replica, seed, "worker", sid, w.ctx,
                        lambda: _drop_ct(work(w, mt)))
                else:  # = call(...), inlined
                    est = w.ctx
                    t_q = t_s = self.now
                    ct, status = -1, "ok"
                    try:
                        if k_limited:
                            if self.k_free > 0 and not self.k_waiters:
                                self.k_free -= 1
                            else:
                                proc.waiting_k = True
                                self.k_waiters.append(proc)
                                t_s = None
                                yield _ACQ
                                proc.granted = False
                                t_s = self.now
                        kind, value, text, n_out, dt = work(w, mt)
                        if dt >= near_cto and t_s + cto <= t_s + dt:
                            yield float(cto)
                            status = "timeout"
                            raise ModelCallError(f"worker call on {sid!r} timed out after "
                                                 f"{cto} s (call_timeout_s)")
                        if dt > 0:
                            yield dt
                        ct = n_out
                    except _Cancelled:
                        status = "cancelled"
                        raise
                    finally:  # (no budget limit here: a reservation would be settled at once)
                        if k_limited and (t_s is not None or proc.granted):
                            proc.granted = False
                            self.release()
                        if ct >= 0:
                            used += est + ct
                        n_calls += 1
                        if tracing:
                            trace.add("model", replica=replica, subtask=sid, role="worker",
                                      queued=t_q, start=t_s, end=self.now, prompt_tokens=est,
                                      completion_tokens=ct if ct >= 0 else 0, status=status,
                                      detail="timeout" if status == "timeout" else None)
                if kind:  # ANSWER
                    break
                # = tool(...), inlined
                name, args = value
                if tracing:
                    t_s = self.now
                spec = tools.get(name)
                if spec is None:
                    status, result = "error", f"error: unknown tool {name!r}"
                else:
                    status = "ok"
                    fn, lat = spec
                    try:
                        result = fn(*args)
                    except Exception as e:  # noqa: BLE001 - the worker sees the error
                        status, result = "error", f"error: {type(e).__name__}: {e}"
                    else:
                        if lat > 0:
                            try:
                                yield lat
                            except _Cancelled:
                                if tracing:
                                    trace.add("tool", replica=replica, subtask=sid,
                                              tool=name, start=t_s, end=self.now,
                                              status="cancelled", args=args)
                                raise
                if tracing:
                    trace.add("tool", replica=replica, subtask=sid, tool=name, start=t_s,
                              end=self.now, status=status, args=args, result=result)
                # = w.observe(text, result), inlined
                r = result.strip()
                results.append(r)
                nr = len(results)
                if nr <= n_actions and lookups[nr - 1] >= 0:  # a lookup: its fact's value
                    w.values[lookups[nr - 1]] = r
                w.ctx += ((len(text) + 3) >> 2 or 1) + ((len(result) + 11) >> 2) + 6
            else:
                raise RuntimeError(f"worker on subtask {sid!r} made {len(steps)} model calls "
                                   "without an ANSWER (raise max_worker_steps)")
        finally:
            self.tokens[replica] += used
            self.calls[replica] += n_calls
        if tracing:
            trace.add("subtask", replica=replica, subtask=sid, start=t, end=self.now,
                      deps=list(sub.deps), result=value)
        return value

    def subtask_lean(self, proc: _Proc, replica: int, seed: int, sub: Subtask,
                     parents: Mapping[str, str]) -> Gen:
        """``subtask`` where nothing is traced or shared (no trace, K = none, no budget, no
        fault): the same calls, tools, times, tokens and errors, with the bookkeeping that only
        the trace, K or the budget read left out."""
        model, _, _, mt, cto, near_cto, _, tools, steps, temp = self.hot
        w = model.worker_state(self.task, sub, parents, seed, temp)
        work, results, lookups = model.work, w.results, w.lookups
        n_actions = len(lookups)
        used = 0  # this subtask's tokens, added to its replica's at the end (and its calls:
        spent = True  # one per tool result, plus the call that answered or was cut)
        try:
            for _ in steps:
                est = w.ctx
                kind, value, text, n_out, dt = work(w, mt)
                if dt >= near_cto and self.now + cto <= self.now + dt:
                    yield float(cto)
                    raise ModelCallError(f"worker call on {sub.id!r} timed out after "
                                         f"{cto} s (call_timeout_s)")
                if dt > 0:
                    yield dt
                used += est + n_out
                if kind:  # ANSWER
                    break
                name, args = value
                spec = tools.get(name)
                if spec is None:
                    result = f"error: unknown tool {name!r}"
                else:
                    fn, lat = spec
                    try:
                        result = fn(*args)
                    except Exception as e:  # noqa: BLE001 - the worker sees the error
                        result = f"error: {type(e).__name__}: {e}"
                    else:
                        if lat > 0:
                            yield lat
                r = result.strip()
                results.append(r)
                nr = len(results)
                if nr <= n_actions:
                    li = lookups[nr - 1]
                    if li >= 0:  # a lookup: its fact's value
                        w.values[li] = r
                # (a CALL reply is never empty: no "or 1" for its tokens)
                w.ctx += ((len(text) + 3) >> 2) + ((len(result) + 11) >> 2) + 6
            else:
                spent = False
                raise RuntimeError(f"worker on subtask {sub.id!r} made {len(steps)} model "
                                   "calls without an ANSWER (raise max_worker_steps)")
        finally:
            self.tokens[replica] += used
            self.calls[replica] += len(results) + spent
        return value

    def _subtask_proc(self, replica: int, seed: int, sub: Subtask,
                      parents: Mapping[str, str]) -> _Proc:
        p = _Proc(None)
        p.gen = self.subtask(p, replica, seed, sub, parents)
        return p

    def dag(self, proc: _Proc, replica: int, seed: int, plan: Plan) -> Gen:
        """``scheduler.run_dag``: ready subtasks start FIFO, at most w at once."""
        width = self.cfg.width
        shape = self.r._shapes.get(id(plan))
        if shape is None or shape[0] is not plan:  # the plan's structure, once per plan
            if len(self.r._shapes) >= 4096:
                self.r._shapes.clear()
            shape = self.r._shapes[id(plan)] = (
                plan, {s.id: s for s in plan.subtasks}, plan.children(),
                {s.id: len(s.deps) for s in plan.subtasks},
                [s.id for s in plan.subtasks if not s.deps])
        _, by_id, children, missing, initial = shape
        missing = dict(missing)
        ready = deque(initial)
        running: dict[str, _Proc] = {}
        results: dict[str, str] = {}
        if proc.inbox is None:
            proc.inbox = deque()
        inbox = proc.inbox
        new, subtask, heap, seq = object.__new__, self.worker, self.heap, self.seq
        try:
            while ready or running:
                while ready and len(running) < width:
                    v = ready.popleft()
                    sub = by_id[v]
                    c = new(_Proc)
                    c.parent, c.tag = proc, v
                    c.gen = subtask(c, replica, seed, sub, {u: results[u] for u in sub.deps}
                                    if sub.deps else _NO_PARENTS)
                    running[v] = c
                    try:  # it starts now, up to its first wait (= self._step(c, ...))
                        r = c.gen.send(None)
                    except StopIteration as e:
                        self._finish(c, e.value, None)
                    except BaseException as e:  # noqa: BLE001 - delivered to this loop
                        self._finish(c, None, e)
                    else:
                        if r.__class__ is float:
                            heappush(heap, (self.now + r, next(seq), c, 0))
                        else:
                            self._yielded(c, r)
                if not inbox:
                    yield _WAIT
                v, value, exc = inbox.popleft()
                del running[v]
                if exc is not None:
                    raise exc
                results[v] = value
                for ch in children[v]:
                    missing[ch] -= 1
                    if missing[ch] == 0:
                        ready.append(ch)
        finally:
            for c in list(running.values()):
                self.cancel(c)
        return results

    def path(self, proc: _Proc, replica: int) -> Gen:
        """``TipexRunner._run_path_structured``."""
        cfg, task, model, trace = self.cfg, self.task, self.model, self.trace
        seed, temp, mt = cfg.replica_seed(replica), cfg.temperature, cfg.max_tokens
        tracing = trace.enabled
        if tracing:
            trace.add("path_start", replica=replica, t=self.now, seed=seed)
        answer, status, error = None, "ok", None
        try:
            if cfg.planner == "chain":
                answer = yield from self.worker(proc, replica, seed, model.agent_subtask(task),
                                                {})
            else:
                g, tools = cfg.granularity, self.r.tool_names
                pt = model.plan_tokens(task, g)
                plan = yield from self.call(proc, replica, seed, "planner", "plan", pt,
                                            lambda: model.plan(task, g, tools, seed, temp, mt,
                                                               pt))
                if isinstance(plan, Exception):
                    raise plan
                if trace.enabled:
                    trace.add("plan", replica=replica, t=self.now, width=plan.width(),
                              subtasks=[s.to_dict() for s in plan.subtasks])
                results = yield from self.dag(proc, replica, seed, plan)
                ordered, final, pt = model.synth_inputs(task, plan, results)
                answer = yield from self.call(
                    proc, replica, seed, "synthesizer", "synth", pt,
                    lambda: model.synth(task, ordered, final, seed, temp, mt, pt))
        except _Cancelled:
            trace.add("path", replica=replica, t=self.now, status="cancelled")
            raise
        except Exception as e:  # noqa: BLE001 - one failing replica never takes down the others
            status, error = "error", f"{type(e).__name__}: {e}"
        if tracing:
            trace.add("path", replica=replica, t=self.now, status=status, answer=answer,
                      error=error)
        return PathResult(replica, answer, self.now - 0.0, self.tokens[replica],
                          self.calls[replica], status, error)

    def judge(self, proc: _Proc, cands: Sequence[Candidate], out: list[Any]) -> Gen:
        """``TipexRunner._judge`` on the structured path; the answer goes to ``out``."""
        r = ranked(cands)
        answers, votes = [x[2].answer or "" for x in r], [x[1] for x in r]
        jm, cfg, task = self.r.judge_model, self.cfg, self.task
        try:
            pt = jm.judge_tokens(task, answers, votes)
            k = yield from self.call(proc, -1, cfg.seed, "judge", "judge", pt, lambda: jm.judge(
                task, answers, votes, cfg.seed, cfg.temperature, cfg.max_tokens, pt))
        except (ModelCallError, BudgetExhausted) as e:
            self.trace.add("judge_fallback", t=self.now, detail=str(e))
            k = None
        if k is None:
            self.trace.add("judge_fallback", t=self.now, detail="no valid CHOICE; plurality used")
            out.append(plurality(cands))
        else:
            out.append(answers[k])

    # -- replicas and aggregation ---------------------------------------------------------------
    def solve(self) -> SolveResult:
        cfg, task, trace = self.cfg, self.task, self.trace
        n = cfg.n_replicas
        finished: list[PathResult] = []
        late: list[PathResult] = []
        state: dict[str, str | None] = {"decided": None}
        procs: list[_Proc] = []

        def done(i: int, value: Any, exc: BaseException | None) -> None:
            if exc is not None:
                raise exc
            if state["decided"] is not None:  # finished at the instant of the decision: kept
                late.append(value)
                return
            finished.append(value)
            if cfg.quorum and max_agreement([Candidate(p.replica, p.answer, p.finish)
                                             for p in finished]) >= cfg.quorum:
                state["decided"] = "quorum"
                self.stop = True
            elif cfg.aggregator == "first" and normalize_answer(value.answer) is not None:
                state["decided"] = "first"
                self.stop = True
            elif len(finished) == n:
                state["decided"] = "all"
                self.stop = True

        root = _Root(done)
        for i in range(n):
            p = _Proc(None, root, i)
            p.gen = self.path(p, i)
            procs.append(p)
            self.ready.append((p, 0, None, None))
        timer = None
        if cfg.timeout_s is not None:
            def on_timeout() -> None:
                if state["decided"] is None:
                    state["decided"] = "timeout"
                    self.stop = True
            timer = self.at(self.now + cfg.timeout_s, on_timeout)
        self.loop()
        decided = state["decided"]
        if decided is None:
            raise Deadlock("nothing is ready and no timer is pending: a call hangs with no "
                           "call_timeout_s or timeout_s to end it")
        if timer is not None:
            timer.token += 1
        for p in procs:
            if not p.done:
                self.cancel(p)
        finished += late
        got = {p.replica for p in finished}
        stopped = "timeout" if decided == "timeout" else "cancelled"
        replicas = sorted(finished + [PathResult(i, None, self.now - 0.0, self.tokens[i],
                                                 self.calls[i], stopped)
                                      for i in range(n) if i not in got],
                          key=lambda p: p.replica)
        cands = [Candidate(p.replica, p.answer, p.finish) for p in finished]
        if cfg.aggregator == "first":
            answer = first_finish(cands)
        elif cfg.aggregator == "judge":
            if len(ranked(cands)) <= 1:
                r = ranked(cands)
                answer = r[0][2].answer if r else None
            else:
                out: list[Any] = []
                jp = _Proc(None, None, "judge")
                jp.gen = self.judge(jp, cands, out)
                self.ready.append((jp, 0, None, None))
                self.stop = False
                self.loop()
                if not jp.done:
                    raise Deadlock("the judge call hangs with no call_timeout_s to end it")
                answer = out[0]
        else:
            answer = plurality(cands)
        if trace.enabled:
            trace.add("decision", t=self.now, by=decided, answer=answer,
                      votes=[[k, c] for k, c, _ in ranked(cands)])
        correct = answers_match(answer, task.answer) if getattr(task, "answer", None) else None
        if self.budget.limit is None:  # the inlined worker calls add to tokens only
            self.budget.spent = sum(self.tokens)
        return SolveResult(task.task_id, answer, self.now - 0.0, self.budget.spent,
                           sum(self.calls), decided, replicas, trace, correct)


class _Root(_Proc):
    """The parent of the replicas: their outcomes go to the aggregation, as they finish."""

    __slots__ = ("on_done",)

    def __init__(self, on_done: Callable[[int, Any, BaseException | None], None]) -> None:
        super().__init__(None)
        self.on_done = on_done


def _drop_ct(r: tuple[int, Any, str, int, float]) -> tuple[tuple[int, Any, str], int, float]:
    return (r[0], r[1], r[2]), r[3], r[4]


class DesRunner:
    """``TipexRunner`` on the discrete-event engine, for structured simulated models
    (:class:`~icml_tipex.fast.StructuredModel`) and synchronous tools (name -> (function,
    latency s), e.g. :func:`~icml_tipex.fast.sync_tools`)."""

    def __init__(self, model: StructuredModel, tools: Mapping[str, SyncTool], *,
                 judge_model: StructuredModel | None = None) -> None:
        for m in (model, judge_model):
            if m is not None and not getattr(m, "structured", False):
                raise ValueError(f"model {getattr(m, 'name', m)!r} is not a structured model: "
                                 "the discrete-event engine runs StructuredModel only (use "
                                 "TipexRunner for text models)")
        if not tools:
            raise ValueError("tools is empty: the workers need at least one tool")
        for name, spec in tools.items():
            if not (isinstance(spec, tuple) and len(spec) == 2 and callable(spec[0])):
                raise ValueError(f"tools[{name!r}] must be (function, latency s), as "
                                 "fast.sync_tools gives")
        self.model = model
        self.tools = {k: (fn, float(lat)) for k, (fn, lat) in tools.items()}
        self.tool_names = tuple(self.tools)
        self._shapes: dict[int, tuple[Any, ...]] = {}
        self.judge_model = judge_model or model

    def solve(self, task: Any, cfg: ExecutionConfig, *, trace: bool = True) -> SolveResult:
        """Solve one task under ``cfg``, from time 0."""
        return _Sim(self, task, cfg, trace).solve()

    def run(self, tasks: Sequence[Any], cfg: ExecutionConfig, *, trace: bool = False,
            shared_inflight: int | None = None) -> list[SolveResult]:
        """Solve ``tasks`` one after another (each from time 0; results do not depend on the
        order). A K shared across tasks (``shared_inflight``) needs the asyncio runner."""
        if shared_inflight is not None:
            raise ValueError("shared_inflight: the discrete-event engine runs tasks one at a "
                             "time; a K shared across tasks needs TipexRunner")
        # the cyclic GC is paused during the run (generators and their frames are short-lived
        # cycles it would scan over and over; about 5% of the run); results do not depend on it
        was = gc.isenabled()
        gc.disable()
        try:
            return [_Sim(self, t, cfg, trace).solve() for t in tasks]
        finally:
            if was:
                gc.enable()
