"""The structured fast path and the discrete-event engine against the asyncio runner.

    python plugins/tipex/benchmarks/fast_bench.py --out-results plugins/tipex/results/fast.json

Throughput: tasks per CPU second of this process (``time.process_time``, one core) on level 3
with N = 9, w = 8 (the throughput grid's row: g = 8, K = none; and g = 4, K = 8, the defaults),
for four arms on the same tasks: the discrete-event engine with the structured model (``des``),
the asyncio runner with the structured model (``asyncio, structured``), and the asyncio runner
with the text scripted model on its two event loops (``asyncio, text``: the lean ``sim`` loop,
the default, and asyncio's own loop). Best of ``--rounds`` per arm, arms alternating. The
engine's own cost per model call is measured with the model replaced by a replay of its
recorded replies (``des, model replayed``); the model's cost is the difference. A CPU-time
calibration (a fixed pure-Python loop) is measured in the same run, since a shared machine's
load slows CPU time too (contended cores).

Equality and accuracy: whether ``des`` returns the asyncio runner's results on the same
structured model (answers, float latencies, tokens, calls; the relation tested in
``tests/test_des.py``), and the structured model's accuracy against the text model's on the
same tasks (paired, with a CI and the minimum detectable effect).
"""

from __future__ import annotations

import argparse
import copy
import gc
import hashlib
import json
import shlex
import sys
import time
from typing import Any

from icml_tipex.des import DesRunner
from icml_tipex.fast import StructuredModel, sync_tools
from icml_tipex.runner import ExecutionConfig, TipexRunner
from icml_tipex.scripted import ScriptedModel
from icml_tipex.synthgaia import SynthGAIA

from icml import results as R
from icml import stats as S

ROWS = [(3, 9, 8, 8, None), (3, 9, 8, 4, 8)]  # (level, N, w, g, K)
ACC_CONFIGS = [("bare agent N=1", dict(planner="chain")),
               ("DAG N=1 w=4", dict(width=4)),
               ("DAG N=5 w=4", dict(n_replicas=5, width=4)),
               ("DAG N=9 w=8 g=8", dict(n_replicas=9, width=8, granularity=8))]


class Replay(StructuredModel):
    """The structured model's replies, recorded once and returned in the same order (the
    engine asks in a deterministic order): what is left of a run's cost is the engine's."""

    def __init__(self, inner: StructuredModel) -> None:  # noqa: D107 - no super().__init__
        self.__dict__.update(inner.__dict__)
        self.inner = inner
        self.log: dict[str, list[Any]] = {}
        self.replay: dict[str, Any] | None = None

    def _rec(self, name: str, value: Any) -> Any:
        self.log.setdefault(name, []).append(copy.copy(value) if name == "worker_state"
                                             else value)
        return value

    def arm(self) -> None:
        """Replay from now on; every worker state is copied ahead of time."""
        ready = {}
        for name, vals in self.log.items():
            if name == "worker_state":
                vals = [_fresh(w) for w in vals]
            ready[name] = iter(vals)
        self.replay = {k: v.__next__ for k, v in ready.items()}


def _fresh(w: Any) -> Any:
    c = copy.copy(w)
    c.results, c.values = list(w.results), dict(w.values)
    return c


def _method(name: str) -> Any:
    def f(self: Replay, *a: Any) -> Any:
        if self.replay is not None:
            return self.replay[name]()
        return self._rec(name, getattr(self.inner, name)(*a))
    return f


for _n in ("worker_state", "work", "plan", "plan_tokens", "synth_inputs", "synth", "judge",
           "judge_tokens", "agent_subtask"):
    setattr(Replay, _n, _method(_n))


def calibrate(n: int = 5_000_000) -> float:
    """CPU ns per iteration of an empty Python loop (best of 3): this machine's speed now."""
    best = float("inf")
    for _ in range(3):
        t = time.process_time()
        for _ in range(n):
            pass
        best = min(best, time.process_time() - t)
    return 1e9 * best / n


def digest(out: list) -> str:
    return hashlib.sha256(json.dumps([[r.answer, repr(r.latency_s), r.tokens, r.calls,
                                       r.decided_by] for r in out]).encode()).hexdigest()


