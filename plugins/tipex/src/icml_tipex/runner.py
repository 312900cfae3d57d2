"""TIPEX's execution semantics: N replicas (tier 1) of planner -> subtask DAG -> workers ->
synthesizer (tier 2, width w, granularity g), aggregated by plurality, judge or first-finish,
with quorum early stop, a global in-flight limit K on model calls, a token budget B and
timeouts, all traced."""

from __future__ import annotations

import asyncio
from asyncio.futures import _set_result_unless_cancelled
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from icml_tipex import roles
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
from icml_tipex.chat import AsyncChatModel, Completion, Message, ModelCallError, messages_tokens
from icml_tipex.clock import CLOCKS, ENGINES, ClockName, EngineName, is_virtual
from icml_tipex.clock import run as run_on_clock
from icml_tipex.config import ExecutionSettings
from icml_tipex.fast import ANSWER, InjectedFault
from icml_tipex.plan import Plan, Subtask
from icml_tipex.scheduler import run_dag
from icml_tipex.trace import Trace

Tool = Callable[..., Awaitable[str]]
PLANNERS = ("dag", "chain")


def _drop_ct(r: tuple[int, Any, str, int, float]) -> tuple[tuple[int, Any, str], int, float]:
    return (r[0], r[1], r[2]), r[3], r[4]


def _respond(model: Any, role: str, seed: int, respond: Callable[[], tuple[Any, int, float]]
             ) -> tuple[Any, int, float | None]:
    """The structured reply, or the fault injected on this call (latency None: it hangs)."""
    f = model.fault(role, seed) if model.faults else None
    if f == "raise":
        raise InjectedFault(f"injected failure ({role})")
    if f == "hang":
        return None, 0, None
    return respond()


@dataclass
class ExecutionConfig(ExecutionSettings):
    """One point of the two-tier design space ``(N, w, g, aggregator, q, K, B, tau, T)``: the
    shared :class:`~icml_tipex.config.ExecutionSettings` (g, aggregator, q, K, B, tau, T, ...;
    the ``execution.*`` config section) plus the point itself: ``n_replicas`` (N), ``width``
    (w), ``planner`` and ``seed``. :meth:`from_config` builds one from a config section."""

    n_replicas: int = 1
    width: int = 1
    planner: str = "dag"
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()

        def bad(key: str, msg: str) -> ValueError:
            return ValueError(f"{key}={getattr(self, key)!r}: {msg}")
        if self.n_replicas < 1:
            raise bad("n_replicas", "at least one replica is needed (N >= 1)")
        if self.width < 1:
            raise bad("width", "at least one subtask must be able to run (w >= 1)")
        if self.planner not in PLANNERS:
            raise bad("planner", f"choose one of {PLANNERS}")
        if self.quorum is not None and not 1 <= self.quorum <= self.n_replicas:
            raise bad("quorum", f"must be in 1..n_replicas ({self.n_replicas}) or None")

    @classmethod
    def from_config(cls, settings: ExecutionSettings, **point: Any) -> ExecutionConfig:
        """The config of the design point ``point`` (``n_replicas``, ``width``, ``planner``,
        ``seed``, or any setting to override) with ``settings``' execution settings."""
        own = {f.name: getattr(settings, f.name) for f in fields(ExecutionSettings)}
        return cls(**{**own, **point})

    def replica_seed(self, i: int) -> int:
        return self.seed * 1_000_003 + i if self.replica_seeds else self.seed


@dataclass
class PathResult:
    """One replica's outcome: ``status`` ok, error, cancelled or timeout."""

    replica: int
    answer: str | None
    finish: float
    tokens: int
    calls: int
    status: str
    error: str | None = None


@dataclass
class SolveResult:
    """The aggregated answer with its latency (makespan, s), tokens and the full trace."""

    task_id: str
    answer: str | None
    latency_s: float
    tokens: int
    calls: int
    decided_by: str
    replicas: list[PathResult]
    trace: Trace
    correct: bool | None = None


