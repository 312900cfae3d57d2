"""TIPEX benchmark: the two-tier sweep per level (accuracy, latency, tokens on the virtual
clock), framework overhead per model call against bare ``asyncio.gather`` on the same scripted
model, virtual-clock throughput, and 64 concurrent HTTP requests to a local server.

    python plugins/tipex/benchmarks/bench.py [--tasks 100] [--parts ...] [--out-results FILE]

``--out-results plugins/tipex/results/NAME.json`` writes every table of the parts run as a
results file (``icml.results``), its command the command line as typed; columns read off a
clock are marked ``timing`` (shown, never compared by ``icml reproduce``).

Parts: sweep, overhead, throughput, ceiling (the scripted model's own cost), cap (what caps
throughput: full run, free model, model alone, loop floor), floor (the goal's budget per model
call against lower bounds: the model alone, an ideal generator engine, the calls the real logic
makes), http, batch
(batched transformers generation).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

from icml_tipex import roles
from icml_tipex.aggregate import Candidate, plurality
from icml_tipex.bare import bare_agent
from icml_tipex.budget import TokenBudget
from icml_tipex.clock import run
from icml_tipex.plan import Subtask
from icml_tipex.runner import ExecutionConfig, TipexRunner, _State
from icml_tipex.scripted import ScriptedModel
from icml_tipex.sweep import complementarity, configs_of, sweep
from icml_tipex.synthgaia import SynthGAIA
from icml_tipex.trace import Trace

from icml import results as R

sys.path.insert(0, str(Path(__file__).resolve().parent))  # throughput_ab's grid


TABLES: list[dict] = []  # every table printed, for --out-results
TIMING: dict[str, dict] = {}  # columns read off a clock: shown, never compared on a rerun


def table(title: str, cols: list[str], rows: list[list], name: str | None = None,
          timing: tuple[str, ...] = ()) -> str:
    """Print a Markdown table and keep it for the results file; ``timing`` names the columns
    that come from a clock (CPU or wall time, or a ratio or verdict computed from one)."""
    def f(v: object) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)
    out = [f"\n{title}\n", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(f(v) for v in r) + " |" for r in rows]
    text = "\n".join(out)
    print(text, flush=True)
    # the README's format: floats at 3 significant digits, everything else as printed
    fmts = {c: ".3g" for j, c in enumerate(cols)
            if rows and all(isinstance(r[j], float) or not isinstance(r[j], (int, float))
                            for r in rows) and any(isinstance(r[j], float) for r in rows)}
    TABLES.append(R.make_table(title, cols, [[v if isinstance(v, (int, float, type(None)))
                                              else str(v) for v in r] for r in rows],
                               name=name, formats=fmts))
    for c in timing:
        TIMING[c] = {"timing": True, "why": "CPU or wall time of this machine under its load "
                     "(or a ratio or verdict computed from it): shown, not compared"}
    return text


def part_sweep(n_tasks: int, seed: int) -> tuple[str, dict]:
    suite = SynthGAIA(seed=seed)
    runner = TipexRunner(ScriptedModel(suite, seed=seed), suite.tools())
    tasks = {lvl: suite.tasks(lvl, n_tasks) for lvl in (1, 2, 3)}
    base = ExecutionConfig(seed=seed, granularity=4, max_inflight=None)
    cfgs = configs_of(base, {"planner": ["chain"], "n_replicas": [1, 3, 5, 9]})
    cfgs += configs_of(base, {"planner": ["dag"], "n_replicas": [1, 3, 5, 9],
                              "width": [1, 2, 4, 8]})
    cfgs += [replace(base, n_replicas=5, width=8, granularity=g) for g in (1, 2, 8, 16)]
    cfgs += [replace(base, n_replicas=n, width=8, granularity=8, max_inflight=k)
             for n in (5, 9) for k in (4, 8, 16, None) if (n, k) != (5, None)]
    t = time.process_time()
    rows = sweep(runner, tasks, base, configs=cfgs)
    cpu = time.process_time() - t
    md = []
    main = [r for r in rows if r["max_inflight"] is None and (r["planner"] == "chain"
                                                               or r["granularity"] == 4)]
    md.append(table(f"Sweep over N and w (g=4, K=none, plurality), {n_tasks} tasks per level",
                    ["level", "structure", "N", "accuracy", "latency s", "tokens"],
                    [[r["level"], "bare agent" if r["planner"] == "chain" else
                      f"DAG w={r['width']}", r["n_replicas"], r["accuracy"], r["latency_s"],
                      r["tokens"]] for r in main], name="sweep"))
    grid = []  # the README's layout: one cell per N, accuracy / latency s / k tokens
    for lvl in (1, 2, 3):
        for key in ["chain"] + [f"w={w}" for w in (1, 2, 4, 8)]:
            cells = {r["n_replicas"]: f"{r['accuracy']:.2f} / {r['latency_s']:.1f} / "
                     f"{r['tokens'] / 1000:.1f}" for r in main if r["level"] == lvl and (
                         r["planner"] == "chain" if key == "chain" else
                         r["planner"] == "dag" and f"w={r['width']}" == key)}
            grid.append([lvl, "bare agent (no planner)" if key == "chain" else f"DAG {key}"]
                        + [cells.get(n) for n in (1, 3, 5, 9)])
    md.append(table(f"Sweep over N and w (g=4, K=none, plurality, {n_tasks} tasks per level); "
                    "each cell is accuracy / latency s / k tokens",
                    ["level", "structure", "N=1", "N=3", "N=5", "N=9"], grid,
                    name="sweep-grid"))
    comp = []
    for lvl in (1, 2, 3):
        for n, w in ((3, 4), (9, 8)):
            c = complementarity(rows, lvl, n, w)
            comp.append([lvl, n, w, c["base_acc"], c["gain_rp"], c["gain_sp"], c["gain_both"],
                         c["interaction"], c["speedup"], c["token_ratio"]])
    md.append(table("Complementarity (gains over the bare agent, N=1 chain)",
                    ["level", "N", "w", "bare acc", "gain RP", "gain SP", "gain both",
                     "interaction", "speed-up", "token ratio"], comp,
                    name="complementarity"))
    gr = [r for r in rows if r["n_replicas"] == 5 and r["width"] == 8
          and r["max_inflight"] is None]
    md.append(table("Granularity g at N=5, w=8, K=none",
                    ["level", "g", "accuracy", "latency s", "tokens"],
                    [[r["level"], r["granularity"], r["accuracy"], r["latency_s"], r["tokens"]]
                     for r in sorted(gr, key=lambda r: (r["level"], r["granularity"]))],
                    name="granularity"))
    kr = [r for r in rows if r["width"] == 8 and r["granularity"] == 8 and r["planner"] == "dag"
          and r["n_replicas"] in (5, 9)]
    md.append(table("In-flight limit K at w=8, g=8 (over-aggressive N meets a finite K)",
                    ["level", "N", "K", "accuracy", "latency s", "tokens"],
                    [[r["level"], r["n_replicas"], r["max_inflight"] or "none", r["accuracy"],
                      r["latency_s"], r["tokens"]] for r in sorted(
                          kr, key=lambda r: (r["level"], r["n_replicas"],
                                             r["max_inflight"] or 10**9))], name="finite-k"))
    best = []
    for lvl in (1, 2, 3):
        lv = [r for r in rows if r["level"] == lvl]
        top = max(lv, key=lambda r: (r["accuracy"], -r["tokens"]))
        best.append([lvl, top["planner"], top["n_replicas"], top["width"], top["granularity"],
                     top["max_inflight"] or "none", top["accuracy"], top["latency_s"],
                     top["tokens"]])
    md.append(table("Most accurate config per level (ties: fewer tokens)",
                    ["level", "planner", "N", "w", "g", "K", "accuracy", "latency s", "tokens"],
                    best, name="best"))
    print(f"sweep: {len(cfgs)} configs x 3 levels x {n_tasks} tasks in {cpu:.1f} CPU s")
    return "\n".join(md), {"rows": rows, "cpu_s": cpu, "main": main}


def part_overhead(n_tasks: int, seed: int, repeats: int = 3) -> tuple[str, dict]:
    suite = SynthGAIA(seed=seed, tool_latency={"lookup": 0, "search": 0, "calc": 0})
    model = ScriptedModel(suite, seed=seed, latency_scale=0.0)
    tools = suite.tools()
    runner = TipexRunner(model, tools, clock="wall")
    res = {}
    rows = []
    for level in (1, 3):
        tasks = suite.tasks(level, n_tasks)
        cfg = ExecutionConfig(max_inflight=None,
                              n_replicas=4, planner="chain", seed=seed, call_timeout_s=None)

        async def bare(tasks: list = tasks, cfg: ExecutionConfig = cfg) -> int:
            out = await asyncio.gather(*(bare_agent(model, tools, t, temperature=cfg.temperature,
                                                    seed=cfg.replica_seed(i),
                                                    max_tokens=cfg.max_tokens)
                                         for t in tasks for i in range(cfg.n_replicas)))
            return sum(b.calls for b in out)

        arms = {"bare asyncio.gather": None,
                "TIPEX (no K, no budget, no trace)": (cfg, False),
                "TIPEX (K=8, budget, call timeout, trace)":
                    (replace(cfg, max_inflight=8, token_budget=10**9, call_timeout_s=60.0), True)}
        best = {k: float("inf") for k in arms}
        calls = {}
        for _ in range(repeats):  # arms interleaved, best of `repeats`
            for name, spec in arms.items():
                # CPU time of this process: the model and tools take zero time, so on an idle
                # machine it equals the wall time, and on a shared one it leaves out the waits
                t = time.process_time()
                if spec is None:
                    calls[name] = run(bare(), "wall")
                else:
                    # all tasks at once, as the bare arm's gather does
                    out = runner.run(tasks, spec[0], trace=spec[1], concurrency=len(tasks))
                    calls[name] = sum(r.calls for r in out)
                best[name] = min(best[name], time.process_time() - t)
        base = best["bare asyncio.gather"] / calls["bare asyncio.gather"]
        for name in arms:
            per = best[name] / calls[name]
            rows.append([level, name, calls[name], per * 1e6, (per - base) * 1e6, per / base])
            res[f"L{level}:{name}"] = {"calls": calls[name], "us_per_call": per * 1e6}
    md = table(f"Framework overhead per model call (scripted model, zero latency, wall clock, "
               f"{n_tasks} tasks x 4 replicas, CPU time of one process, best of {repeats})",
               ["level", "arm", "model calls", "us per call", "overhead us per call",
                "ratio to bare"], rows, name="overhead",
               timing=("us per call", "overhead us per call", "ratio to bare"))
    return md, res


def part_throughput(n_tasks: int, seed: int, engines: tuple[str, ...] = ("sim", "asyncio"),
                    rounds: int = 2) -> tuple[str, dict]:
    """Tasks per CPU second of this process (one core) per level and per (N, w, g, K), on the
    grid of ``throughput_ab.GRID``, for each virtual-clock engine (the rows alternate the
    engines, best of ``rounds``); the goal is 1,000 tasks per second. Every engine must return
    the same results (answers, latencies, tokens, calls) as the first."""
    import hashlib

    from throughput_ab import GRID

    suite = SynthGAIA(seed=seed)
    tasks = {lvl: suite.tasks(lvl, n_tasks) for lvl in (1, 2, 3)}
    runners = {e: TipexRunner(ScriptedModel(suite, seed=seed), suite.tools(), engine=e)
               for e in engines}
    for e in engines:  # warm caches (payload parsing, prompts) equally for every engine
        runners[e].run(tasks[1][:5], ExecutionConfig(max_inflight=None, seed=seed))
    rows, res = [], {}
    for lvl, planner, n, w, g, k in GRID:
        cfg = ExecutionConfig(planner=planner, n_replicas=n, width=w, granularity=g,
                              max_inflight=k, seed=seed)
        cpu = {e: float("inf") for e in engines}
        digest, calls = {}, 0
        for _ in range(rounds):
            for e in engines:
                c = time.process_time()
                out = runners[e].run(tasks[lvl], cfg)
                cpu[e] = min(cpu[e], time.process_time() - c)
                calls = sum(r.calls for r in out)
                digest[e] = hashlib.sha256(json.dumps(
                    [[r.answer, repr(r.latency_s), r.tokens, r.calls, r.decided_by]
                     for r in out]).encode()).hexdigest()
        name = "bare agent" if planner == "chain" else "DAG"
        dag = planner == "dag"
        tps = {e: n_tasks / cpu[e] for e in engines}
        e0 = engines[0]
        row = [lvl, name, n, w if dag else "-", g if dag else "-", k or "none",
               calls / n_tasks]
        row += [round(tps[e]) for e in engines]
        if len(engines) > 1:
            row.append(round(tps[e0] / tps[engines[1]], 2))
        row += [1e6 * cpu[e0] / calls, "yes" if tps[e0] >= 1000 else "no"]
        if len(engines) > 1:
            row.append("yes" if len(set(digest.values())) == 1 else "NO")
        rows.append(row)
        res[f"L{lvl}:{planner}:N{n}:w{w}:g{g}:K{k}"] = {
            "tasks_per_cpu_s": tps, "calls_per_task": calls / n_tasks,
            "us_per_call": {e: 1e6 * cpu[e] / calls for e in engines},
            "same_results": len(set(digest.values())) == 1}
    cols = ["level", "structure", "N", "w", "g", "K", "model calls per task"]
    cols += [f"tasks per CPU s ({e})" for e in engines]
    if len(engines) > 1:
        cols.append(f"{engines[0]} / {engines[1]}")
    cols += [f"CPU us per model call ({e0})", f">= 1,000 tasks/s ({e0})"]
    if len(engines) > 1:
        cols.append("same results")
    md = table(f"Virtual-clock throughput, {n_tasks} tasks per row, one process (one core), "
               f"engines {', '.join(engines)}, best of {rounds} (alternating)", cols, rows,
               name="throughput", timing=tuple(c for c in cols if "CPU" in c or "/" in c
                                                or "1,000" in c))
    return md, res


def part_ceiling(n_tasks: int, seed: int) -> tuple[str, dict]:
    """What the scripted model alone costs: for each row of the throughput grid, the model
    calls a run makes are recorded, then replayed through ``ScriptedModel.reply`` (and its token
    count) with no runner, loop or tools. Tasks per CPU s of the replay is the ceiling any
    engine could reach if scheduling, roles, tools and bookkeeping cost nothing."""
    from throughput_ab import GRID

    suite = SynthGAIA(seed=seed)
    tasks = {lvl: suite.tasks(lvl, n_tasks) for lvl in (1, 2, 3)}
    rows, res = [], {}
    for lvl, planner, n, w, g, k in GRID:
        cfg = ExecutionConfig(planner=planner, n_replicas=n, width=w, granularity=g,
                              max_inflight=k, seed=seed)
        model = ScriptedModel(suite, seed=seed)
        rec: list = []
        inner = model.generate

        async def recording(messages: list, rec: list = rec, inner=inner, **kw: object):
            rec.append((messages, kw["temperature"], kw["seed"]))
            return await inner(messages, **kw)

        model.generate = recording  # type: ignore[method-assign]
        TipexRunner(model, suite.tools()).run(tasks[lvl], cfg)
        best = float("inf")
        for _ in range(2):
            fresh = ScriptedModel(suite, seed=seed)
            fresh._payloads = model._payloads  # parsed prompts warm, as in the timed runs
            c = time.process_time()
            for msgs, temp, s in rec:
                fresh.reply(msgs, temp, s)
                fresh.count_tokens(msgs)
            best = min(best, time.process_time() - c)
        dag = planner == "dag"
        rows.append([lvl, "bare agent" if not dag else "DAG", n, w if dag else "-",
                     g if dag else "-", k or "none", len(rec) / n_tasks,
                     1e6 * best / len(rec), round(n_tasks / best)])
        res[f"L{lvl}:{planner}:N{n}:w{w}:g{g}:K{k}"] = {
            "model_us_per_call": 1e6 * best / len(rec), "ceiling_tasks_per_cpu_s": n_tasks / best}
    md = table(f"The scripted model alone (replies replayed without runner, loop or tools), "
               f"{n_tasks} tasks per row, one core, best of 2",
               ["level", "structure", "N", "w", "g", "K", "model calls per task",
                "model CPU us per call", "ceiling tasks per CPU s"], rows,
               name="ceiling", timing=("model CPU us per call", "ceiling tasks per CPU s"))
    return md, res


def counting_loop() -> type:
    """A SimEventLoop subclass whose class attribute ``fired`` counts the timers whose callback
    ran (used to report timers per task; never timed)."""
    from icml_tipex.clock import SimEventLoop

    class Counting(SimEventLoop):
        fired = 0

        def call_at(self, when, callback, *args, context=None):  # type: ignore[override]
            def cb(*a: object) -> None:
                Counting.fired += 1
                callback(*a)
            return super().call_at(when, cb, *args, context=context)

    return Counting


def part_cap(n_tasks: int, seed: int, rounds: int = 2) -> tuple[str, dict]:
    """What caps virtual-clock throughput, per row of the throughput grid, in one process:
    the full run (scripted model, engine ``sim``); the same run with the model's replies
    replayed from a table (same prompts, same simulated latencies, so the same schedule,
    checked: same results) -- the runner, roles, tools and loop with a model that costs
    nothing; the model alone (its replies replayed without runner or loop); and a lower bound
    of the event loop alone: the timers that fire per task times the CPU cost of one bare
    ``sleep`` cycle on the same loop (one timer, one future, one task wake-up), measured in
    this process. Tasks per CPU second of one core; best of ``rounds`` (rows alternate arms)."""
    import hashlib

    from icml_tipex.synthgaia import _sleep
    from throughput_ab import GRID

    def sleep_cost() -> float:  # CPU s per bare sleep cycle, 16 concurrent sleepers
        async def one(k: int) -> None:
            for _ in range(k):
                await _sleep(0.1)

        async def many() -> None:
            await asyncio.gather(*(one(1250) for _ in range(16)))
        best = float("inf")
        for _ in range(3):
            c = time.process_time()
            run(many(), "virtual", "sim")
            best = min(best, time.process_time() - c)
        return best / 20000

    Counting = counting_loop()

    class Replay:
        """Returns the recorded reply for a prompt after the model's simulated latency."""
        virtual_time, name = True, "replay"

        def __init__(self, model: ScriptedModel, replies: dict) -> None:
            self.m, self.replies = model, replies

        def count_tokens(self, messages: list) -> int:
            return self.m.count_tokens(messages)

        async def generate(self, messages: list, *, temperature: float, seed: int,
                           max_tokens: int):
            c = self.replies[(seed, temperature, *[m["content"] for m in messages])]
            await _sleep(self.m.latency(c.prompt_tokens, c.completion_tokens))
            return c

    def digest(out: list) -> str:
        return hashlib.sha256(json.dumps([[r.answer, repr(r.latency_s), r.tokens, r.calls]
                                          for r in out]).encode()).hexdigest()

    suite = SynthGAIA(seed=seed)
    tasks = {lvl: suite.tasks(lvl, n_tasks) for lvl in (1, 2, 3)}
    c_sleep = sleep_cost()
    rows, res = [], {}
    for lvl, planner, n, w, g, k in GRID:
        cfg = ExecutionConfig(planner=planner, n_replicas=n, width=w, granularity=g,
                              max_inflight=k, seed=seed)
        model = ScriptedModel(suite, seed=seed)
        rec: list = []
        inner = model.generate

        async def recording(messages: list, rec: list = rec, inner=inner, **kw: object):
            c = await inner(messages, **kw)
            rec.append(((kw["seed"], kw["temperature"], *[m["content"] for m in messages]),
                        messages, c))
            return c

        model.generate = recording  # type: ignore[method-assign]
        full = TipexRunner(model, suite.tools(), engine="sim")
        want = digest(full.run(tasks[lvl], cfg))  # also warms the model's caches
        model.generate = inner  # type: ignore[method-assign]
        replies = {key: c for key, _, c in rec}
        replay = TipexRunner(Replay(ScriptedModel(suite, seed=seed), replies), suite.tools(),
                             engine="sim")
        Counting.fired = 0
        with asyncio.Runner(loop_factory=Counting) as r:
            same = digest(r.run(replay.solve_many(tasks[lvl], cfg))) == want
        fired = Counting.fired / n_tasks
        cpu = {"full": float("inf"), "free model": float("inf"), "model alone": float("inf")}
        for _ in range(rounds):
            c = time.process_time()
            same &= digest(full.run(tasks[lvl], cfg)) == want
            cpu["full"] = min(cpu["full"], time.process_time() - c)
            c = time.process_time()
            same &= digest(replay.run(tasks[lvl], cfg)) == want
            cpu["free model"] = min(cpu["free model"], time.process_time() - c)
            c = time.process_time()
            for (s_, temp, *_), msgs, _ in rec:
                model.reply(msgs, temp, s_)
                model.count_tokens(msgs)
            cpu["model alone"] = min(cpu["model alone"], time.process_time() - c)
        calls = len(rec) / n_tasks
        floor = 1 / (fired * c_sleep)
        dag = planner == "dag"
        tps = {a: n_tasks / v for a, v in cpu.items()}
        rows.append([lvl, "DAG" if dag else "bare agent", n, w if dag else "-",
                     g if dag else "-", k or "none", round(calls, 1), round(fired, 1),
                     round(tps["full"]), round(tps["free model"]), round(tps["model alone"]),
                     round(floor), round(1e6 * cpu["full"] / len(rec), 1),
                     round(1e6 * cpu["model alone"] / len(rec), 1),
                     "yes" if same else "NO"])
        res[f"L{lvl}:{planner}:N{n}:w{w}:g{g}:K{k}"] = {
            "calls_per_task": calls, "fired_timers_per_task": fired, "tasks_per_cpu_s": tps,
            "loop_floor_tasks_per_cpu_s": floor, "same_results": same}
    md = table(f"What caps throughput: tasks per CPU s of one core, {n_tasks} tasks per row, "
               f"engine sim, best of {rounds}; loop floor = 1 / (timers fired per task x "
               f"{1e6 * c_sleep:.2f} us per bare sleep cycle, measured in the same run)",
               ["level", "structure", "N", "w", "g", "K", "model calls per task",
                "timers fired per task", "full run", "free model (replies replayed)",
                "model alone", "loop floor", "full us per call", "model us per call",
                "same results"], rows, name="cap",
               timing=("full run", "free model (replies replayed)", "model alone", "loop floor",
                       "full us per call", "model us per call"))
    res["sleep_cycle_us"] = 1e6 * c_sleep
    return md, res