def throughput(n_tasks: int, rounds: int, seed: int) -> tuple[list[list], dict]:
    suite = SynthGAIA(seed=seed)
    tasks = suite.tasks(3, n_tasks)
    rows, res = [], {}
    for lvl, n, w, g, k in ROWS:
        cfg = ExecutionConfig(n_replicas=n, width=w, granularity=g, max_inflight=k, seed=seed)
        arms = {
            "des": lambda: DesRunner(StructuredModel(suite, seed=seed), sync_tools(suite)),
            "asyncio, structured": lambda: TipexRunner(StructuredModel(suite, seed=seed),
                                                       suite.tools(), engine="sim"),
            "asyncio, text (sim loop)": lambda: TipexRunner(ScriptedModel(suite, seed=seed),
                                                            suite.tools(), engine="sim"),
            "asyncio, text (asyncio loop)": lambda: TipexRunner(
                ScriptedModel(suite, seed=seed), suite.tools(), engine="asyncio")}
        runners = {a: make() for a, make in arms.items()}
        for r in runners.values():  # warm caches equally
            r.run(tasks[:5], cfg)
        cpu = {a: float("inf") for a in arms}
        out: dict[str, list] = {}
        for i in range(rounds):
            for a, r in runners.items():
                if i >= 2 and not a.startswith("des"):
                    continue  # the slow arms: best of 2 (their spread is small at this size)
                gc.collect()
                c = time.process_time()
                out[a] = r.run(tasks, cfg)
                cpu[a] = min(cpu[a], time.process_time() - c)
        # the engine alone: the structured model replayed
        rep = Replay(StructuredModel(suite, seed=seed))
        d = DesRunner(rep, sync_tools(suite))
        ref = d.run(tasks, cfg)
        assert digest(ref) == digest(out["des"])
        free = float("inf")
        for _ in range(rounds):
            rep.arm()
            gc.collect()
            c = time.process_time()
            d.run(tasks, cfg)
            free = min(free, time.process_time() - c)
        calls = sum(r.calls for r in out["des"])
        # the same results? answers, tokens, calls and decisions exactly; latencies up to the
        # shared clock's float rounding (the asyncio run has many tasks on one loop, started
        # at different times; tests/test_des.py compares bit for bit, one task per loop)
        x, y = out["des"], out["asyncio, structured"]
        same = [(r.answer, r.tokens, r.calls, r.decided_by) for r in x] == [
            (r.answer, r.tokens, r.calls, r.decided_by) for r in y] and all(
            abs(r.latency_s - q.latency_s) <= 1e-9 * max(1.0, q.latency_s)
            for r, q in zip(x, y))
        us = {a: 1e6 * cpu[a] / calls for a in arms}
        tps = {a: n_tasks / cpu[a] for a in arms}
        engine_us = 1e6 * free / calls
        acc = {a: sum(bool(x.correct) for x in out[a]) / n_tasks for a in arms}
        rows.append([lvl, n, w, g, k or "none", round(calls / n_tasks, 1),
                     round(tps["des"]), round(us["des"], 2), round(engine_us, 2),
                     round(us["des"] - engine_us, 2),
                     round(tps["asyncio, structured"]), round(tps["asyncio, text (sim loop)"]),
                     round(tps["asyncio, text (asyncio loop)"]),
                     round(tps["des"] / tps["asyncio, text (sim loop)"], 1),
                     "yes" if tps["des"] >= 1000 else "no",
                     "yes" if engine_us <= 5 else "no",
                     "yes" if same else "no" + (" (same-time ties under K)" if k else "")])
        res[f"L{lvl}:N{n}:w{w}:g{g}:K{k}"] = {"tasks_per_cpu_s": tps, "us_per_call": us,
                                               "engine_us_per_call": engine_us,
                                               "accuracy": acc, "same_results": same}
    return rows, res