@dataclass
class _State:
    task: Any
    cfg: ExecutionConfig
    sem: asyncio.Semaphore | None
    budget: TokenBudget
    trace: Trace
    tokens: dict[int, int] = field(default_factory=dict)
    calls: dict[int, int] = field(default_factory=dict)
    inflight: int = 0
    max_inflight_seen: int = 0
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.get_running_loop)
    shared: asyncio.Semaphore | None = None  # a K shared with other tasks (solve_many)


class _CallTimeout:
    """What ``asyncio.timeout(delay)`` does around one model call, with the same loop calls in
    the same order (``call_at`` on entry, ``cancel`` on exit, ``task.cancel`` when it fires,
    ``uncancel`` after it fired) but without the context manager's coroutines and state enum:
    the virtual clock's schedule, and so every trace, is unchanged."""

    __slots__ = ("task", "cancelling", "handle", "fired")

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a call timeout needs a running task")
        self.task, self.cancelling, self.fired = task, task.cancelling(), False
        when = loop.time() + delay
        self.handle: asyncio.Handle | None = (
            loop.call_at(when, self._on_timeout) if when > loop.time()
            else loop.call_soon(self._on_timeout))

    def _on_timeout(self) -> None:
        self.task.cancel()
        self.fired = True
        self.handle = None

    def exit(self) -> bool:
        """Leave the guarded block; True if a CancelledError there is this timeout's."""
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        if self.fired:
            self.fired = False
            return self.task.uncancel() <= self.cancelling
        return False