class _Clock:  # the _State's loop: only ``time()`` is read with no K and no call timeout
    @staticmethod
    def time() -> float:
        return 0.0

def drive(coro):  # run a coroutine that never waits, with no event loop
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("a zero-latency path waited: the straight run needs no waits")


def straight(runner: TipexRunner, task, cfg: ExecutionConfig) -> list:
    """One task's replicas, each path straight through (the runner's _run_path without
    its event-loop parts: no run_dag scheduling, no replica tasks, no as_completed)."""
    st = _State(task, cfg, None, TokenBudget(cfg.token_budget),
                Trace(0.0, task.task_id, False), loop=_Clock())  # type: ignore[arg-type]
    out, cands = [], []
    for i in range(cfg.n_replicas):
        seed_i = cfg.replica_seed(i)

        def call(role, sub, messages, i=i, seed_i=seed_i):
            return runner._call(st, i, seed_i, role, sub, messages)

        def tool(sub, name, text, args, i=i):
            return runner._tool(st, i, sub, name, text, args)

        def work(sub, parents):
            return drive(roles.work(call, tool, runner.tools, task.task_id, task.question,
                                    sub, parents, cfg.max_worker_steps))
        if cfg.planner == "chain":
            answer = work(Subtask("agent", task.question, meta={"step": "all"}), {})
        else:
            plan = drive(roles.plan(call, task.task_id, task.question, cfg.granularity,
                                    runner.tools))
            by_id = {s_.id: s_ for s_ in plan.subtasks}
            results: dict = {}
            for v in plan.topological():
                sub = by_id[v]
                results[v] = work(sub, {u: results[u] for u in sub.deps})
            answer = drive(roles.synthesize(call, task.task_id, task.question, plan,
                                            results))
        out.append((i, answer, st.tokens.get(i, 0), st.calls.get(i, 0)))
        cands.append(Candidate(i, answer, float(i)))
    plurality(cands)
    return out