def accuracy(n_tasks: int, seed: int) -> tuple[list[list], dict]:
    """The structured model against the text model, same tasks and configs (K = none)."""
    suite = SynthGAIA(seed=seed)
    rows, res = [], {}
    for lvl in (1, 2, 3):
        tasks = suite.tasks(lvl, n_tasks)
        for name, kw in ACC_CONFIGS:
            cfg = ExecutionConfig(max_inflight=None, seed=seed, **kw)
            text = TipexRunner(ScriptedModel(suite, seed=seed), suite.tools()).run(tasks, cfg)
            fast = DesRunner(StructuredModel(suite, seed=seed), sync_tools(suite)).run(tasks,
                                                                                       cfg)
            a = [float(bool(x.correct)) for x in text]
            b = [float(bool(x.correct)) for x in fast]
            diff = S.paired_diff_ci(b, a, seed=seed)
            disc = sum(x != y for x, y in zip(a, b)) / len(a)
            mde = S.mde_proportion(len(a), paired=True, discordant=max(disc, 1 / len(a)))
            lat = (sum(x.latency_s for x in fast) / len(fast)) / (
                sum(x.latency_s for x in text) / len(text))
            tok = (sum(x.tokens for x in fast) / len(fast)) / (
                sum(x.tokens for x in text) / len(text))
            inside = diff.lo <= 0 <= diff.hi
            rows.append([lvl, name, round(sum(a) / len(a), 3), round(sum(b) / len(b), 3),
                         round(diff.value, 3), f"[{diff.lo:.3f}, {diff.hi:.3f}]", round(mde, 3),
                         "no difference" if inside else "differs", round(lat, 3),
                         round(tok, 3)])
            res[f"L{lvl}:{name}"] = {"text": sum(a) / len(a), "structured": sum(b) / len(b),
                                     "diff": diff.value, "ci": [diff.lo, diff.hi], "mde": mde}
    return rows, res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=200, help="tasks per throughput row")
    ap.add_argument("--acc-tasks", type=int, default=200, help="tasks per accuracy row")
    ap.add_argument("--rounds", type=int, default=5, help="best of this many (des arms)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-results", default="")
    a = ap.parse_args()
    if a.tasks < 10 or a.acc_tasks < 10 or a.rounds < 1:
        raise SystemExit("--tasks and --acc-tasks must be >= 10, --rounds >= 1")
    clock = R.Clock()
    threads = R.apply_threads(1)
    cal0 = calibrate()
    rows, res = throughput(a.tasks, a.rounds, a.seed)
    cal1 = calibrate()
    cols = ["level", "N", "w", "g", "K", "model calls per task", "tasks per CPU s (des)",
            "CPU us per model call (des)", "engine us per call (model replayed)",
            "model us per call", "tasks per CPU s (asyncio, structured)",
            "tasks per CPU s (asyncio, text, sim loop)",
            "tasks per CPU s (asyncio, text, asyncio loop)", "des / asyncio text (sim)",
            ">= 1,000 tasks/CPU s", "engine <= 5 us/call", "same results as asyncio"]
    t1 = R.make_table(f"Throughput on level 3, {a.tasks} tasks per row, one process (CPU time,"
                      f" best of {a.rounds} for des, 2 for the asyncio arms)", cols, rows,
                      name="throughput")
    for row in rows:
        print(dict(zip(cols, row)), flush=True)
    arows, ares = accuracy(a.acc_tasks, a.seed)
    acols = ["level", "config", "accuracy (text model)", "accuracy (structured model)",
             "structured - text", "95% CI (paired)", "MDE (paired)", "verdict",
             "latency ratio (structured / text)", "token ratio (structured / text)"]
    for row in arows:
        print(dict(zip(acols, row)), flush=True)
    t2 = R.make_table(f"The structured model against the text model: {a.acc_tasks} tasks per "
                      "level, K = none, seed 0 (des runs the structured one)", acols, arows,
                      name="accuracy")
    t3 = R.make_table("CPU-time calibration: ns per empty Python loop iteration (best of 3), "
                      "before and after the throughput rows", ["before", "after"],
                      [[round(cal0, 2), round(cal1, 2)]], name="calibration")
    timing = {"why": "CPU time of this shared machine under its load (or a ratio or verdict "
              "computed from it): shown, not compared", "timing": True}
    tol = {c: timing for c in cols if "CPU" in c or "us" in c or "/" in c or "1,000" in c
           or "5 us" in c}
    tol.update({"before": timing, "after": timing})
    if a.out_results:
        R.write(a.out_results, [t1, t2, t3], plugin="tipex", seeds=[a.seed], clock=clock,
                threads=threads, quick=False, tolerance=tol,
                command=" ".join(["python", "plugins/tipex/benchmarks/fast_bench.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]),
                metrics={"throughput": res, "accuracy": ares,
                         "calibration_ns_per_loop": [cal0, cal1]})


if __name__ == "__main__":
    main()
