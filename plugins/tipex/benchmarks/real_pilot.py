"""SmolLM2-135M-Instruct on the protocol, with and without constrained decoding (a pilot).

    python plugins/tipex/benchmarks/real_pilot.py --tasks 3 --dtype bfloat16 \
        --out-results plugins/tipex/results/real_pilot.json

Part 1, plans: the planner prompt of ``--tasks`` tasks per level (levels 1 and 2, g = 2,
greedy), free (``max_tokens`` 160, room for a 3-subtask plan) and constrained; how many replies
``parse_plan`` accepts. Part 2, end to end (constrained, greedy, wall clock): the bare agent
(N = 1) and one DAG path (N = 1, w = 2, g = 2) on the same tasks: accuracy, model calls and tool
calls per task, and the share of worker steps that call a tool (the calibration of the scripted
model's per-step error against context length needs tool-call steps). ``--tool-first``: the
constrained worker's first reply on a subtask must call a tool (``named``, the default: when
the plan's subtask names its tool; ``any``; ``off``, 0.3.0's grammar). Cost: seconds per
generated token. One thread.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

from icml_tipex import roles
from icml_tipex.clock import run
from icml_tipex.plan import PlanError, parse_plan
from icml_tipex.runner import ExecutionConfig, TipexRunner
from icml_tipex.synthgaia import SynthGAIA

from icml import results as R
from icml import stats as S


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=3, help="tasks per level (levels 1 and 2)")
    ap.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tool-first", default="named", choices=("named", "any", "off", "once"))
    ap.add_argument("--out-results", default="")
    a = ap.parse_args()
    if a.tasks < 1:
        raise SystemExit("--tasks must be >= 1")
    import torch
    from icml_tipex.hf import load_chat_model

    clock = R.Clock()
    threads = R.apply_threads(1)
    dtype = getattr(torch, a.dtype)
    models = {c: load_chat_model("pretrained", device=a.device, dtype=dtype,
                                 constrained=c == "constrained", tool_first=a.tool_first)
              for c in ("free", "constrained")}
    suite = SynthGAIA(seed=a.seed)
    tools = suite.tools()
    tasks = {lvl: suite.tasks(lvl, a.tasks) for lvl in (1, 2)}
    rows, parsed = [], {}
    for arm, m in models.items():
        ok, toks, secs = [], 0, 0.0
        for lvl, ts in tasks.items():
            for t in ts:
                c0 = time.perf_counter()
                c = run(m.generate(roles.planner_messages(t.task_id, t.question, 2),
                                   temperature=0.0, seed=a.seed, max_tokens=160), "wall")
                secs += time.perf_counter() - c0
                toks += c.completion_tokens
                try:
                    parse_plan(c.text, tools=tools, max_subtasks=3)
                    ok.append(1.0)
                except PlanError:
                    ok.append(0.0)
                print(arm, lvl, t.task_id, ok[-1], repr(c.text[:120]), flush=True)
        est = S.summarize(ok)["mean"]
        parsed[arm] = ok
        rows.append([arm, len(ok), int(sum(ok)), round(sum(ok) / len(ok), 3),
                     f"[{est['lo']:.2f}, {est['hi']:.2f}]", round(secs / max(1, toks), 3)])
    t1 = R.make_table("Planner replies that parse (levels 1 and 2, g = 2, greedy)",
                      ["decoding", "replies", "parse", "parse rate", "95% CI",
                       "s per generated token"], rows, name="plans")
    erows = []
    m = models["constrained"]
    r = TipexRunner(m, tools, clock="wall")
    for name, kw in (("bare agent N=1", dict(planner="chain")),
                     ("DAG N=1 w=2 g=2", dict(width=2, granularity=2))):
        cfg = ExecutionConfig(max_inflight=None, n_replicas=1, temperature=0.0, seed=a.seed,
                              max_tokens=96, max_worker_steps=4, **kw)
        for lvl, ts in tasks.items():
            c0 = time.perf_counter()
            res = r.run(ts, cfg, trace=True)
            secs = time.perf_counter() - c0
            calls = [e for x in res for e in x.trace.calls()]
            worker = [e for e in calls if e["role"] == "worker"]
            tool = [e for x in res for e in x.trace.events if e["kind"] == "tool"]
            plan_err = sum("PlanError" in (p.error or "") for x in res for p in x.replicas)
            acc = [float(bool(x.correct)) for x in res]
            erows.append([name, lvl, len(res), round(sum(acc) / len(acc), 3),
                          round(len(calls) / len(res), 2), round(len(tool) / len(res), 2),
                          round(len(tool) / max(1, len(worker)), 3), plan_err,
                          round(secs / len(res), 1)])
            print(erows[-1], flush=True)
    t2 = R.make_table("End to end, constrained SmolLM2 (greedy, max_tokens 96, at most 4 "
                      f"worker steps, tool_first={a.tool_first})",
                      ["config", "level", "tasks", "accuracy", "model calls per task",
                       "tool calls per task", "tool calls per worker step", "plan errors",
                       "wall s per task"], erows, name="end-to-end")
    timing = {"timing": True, "why": "time on a shared machine: shown, not compared"}
    if a.out_results:
        R.write(a.out_results, [t1, t2], plugin="tipex", seeds=[a.seed], clock=clock,
                threads=threads, quick=False,
                tolerance={"s per generated token": timing, "wall s per task": timing},
                command=" ".join(["python", "plugins/tipex/benchmarks/real_pilot.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]),
                metrics={"parsed": parsed, "dtype": a.dtype, "tool_first": a.tool_first})


if __name__ == "__main__":
    main()