class TipexRunner:
    """Runs tasks (objects with ``task_id``, ``question`` and optionally ``answer``) under an
    :class:`ExecutionConfig` with one model behind the planner, workers and synthesizer, and
    an optional separate judge model."""

    def __init__(self, model: AsyncChatModel, tools: Mapping[str, Tool], *,
                 judge_model: AsyncChatModel | None = None, clock: ClockName = "virtual",
                 engine: EngineName | None = None) -> None:
        if clock not in CLOCKS:
            raise ValueError(f"clock={clock!r} is not one of {CLOCKS}")
        if engine is not None and engine not in ENGINES:
            raise ValueError(f"engine={engine!r} is not one of {ENGINES} (the virtual clock's "
                             "event loop; None: $TIPEX_ENGINE or 'sim')")
        self.engine = engine
        if not tools:
            raise ValueError("tools is empty: the workers need at least one tool")
        self.model, self.tools, self.clock = model, dict(tools), clock
        self.judge_model = judge_model or model

    # -- the shared controls around every model call ------------------------------------------
    async def _call(self, st: _State, replica: int, seed: int, role: str, sub: str,
                    messages: list[Message], model: AsyncChatModel | None = None) -> Completion:
        model = model or self.model
        cfg, loop, trace = st.cfg, st.loop, st.trace
        count = getattr(model, "count_tokens", None)
        est = count(messages) if count else messages_tokens(messages)
        t_q = loop.time()
        try:
            res = st.budget.reserve(est + cfg.max_tokens)
        except BudgetExhausted as e:
            trace.add("model", replica=replica, subtask=sub, role=role, queued=t_q, start=None,
                      end=None, prompt_tokens=0, completion_tokens=0, status="budget",
                      detail=str(e))
            raise
        comp: Completion | None = None
        status, detail, t_s = "ok", None, None
        sem, shared = st.sem, st.shared
        try:
            if sem is not None:
                await sem.acquire()
            if shared is not None:
                try:
                    await shared.acquire()
                except BaseException:
                    if sem is not None:
                        sem.release()
                    raise
            try:
                t_s = loop.time()
                st.inflight += 1
                if st.inflight > st.max_inflight_seen:
                    st.max_inflight_seen = st.inflight
                cto = cfg.call_timeout_s
                if cto is None:
                    comp = await model.generate(messages, temperature=cfg.temperature,
                                                seed=seed, max_tokens=cfg.max_tokens)
                else:  # ``async with asyncio.timeout(cto)``, the same loop calls, inlined
                    guard = _CallTimeout(loop, cto)
                    try:
                        comp = await model.generate(messages, temperature=cfg.temperature,
                                                    seed=seed, max_tokens=cfg.max_tokens)
                    except asyncio.CancelledError as e:
                        if guard.exit():
                            raise TimeoutError from e
                        raise
                    except BaseException:
                        guard.exit()
                        raise
                    guard.exit()
            finally:
                st.inflight -= 1
                if shared is not None:
                    shared.release()
                if sem is not None:
                    sem.release()
            return comp
        except asyncio.CancelledError:
            status = "cancelled"
            raise
        except TimeoutError:
            status = detail = "timeout"
            raise ModelCallError(f"{role} call on {sub!r} timed out after "
                                 f"{cfg.call_timeout_s} s (call_timeout_s)") from None
        except Exception as e:
            status, detail = "error", f"{type(e).__name__}: {e}"
            raise ModelCallError(f"{role} call on {sub!r} raised {detail}") from e
        finally:
            used = comp.total_tokens if comp is not None else 0
            st.budget.settle(res, used)
            st.tokens[replica] = st.tokens.get(replica, 0) + used
            st.calls[replica] = st.calls.get(replica, 0) + 1
            if trace.enabled:
                trace.add("model", replica=replica, subtask=sub, role=role, queued=t_q,
                          start=t_s, end=loop.time(),
                          prompt_tokens=comp.prompt_tokens if comp else est,
                          completion_tokens=comp.completion_tokens if comp else 0,
                          status=status, detail=detail)

    async def _scall(self, st: _State, replica: int, seed: int, role: str, sub: str, est: int,
                     respond: Callable[[], tuple[Any, int, float]]) -> Any:
        """``_call`` on the structured fast path: the same limits, budget, timeout and trace,
        in the same order; ``respond()`` is the model's reply (value, completion tokens,
        latency), slept on the loop clock as ``ScriptedModel.generate`` does."""
        cfg, loop, trace = st.cfg, st.loop, st.trace
        t_q = loop.time()
        try:
            res = st.budget.reserve(est + cfg.max_tokens)
        except BudgetExhausted as e:
            trace.add("model", replica=replica, subtask=sub, role=role, queued=t_q, start=None,
                      end=None, prompt_tokens=0, completion_tokens=0, status="budget",
                      detail=str(e))
            raise
        ct: int | None = None
        status, detail, t_s = "ok", None, None
        sem, shared = st.sem, st.shared
        try:
            if sem is not None:
                await sem.acquire()
            if shared is not None:
                try:
                    await shared.acquire()
                except BaseException:
                    if sem is not None:
                        sem.release()
                    raise
            try:
                t_s = loop.time()
                st.inflight += 1
                if st.inflight > st.max_inflight_seen:
                    st.max_inflight_seen = st.inflight
                cto = cfg.call_timeout_s
                guard = _CallTimeout(loop, cto) if cto is not None else None
                try:
                    value, n_out, dt = _respond(self.model, role, seed, respond)
                    fut = loop.create_future()
                    h = (loop.call_later(dt, _set_result_unless_cancelled, fut, None)
                         if dt is not None else None)
                    try:
                        if dt is None or dt > 0:
                            await fut
                    finally:
                        if h is not None:
                            h.cancel()
                    ct = n_out
                except asyncio.CancelledError as e:
                    if guard is not None and guard.exit():
                        raise TimeoutError from e
                    raise
                except BaseException:
                    if guard is not None:
                        guard.exit()
                    raise
                if guard is not None:
                    guard.exit()
            finally:
                st.inflight -= 1
                if shared is not None:
                    shared.release()
                if sem is not None:
                    sem.release()
            return value
        except asyncio.CancelledError:
            status = "cancelled"
            raise
        except TimeoutError:
            status = detail = "timeout"
            raise ModelCallError(f"{role} call on {sub!r} timed out after "
                                 f"{cfg.call_timeout_s} s (call_timeout_s)") from None
        except Exception as e:
            status, detail = "error", f"{type(e).__name__}: {e}"
            raise ModelCallError(f"{role} call on {sub!r} raised {detail}") from e
        finally:
            used = est + ct if ct is not None else 0
            st.budget.settle(res, used)
            st.tokens[replica] = st.tokens.get(replica, 0) + used
            st.calls[replica] = st.calls.get(replica, 0) + 1
            if trace.enabled:
                trace.add("model", replica=replica, subtask=sub, role=role, queued=t_q,
                          start=t_s, end=loop.time(), prompt_tokens=est,
                          completion_tokens=ct if ct is not None else 0,
                          status=status, detail=detail)

    async def _tool(self, st: _State, replica: int, sub: str, name: str, text: str,
                    args: list[str]) -> str:
        loop = st.loop
        t_s = loop.time()
        status = "ok"
        fn = self.tools.get(name)
        if fn is None:
            status, result = "error", f"error: unknown tool {name!r}"
        else:
            try:
                result = await fn(*args)
            except asyncio.CancelledError:
                st.trace.add("tool", replica=replica, subtask=sub, tool=name, start=t_s,
                             end=loop.time(), status="cancelled", args=args)
                raise
            except Exception as e:  # the worker sees the error, as in real agent frameworks
                status, result = "error", f"error: {type(e).__name__}: {e}"
        if st.trace.enabled:
            st.trace.add("tool", replica=replica, subtask=sub, tool=name, start=t_s,
                         end=loop.time(), status=status, args=args, result=result)
        return result

    # -- one solution path (tier 2) -----------------------------------------------------------
    async def _run_path(self, st: _State, replica: int) -> PathResult:
        if getattr(self.model, "structured", False):
            return await self._run_path_structured(st, replica)
        cfg, task, loop = st.cfg, st.task, asyncio.get_running_loop()
        seed = cfg.replica_seed(replica)

        def call(role: str, sub: str, messages: list[Message]) -> Awaitable[Completion]:
            return self._call(st, replica, seed, role, sub, messages)

        def tool(sub: str, name: str, text: str, args: list[str]) -> Awaitable[str]:
            return self._tool(st, replica, sub, name, text, args)

        trace = st.trace

        async def run_subtask(sub: Subtask, parents: Mapping[str, str]) -> str:
            t = loop.time()
            out = await roles.work(call, tool, self.tools, task.task_id, task.question, sub,
                                   parents, cfg.max_worker_steps)
            if trace.enabled:
                trace.add("subtask", replica=replica, subtask=sub.id, start=t,
                          end=loop.time(), deps=list(sub.deps), result=out)
            return out

        trace.add("path_start", replica=replica, t=loop.time(), seed=seed)
        answer, status, error = None, "ok", None
        try:
            if cfg.planner == "chain":
                agent = Subtask("agent", task.question, meta={"step": "all"})
                answer = await run_subtask(agent, {})
            else:
                plan: Plan = await roles.plan(call, task.task_id, task.question,
                                              cfg.granularity, self.tools)
                if trace.enabled:  # (the DAG width is not free)
                    trace.add("plan", replica=replica, t=loop.time(), width=plan.width(),
                              subtasks=[s.to_dict() for s in plan.subtasks])
                results = await run_dag(plan, run_subtask, cfg.width)
                answer = await roles.synthesize(call, task.task_id, task.question, plan, results)
        except asyncio.CancelledError:
            st.trace.add("path", replica=replica, t=loop.time(), status="cancelled")
            raise
        except Exception as e:  # noqa: BLE001 - one failing replica never takes down the others
            status, error = "error", f"{type(e).__name__}: {e}"
        st.trace.add("path", replica=replica, t=loop.time(), status=status, answer=answer,
                     error=error)
        return PathResult(replica, answer, loop.time() - st.trace.t0, st.tokens.get(replica, 0),
                          st.calls.get(replica, 0), status, error)

    async def _run_path_structured(self, st: _State, replica: int) -> PathResult:
        """``_run_path`` on the structured fast path: the model gets (task, role, subtask,
        step, replica seed) and no prompt is rendered; the same events in the same order."""
        cfg, task, loop, trace = st.cfg, st.task, st.loop, st.trace
        model: Any = self.model
        seed, temp, mt = cfg.replica_seed(replica), cfg.temperature, cfg.max_tokens

        async def run_subtask(sub: Subtask, parents: Mapping[str, str]) -> str:
            t = loop.time()
            w = model.worker_state(task, sub, parents, seed, temp)
            for _ in range(cfg.max_worker_steps):
                kind, value, text = await self._scall(
                    st, replica, seed, "worker", sub.id, w.ctx,
                    lambda: _drop_ct(model.work(w, mt)))
                if kind == ANSWER:
                    break
                result = await self._tool(st, replica, sub.id, value[0], text, value[1])
                w.observe(text, result)
            else:
                raise RuntimeError(f"worker on subtask {sub.id!r} made {cfg.max_worker_steps} "
                                   "model calls without an ANSWER (raise max_worker_steps)")
            if trace.enabled:
                trace.add("subtask", replica=replica, subtask=sub.id, start=t,
                          end=loop.time(), deps=list(sub.deps), result=value)
            return value

        trace.add("path_start", replica=replica, t=loop.time(), seed=seed)
        answer, status, error = None, "ok", None
        try:
            if cfg.planner == "chain":
                answer = await run_subtask(model.agent_subtask(task), {})
            else:
                g, tools = cfg.granularity, tuple(self.tools)
                pt = model.plan_tokens(task, g)
                plan = await self._scall(st, replica, seed, "planner", "plan", pt,
                                         lambda: model.plan(task, g, tools, seed, temp, mt, pt))
                if isinstance(plan, Exception):
                    raise plan
                if trace.enabled:
                    trace.add("plan", replica=replica, t=loop.time(), width=plan.width(),
                              subtasks=[s.to_dict() for s in plan.subtasks])
                results = await run_dag(plan, run_subtask, cfg.width)
                ordered, final, pt = model.synth_inputs(task, plan, results)
                answer = await self._scall(
                    st, replica, seed, "synthesizer", "synth", pt,
                    lambda: model.synth(task, ordered, final, seed, temp, mt, pt))
        except asyncio.CancelledError:
            st.trace.add("path", replica=replica, t=loop.time(), status="cancelled")
            raise
        except Exception as e:  # noqa: BLE001 - one failing replica never takes down the others
            status, error = "error", f"{type(e).__name__}: {e}"
        st.trace.add("path", replica=replica, t=loop.time(), status=status, answer=answer,
                     error=error)
        return PathResult(replica, answer, loop.time() - st.trace.t0, st.tokens.get(replica, 0),
                          st.calls.get(replica, 0), status, error)

    # -- replicas and aggregation (tier 1) ----------------------------------------------------
    async def solve(self, task: Any, cfg: ExecutionConfig, *, trace: bool = True,
                    shared_limit: asyncio.Semaphore | None = None) -> SolveResult:
        """Solve one task under ``cfg`` on the running loop's clock. ``shared_limit``: a
        semaphore every model call also holds, shared with other tasks solved at the same
        time (a K across tasks, on top of the task's own ``cfg.max_inflight``)."""
        if is_virtual() and not getattr(self.model, "virtual_time", False):
            raise ValueError(f"model {getattr(self.model, 'name', self.model)!r} does real work, "
                             "which takes no time on the virtual clock: use clock='wall'")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        st = _State(task, cfg, asyncio.Semaphore(cfg.max_inflight) if cfg.max_inflight else None,
                    TokenBudget(cfg.token_budget), Trace(t0, task.task_id, trace),
                    shared=shared_limit)
        futs = {asyncio.ensure_future(self._run_path(st, i)): i for i in range(cfg.n_replicas)}
        finished: list[PathResult] = []
        decided = "all"
        try:
            async with asyncio.timeout(cfg.timeout_s):
                for fut in asyncio.as_completed(futs):
                    r = await fut
                    finished.append(r)
                    cands = [Candidate(p.replica, p.answer, p.finish) for p in finished]
                    if cfg.quorum and max_agreement(cands) >= cfg.quorum:
                        decided = "quorum"
                        break
                    if cfg.aggregator == "first" and normalize_answer(r.answer) is not None:
                        decided = "first"
                        break
        except TimeoutError:
            decided = "timeout"
        finally:
            pending = [f for f in futs if not f.done()]
            for f in pending:
                f.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        got = {p.replica for p in finished}
        for f, i in futs.items():  # replicas that finished at the very instant of the decision
            if i not in got and f.done() and not f.cancelled() and f.exception() is None:
                finished.append(f.result())
                got.add(i)
        stopped = "timeout" if decided == "timeout" else "cancelled"
        replicas = sorted(finished + [PathResult(i, None, loop.time() - t0, st.tokens.get(i, 0),
                                                 st.calls.get(i, 0), stopped)
                                      for i in range(cfg.n_replicas) if i not in got],
                          key=lambda p: p.replica)
        cands = [Candidate(p.replica, p.answer, p.finish) for p in finished]
        if cfg.aggregator == "first":
            answer = first_finish(cands)
        elif cfg.aggregator == "judge":
            answer = await self._judge(st, cands)
        else:
            answer = plurality(cands)
        if st.trace.enabled:
            st.trace.add("decision", t=loop.time(), by=decided, answer=answer,
                         votes=[[k, n] for k, n, _ in ranked(cands)])
        correct = answers_match(answer, task.answer) if getattr(task, "answer", None) else None
        return SolveResult(task.task_id, answer, loop.time() - t0, st.budget.spent,
                           sum(st.calls.values()), decided, replicas, st.trace, correct)

    async def _judge(self, st: _State, cands: Sequence[Candidate]) -> str | None:
        r = ranked(cands)
        if len(r) <= 1:  # nothing to choose between
            return r[0][2].answer if r else None
        answers, votes = [x[2].answer or "" for x in r], [x[1] for x in r]
        jm: Any = self.judge_model
        try:
            if getattr(jm, "structured", False):
                cfg = st.cfg
                pt = jm.judge_tokens(st.task, answers, votes)
                k = await self._scall(st, -1, cfg.seed, "judge", "judge", pt, lambda: jm.judge(
                    st.task, answers, votes, cfg.seed, cfg.temperature, cfg.max_tokens, pt))
            else:
                msgs = roles.judge_messages(st.task.task_id, st.task.question, answers, votes)
                c = await self._call(st, -1, st.cfg.seed, "judge", "judge", msgs,
                                     self.judge_model)
                k = roles.parse_choice(c.text, len(answers))
        except (ModelCallError, BudgetExhausted) as e:
            st.trace.add("judge_fallback", t=asyncio.get_running_loop().time(), detail=str(e))
            k = None
        if k is None:
            st.trace.add("judge_fallback", t=asyncio.get_running_loop().time(),
                         detail="no valid CHOICE; plurality used")
            return plurality(cands)
        return answers[k]

    async def solve_many(self, tasks: Sequence[Any], cfg: ExecutionConfig, *,
                         trace: bool = False, concurrency: int = 16,
                         shared_inflight: int | None = None) -> list[SolveResult]:
        """Solve independent tasks, ``concurrency`` at a time (each has its own K, budget and
        trace, and its latency is measured from its own start, so without
        ``shared_inflight`` the results do not depend on ``concurrency``; a small value
        keeps the loop's timer heap small). ``shared_inflight``: a global in-flight limit on
        model calls across all the tasks running at once (one server serving them all); a
        task's latency then includes its waits for the other tasks' calls."""
        if concurrency < 1:
            raise ValueError(f"concurrency={concurrency} must be >= 1")
        if shared_inflight is not None and shared_inflight < 1:
            raise ValueError(f"shared_inflight={shared_inflight} must be >= 1 or None")
        gate = asyncio.Semaphore(concurrency)
        shared = asyncio.Semaphore(shared_inflight) if shared_inflight else None

        async def one(t: Any) -> SolveResult:
            async with gate:
                return await self.solve(t, cfg, trace=trace, shared_limit=shared)

        return list(await asyncio.gather(*(one(t) for t in tasks)))

    def run(self, tasks: Sequence[Any], cfg: ExecutionConfig, *, trace: bool = False,
            concurrency: int = 16, shared_inflight: int | None = None) -> list[SolveResult]:
        """Synchronous :meth:`solve_many` on a fresh loop of this runner's clock."""
        return run_on_clock(self.solve_many(tasks, cfg, trace=trace, concurrency=concurrency,
                                            shared_inflight=shared_inflight), self.clock,
                            self.engine)