def part_floor(n_tasks: int, seed: int, rounds: int = 2, profile_tasks: int = 10
               ) -> tuple[str, dict]:
    """Why 1,000 virtual-clock tasks per CPU s cannot be reached on most of the grid: per row
    of the throughput grid, in one process, the CPU budget per model call the goal allows
    (1 ms / calls per task) against lower bounds measured in the same run:

    - the full run (engine ``sim``) and the scripted model alone (its replies replayed, no
      runner, loop or tools), as in ``--parts cap``;
    - an ideal engine: a heap of (time, sequence, generator) with one ``heappush``,
      ``heappop`` and ``send`` per timer and nothing else, timed per timer, times the timers
      a task fires: what any discrete-event engine that wakes a Python generator per event
      pays at least;
    - the best conceivable tasks per CPU s = 1 / (model alone + ideal engine), i.e. with a
      framework that costs nothing; where it is under 1,000, no engine and no framework can
      reach the goal with this scripted model;
    - the real logic with no scheduling at all: every replica's path run straight through
      with the runner's own ``_call`` and ``_tool``, ``roles.plan``, ``roles.work`` per subtask
      (in topological order) and ``roles.synthesize``, then plurality, on the same scripted
      model and tools with zero latency and no K or call timeout, so no coroutine ever waits
      and no event loop runs (each path is one ``coro.send``). Every engine, a generator
      engine included, has to execute at least this; where its tasks per CPU s are under
      1,000, no engine can reach the goal with this framework code. Checked: the same
      answers, tokens and calls per replica as the full run;
    - the Python function calls (coroutine resumes included) and C builtin calls the full run
      makes per model call (counted by cProfile on ``profile_tasks`` tasks, deterministic);
    - the Mersenne Twister seeding of the model's reply generator (seeds per call x the cost
      of one seed), the part a counter-based generator saves, and the full run with the
      model's ``rng="counter"`` option (other draws, so other results; not checked equal)."""
    import cProfile
    import hashlib
    import pstats
    import random as _random
    from _random import Random as _CRandom
    from heapq import heappop, heappush

    from throughput_ab import GRID

    def best_of(fn, n: int = 5) -> float:
        out = float("inf")
        for _ in range(n):
            c = time.process_time()
            fn()
            out = min(out, time.process_time() - c)
        return out

    def ideal_engine() -> None:  # 16 sleepers x 1250 timers on a bare heap of generators
        def sleeper(k: int):
            for _ in range(k):
                yield 0.1
        heap: list = []
        for i in range(16):
            heappush(heap, (0.0, i, sleeper(1250)))
        seq = 16
        while heap:
            t, _, g = heappop(heap)
            try:
                d = g.send(None)
            except StopIteration:
                continue
            seq += 1
            heappush(heap, (t + d, seq, g))

    r0 = _random.Random()
    seed_fn = _CRandom.seed  # what the scripted model calls (C, no type checks)

    def seeds() -> None:
        for i in range(20000):
            seed_fn(r0, 0x9E3779B97F4A7C15 ^ i)

    c_timer = best_of(ideal_engine) / 20000
    c_seed = best_of(seeds) / 20000

    Counting = counting_loop()

    zero = SynthGAIA(seed=seed, tool_latency={"lookup": 0, "search": 0, "calc": 0})
    suite = SynthGAIA(seed=seed)
    tasks = {lvl: suite.tasks(lvl, n_tasks) for lvl in (1, 2, 3)}
    ztasks = {lvl: zero.tasks(lvl, n_tasks) for lvl in (1, 2, 3)}
    rows, res = [], {}
    for lvl, planner, n, w, g, k in GRID:
        cfg = ExecutionConfig(planner=planner, n_replicas=n, width=w, granularity=g,
                              max_inflight=k, seed=seed)
        zcfg = replace(cfg, max_inflight=None, call_timeout_s=None)
        zrunner = TipexRunner(ScriptedModel(zero, seed=seed, latency_scale=0.0), zero.tools())
        # structure: function calls per model call (cProfile, not timed)
        pm = ScriptedModel(suite, seed=seed)
        prof = TipexRunner(pm, suite.tools(), engine="sim")
        prof.run(tasks[lvl][:profile_tasks], cfg)  # warm its caches, as in the timed runs
        pr = cProfile.Profile()
        pr.enable()
        pout = prof.run(tasks[lvl][:profile_tasks], cfg)
        pr.disable()
        st = pstats.Stats(pr)
        n_py = n_bi = 0
        for (fname, _, _), (_, ncalls, *_rest) in st.stats.items():  # type: ignore[attr-defined]
            if fname == "~":
                n_bi += ncalls
            else:
                n_py += ncalls
        pcalls = sum(r.calls for r in pout)
        # the full run, recording the model's calls; timers fired per task on the same run
        model = ScriptedModel(suite, seed=seed)
        rec: list = []
        inner = model.generate
        n_seeds = [0]
        rng_inner = model._rng

        def counting_rng(*a: object, _inner=rng_inner, _n=n_seeds):
            _n[0] += 1
            return _inner(*a)

        async def recording(messages: list, rec: list = rec, inner=inner, **kw: object):
            rec.append((messages, kw["temperature"], kw["seed"]))
            return await inner(messages, **kw)

        model.generate = recording  # type: ignore[method-assign]
        model._rng = counting_rng  # type: ignore[method-assign]
        full = TipexRunner(model, suite.tools(), engine="sim")
        Counting.fired = 0
        with asyncio.Runner(loop_factory=Counting) as r:
            out = r.run(full.solve_many(tasks[lvl], cfg))
        want = hashlib.sha256(json.dumps([[o.answer, repr(o.latency_s), o.tokens, o.calls]
                                          for o in out]).encode()).hexdigest()
        fired = Counting.fired / n_tasks
        seeds_per_call = n_seeds[0] / len(rec)
        model.generate, model._rng = inner, rng_inner  # type: ignore[method-assign]
        counter = TipexRunner(ScriptedModel(suite, seed=seed, rng="counter"), suite.tools(),
                              engine="sim")
        counter.run(tasks[lvl], cfg)  # warm, as the full run is
        cpu = {"full": float("inf"), "model alone": float("inf"), "straight": float("inf"),
               "counter": float("inf")}
        paths = [[(p.replica, p.answer, p.tokens, p.calls) for p in o.replicas] for o in out]
        # checked (and the zero-latency model's caches warmed, as the full run's are)
        same = [straight(zrunner, t, zcfg) for t in ztasks[lvl]] == paths
        for _ in range(rounds):
            c = time.process_time()
            counter.run(tasks[lvl], cfg)
            cpu["counter"] = min(cpu["counter"], time.process_time() - c)
            c = time.process_time()
            sp = [straight(zrunner, t, zcfg) for t in ztasks[lvl]]
            cpu["straight"] = min(cpu["straight"], time.process_time() - c)
            same &= sp == paths
            c = time.process_time()
            o2 = full.run(tasks[lvl], cfg)
            cpu["full"] = min(cpu["full"], time.process_time() - c)
            same &= hashlib.sha256(json.dumps([[o.answer, repr(o.latency_s), o.tokens, o.calls]
                                               for o in o2]).encode()).hexdigest() == want
            c = time.process_time()
            for msgs, temp, s_ in rec:
                model.reply(msgs, temp, s_)
                model.count_tokens(msgs)
            cpu["model alone"] = min(cpu["model alone"], time.process_time() - c)
        calls = len(rec) / n_tasks
        per_call = {a: 1e6 * v / len(rec) for a, v in cpu.items()}
        budget = 1000.0 / calls  # us per model call for 1,000 tasks per CPU s
        ideal_us = fired * c_timer * 1e6 / calls  # ideal engine, us per model call
        py_per_call, bi_per_call = n_py / pcalls, n_bi / pcalls
        best = 1e6 / (calls * (per_call["model alone"] + ideal_us))
        full_tps = n_tasks / cpu["full"]
        straight_tps = n_tasks / cpu["straight"]
        verdict = ("met" if full_tps >= 1000 else
                   "out of reach: model" if best < 1000 else
                   "out of reach: logic" if straight_tps < 1000 else "not met")
        dag = planner == "dag"
        rows.append([lvl, "DAG" if dag else "bare agent", n, w if dag else "-",
                     g if dag else "-", k or "none", round(calls, 1), round(budget, 1),
                     round(per_call["full"], 1), round(full_tps),
                     round(n_tasks / cpu["counter"]),
                     round(per_call["model alone"], 1), round(1e6 * seeds_per_call * c_seed, 1),
                     round(ideal_us, 2), round(best), round(per_call["straight"], 1),
                     round(straight_tps), round(py_per_call), round(bi_per_call), verdict,
                     "yes" if same else "NO"])
        res[f"L{lvl}:{planner}:N{n}:w{w}:g{g}:K{k}"] = {
            "calls_per_task": calls, "budget_us_per_call": budget, "us_per_call": per_call,
            "full_tasks_per_cpu_s": full_tps, "timers_fired_per_task": fired,
            "counter_rng_tasks_per_cpu_s": n_tasks / cpu["counter"],
            "ideal_engine_us_per_call": ideal_us, "best_conceivable_tasks_per_cpu_s": best,
            "seeds_per_call": seeds_per_call, "py_calls_per_model_call": py_per_call,
            "builtin_calls_per_model_call": bi_per_call,
            "straight_tasks_per_cpu_s": straight_tps,
            "verdict": verdict, "same_results": same}
    res["unit_costs_ns"] = {"ideal_engine_timer": 1e9 * c_timer, "mt_seed": 1e9 * c_seed}
    md = table(f"Why 1,000 tasks per CPU s is out of reach: the budget per model call against "
               f"floors measured in the same run ({n_tasks} tasks per row, engine sim, best of "
               f"{rounds}; unit costs: ideal-engine timer {1e9 * c_timer:.0f} ns, one MT seed "
               f"{1e9 * c_seed:.0f} ns)",
               ["level", "structure", "N", "w", "g", "K", "model calls per task",
                "budget us per call", "full run us per call", "full run tasks per CPU s",
                "full run, rng=counter: tasks per CPU s",
                "model alone us per call", "of which MT seeding us", "ideal engine us per call",
                "best conceivable tasks per CPU s (model alone + ideal engine)",
                "real logic, no scheduling: us per call", "real logic, no scheduling: tasks "
                "per CPU s", "Python calls per model call", "builtin calls per model call",
                "goal", "same results"], rows, name="floor",
               timing=("full run us per call", "full run tasks per CPU s",
                       "full run, rng=counter: tasks per CPU s", "model alone us per call",
                       "of which MT seeding us", "ideal engine us per call",
                       "best conceivable tasks per CPU s (model alone + ideal engine)",
                       "real logic, no scheduling: us per call",
                       "real logic, no scheduling: tasks per CPU s", "goal"))
    return md, res


def part_http(seed: int) -> tuple[str, dict]:
    from icml_tipex.hf import TransformersChatModel, load_chat_model
    from icml_tipex.openai_http import OpenAIChatModel
    from icml_tipex.server import ServerThread

    tiny = load_chat_model("tiny", seed=seed)
    suite = SynthGAIA(seed=seed)
    rows, res = [], {}
    for label, cfg in (
            ("64 replicas, K=8", ExecutionConfig(n_replicas=64, planner="chain", max_inflight=8,
                                                 max_tokens=4, max_worker_steps=1,
                                                 timeout_s=300.0)),
            ("64 replicas, K=64", ExecutionConfig(n_replicas=64, planner="chain",
                                                  max_inflight=64, max_tokens=4,
                                                  max_worker_steps=1, timeout_s=300.0)),
            ("16 replicas, quorum=1 (cancel 15)",
             ExecutionConfig(max_inflight=None,
                             n_replicas=16, planner="chain", quorum=1, max_tokens=64,
                             max_worker_steps=1, timeout_s=300.0))):
        model = TransformersChatModel(tiny.model, tiny.tok, ignore_eos=True)
        st = ServerThread(model)
        with st as srv:
            runner = TipexRunner(OpenAIChatModel(srv.url), suite.tools(), clock="wall")
            t = time.perf_counter()
            out = runner.run(suite.tasks(1, 1), cfg, trace=True)[0]
            wall = time.perf_counter() - t
            st.wait_idle(30.0)
            rows.append([label, srv.requests, srv.completed, srv.cancelled, srv.max_active,
                         cfg.max_inflight or "none", model.tokens_generated,
                         cfg.n_replicas * cfg.max_tokens, f"{wall:.2f}", out.decided_by])
            res[label] = rows[-1]
    md = table("HTTP: TIPEX -> OpenAI-compatible local server (tiny transformers Llama, "
               "ignore_eos)",
               ["run", "requests", "completed", "cancelled by disconnect", "max in flight",
                "K", "tokens generated", "tokens if none cancelled", "wall s", "decided by"],
               rows, name="http",
               # a real server on the wall clock: how many requests are cancelled (and so
               # how many tokens are generated) depends on when the quorum lands
               timing=("cancelled by disconnect", "max in flight", "tokens generated",
                       "wall s", "decided by"))
    return md, res


def part_batch(seed: int, n_requests: int = 16, max_tokens: int = 32,
               models_: tuple[str, ...] = ("tiny", "pretrained")) -> tuple[str, dict]:
    """Batched greedy generation: ``n_requests`` concurrent worker prompts through one
    ``TransformersChatModel`` with batch_size 1 (one generate call each), 4 and 16; wall time
    on the same model in the same run, and whether every arm returns the same texts."""
    from icml_tipex.hf import TransformersChatModel, load_chat_model
    from icml_tipex.plan import Subtask
    from icml_tipex.roles import worker_messages

    suite = SynthGAIA(seed=seed)
    prompts = [worker_messages(t.task_id, t.question, Subtask("agent", t.question), {})
               for t in suite.tasks(2, n_requests)]
    models = []
    if "tiny" in models_:
        models.append(("tiny Llama (hidden 64)", load_chat_model("tiny", seed=seed)))
    if "pretrained" in models_:
        try:
            models.append(("SmolLM2-135M-Instruct", load_chat_model("pretrained")))
        except Exception as e:  # noqa: BLE001 - the pretrained model is optional
            print(f"batch: no pretrained model ({type(e).__name__}: {e})")
    rows, res = [], {}
    for label, base in models:
        texts, wall = {}, {}
        for bs in (1, 4, 16):
            m = TransformersChatModel(base.model, base.tok, ignore_eos=True, batch_size=bs)

            async def go(m: TransformersChatModel = m) -> list:
                return await asyncio.gather(*(m.generate(p, temperature=0.0,
                                                         max_tokens=max_tokens)
                                              for p in prompts))
            best = float("inf")
            for _ in range(2):
                t = time.perf_counter()
                out = run(go(), "wall")
                best = min(best, time.perf_counter() - t)
            texts[bs], wall[bs] = [c.text for c in out], best
            rows.append([label, bs, len(m.batches) // 2 or n_requests, f"{best:.2f}",
                         n_requests * max_tokens / best, wall[1] / best,
                         "yes" if texts[bs] == texts[1] else "NO"])
            res[f"{label}:bs{bs}"] = {"wall_s": best, "same_as_bs1": texts[bs] == texts[1]}
    md = table(f"Batched greedy generation: {n_requests} concurrent worker prompts, "
               f"{max_tokens} new tokens each (ignore_eos), best of 2, wall clock",
               ["model", "batch_size", "generate calls", "wall s", "tokens per s",
                "speed-up vs batch_size=1", "same texts as batch_size=1"], rows,
               name="batch", timing=("wall s", "tokens per s", "speed-up vs batch_size=1"))
    return md, res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=100, help="tasks per level for the sweep")
    ap.add_argument("--parts", default="sweep,overhead,throughput,http")
    ap.add_argument("--throughput-tasks", type=int, default=1000,
                    help="tasks per row of the throughput grid")
    ap.add_argument("--engines", default="sim,asyncio",
                    help="virtual-clock engines the throughput part compares (first: reported)")
    ap.add_argument("--rounds", type=int, default=2, help="throughput: best of this many")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-models", default="tiny,pretrained",
                    help="batch: the models, of tiny (a tiny Llama) and pretrained (SmolLM2)")
    ap.add_argument("--batch-requests", type=int, default=16,
                    help="batch: concurrent worker prompts")
    ap.add_argument("--batch-tokens", type=int, default=32, help="batch: new tokens each")
    ap.add_argument("--out", default="")
    ap.add_argument("--out-results", default="",
                    help="write the tables as a results file (plugins/tipex/results/NAME.json)")
    a = ap.parse_args()
    clock = R.Clock()
    threads = R.apply_threads(1)  # ICML_THREADS when set (icml reproduce --threads)
    md, res = [], {}
    for part in a.parts.split(","):
        if part == "sweep":
            m, r = part_sweep(a.tasks, a.seed)
        elif part == "overhead":
            m, r = part_overhead(200, a.seed)
        elif part == "throughput":
            m, r = part_throughput(a.throughput_tasks, a.seed, tuple(a.engines.split(",")),
                                   a.rounds)
        elif part == "ceiling":
            m, r = part_ceiling(a.throughput_tasks, a.seed)
        elif part == "cap":
            m, r = part_cap(a.throughput_tasks, a.seed, a.rounds)
        elif part == "floor":
            m, r = part_floor(a.throughput_tasks, a.seed, a.rounds)
        elif part == "http":
            m, r = part_http(a.seed)
        elif part == "batch":
            bm = tuple(x for x in a.batch_models.split(",") if x)
            if not bm or set(bm) - {"tiny", "pretrained"}:
                raise SystemExit(f"--batch-models: {a.batch_models!r}; allowed: tiny, "
                                 "pretrained (comma-separated)")
            m, r = part_batch(a.seed, a.batch_requests, a.batch_tokens, bm)
        else:
            raise SystemExit(f"unknown part {part!r}; parts: sweep, overhead, throughput, "
                             "ceiling, cap, floor, http, batch")
        md.append(m)
        res[part] = r
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        if "sweep" in res:
            from icml_tipex.sweep import interaction_plot

            interaction_plot(res["sweep"].pop("main"), Path(a.out, "interaction.png"),
                             "TIPEX on SynthGAIA (g=4, K=none, 100 tasks per level)")
        Path(a.out, "bench.md").write_text("\n".join(md) + "\n")
        Path(a.out, "bench.json").write_text(json.dumps(res, indent=1, default=str))
    if a.out_results:
        R.write(a.out_results, TABLES, plugin="tipex", seeds=[a.seed], clock=clock,
                threads=threads,
                # the parts that run in well under 90 s on 2 cores join `icml reproduce --quick`
                quick=set(a.parts.split(",")) <= {"overhead", "http"},
                command=" ".join(["python", "plugins/tipex/benchmarks/bench.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]),
                tolerance=TIMING or None)


if __name__ == "__main__":
    main()
