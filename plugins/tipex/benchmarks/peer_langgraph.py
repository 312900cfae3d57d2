"""Peer: the same structural-parallel path (planner -> subtask DAG -> workers -> synthesizer, the
same prompts, scripted model and tools) as a LangGraph graph with Send fan-out, against TIPEX's
ready-set scheduler. LangGraph runs in supersteps (a barrier after every wave of Sends), TIPEX
starts a subtask as soon as its parents finish; same seeds give the same model calls, so accuracy
and tokens match and the latency difference is the scheduling semantics. Also the framework
overhead per model call of both on the wall clock with a zero-latency model.

LangGraph is not a dependency (a peer, benchmark only):
    python3 -m venv /tmp/peer && . /tmp/peer/bin/activate && pip install 'langgraph>=1.0'
    PYTHONPATH=plugins/tipex/src OMP_NUM_THREADS=1 \
        python plugins/tipex/benchmarks/peer_langgraph.py --tasks 50 \
        --out-results plugins/tipex/results/peer_langgraph.json

``--out-results FILE`` writes both tables as a results file (``icml.results``); the wall time
per model call is a clock reading (declared ``timing``), everything else is on the virtual clock
and exact.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import operator
import shlex
import sys
import time
from typing import Annotated, Any, TypedDict

from icml_tipex import roles
from icml_tipex.clock import run
from icml_tipex.plan import Subtask, parse_plan
from icml_tipex.runner import ExecutionConfig, TipexRunner
from icml_tipex.scripted import ScriptedModel
from icml_tipex.synthgaia import SynthGAIA


def _merge(a: dict, b: dict) -> dict:
    return {**a, **b}


class PathState(TypedDict, total=False):
    task_id: str
    question: str
    plan: list[dict]
    results: Annotated[dict, _merge]
    tokens: Annotated[int, operator.add]
    answer: str


def build_graph(model: Any, tools: dict, granularity: int, seed: int, temperature: float) -> Any:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    tokens_box = {"n": 0}

    async def call(role: str, sub: str, messages: list) -> Any:
        c = await model.generate(messages, temperature=temperature, seed=seed, max_tokens=512)
        tokens_box["n"] += c.total_tokens
        return c

    async def tool(sub: str, name: str, text: str, args: list) -> str:
        fn = tools.get(name)
        return await fn(*args) if fn else f"error: unknown tool {name!r}"

    async def plan_node(s: PathState) -> dict:
        c = await call("planner", "plan", roles.planner_messages(s["task_id"], s["question"],
                                                                 granularity))
        p = parse_plan(c.text, tools=tools, max_subtasks=granularity + 1)
        return {"plan": [x.to_dict() for x in p.subtasks], "results": {}}

    async def work_node(w: dict) -> dict:
        d = w["sub"]
        sub = Subtask(d["id"], d["goal"], tuple(d["deps"]), d.get("tool"),
                      {k: v for k, v in d.items() if k not in ("id", "goal", "deps", "tool")})
        out = await roles.work(call, tool, tools, w["task_id"], w["question"], sub,
                               w["parents"], 24)
        return {"results": {sub.id: out}}

    def join_node(s: PathState) -> dict:
        return {}

    def dispatch(s: PathState) -> Any:
        done = s.get("results", {})
        ready = [d for d in s["plan"] if d["id"] not in done
                 and all(u in done for u in d["deps"])]
        if not ready:
            return "synth"
        return [Send("work", {"sub": d, "parents": {u: done[u] for u in d["deps"]},
                              "task_id": s["task_id"], "question": s["question"]})
                for d in ready]

    async def synth_node(s: PathState) -> dict:
        from icml_tipex.plan import Plan

        p = Plan(tuple(Subtask(d["id"], d["goal"], tuple(d["deps"])) for d in s["plan"]))
        ans = await roles.synthesize(call, s["task_id"], s["question"], p, s["results"])
        return {"answer": ans}

    g = StateGraph(PathState)
    g.add_node("plan", plan_node)
    g.add_node("join", join_node)
    g.add_node("work", work_node)
    g.add_node("synth", synth_node)
    g.add_edge(START, "plan")
    g.add_edge("plan", "join")
    g.add_conditional_edges("join", dispatch, ["work", "synth"])
    g.add_edge("work", "join")
    g.add_edge("synth", END)
    return g.compile(), tokens_box


async def langgraph_solve(graph: Any, task: Any, width: int) -> tuple[str, float]:
    import asyncio

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    out = await graph.ainvoke({"task_id": task.task_id, "question": task.question},
                              {"max_concurrency": width, "recursion_limit": 200})
    return out.get("answer", ""), loop.time() - t0


TABLES: list[dict] = []  # every table printed, for --out-results


def table(title: str, cols: list[str], rows: list[list], name: str) -> None:
    from icml import results

    def f(v: object) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)
    print(f"\n{title}\n\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f(v) for v in r) + " |")
    fmts = {c: ".3g" for j, c in enumerate(cols) if any(isinstance(r[j], float) for r in rows)}
    TABLES.append(results.make_table(title, cols, rows, name=name, formats=fmts))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=50)
    ap.add_argument("--out-results", default="",
                    help="also write the tables as a results file "
                         "(plugins/tipex/results/NAME.json)")
    a = ap.parse_args()
    from icml import results

    clock = results.Clock()
    suite = SynthGAIA(seed=0)
    model = ScriptedModel(suite)
    tools = suite.tools()
    runner = TipexRunner(model, tools)
    rows = []
    for level in (2, 3):
        tasks = suite.tasks(level, a.tasks)
        for w in (1, 2, 4, 8):
            cfg = ExecutionConfig(width=w, granularity=8, seed=0, call_timeout_s=None,
                                  max_inflight=None)
            res = runner.run(tasks, cfg)
            graph, box = build_graph(model, tools, 8, cfg.replica_seed(0), cfg.temperature)

            async def lg(graph: Any = graph, tasks: list = tasks, w: int = w) -> list:
                return [await langgraph_solve(graph, t, w) for t in tasks]

            # LangGraph runs sync nodes in an executor thread: the asyncio engine allows that
            lg_out = run(lg(), "virtual", engine="asyncio")
            same = sum(r.answer == ans for r, (ans, _) in zip(res, lg_out))
            lat_t = sum(r.latency_s for r in res) / len(res)
            lat_l = sum(x for _, x in lg_out) / len(lg_out)
            rows.append([level, w, sum(bool(r.correct) for r in res) / len(res),
                         sum(ans == t.answer for (ans, _), t in zip(lg_out, tasks)) / len(tasks),
                         f"{same}/{len(tasks)}", sum(r.tokens for r in res) / len(res),
                         box["n"] / len(tasks), lat_t, lat_l, lat_l / lat_t])
    table(f"TIPEX vs LangGraph {md.version('langgraph')} (Send fan-out, supersteps) on the "
          f"same path, N=1, g=8, {a.tasks} tasks per level, virtual clock",
          ["level", "w", "TIPEX acc", "LangGraph acc", "same answers", "TIPEX tokens",
           "LangGraph tokens", "TIPEX latency s", "LangGraph latency s", "LangGraph / TIPEX"],
          rows, name="semantics")
    # overhead per model call on the wall clock, zero latency
    zsuite = SynthGAIA(seed=0, tool_latency={"lookup": 0, "search": 0, "calc": 0})
    zmodel = ScriptedModel(zsuite, latency_scale=0.0)
    ztools = zsuite.tools()
    zr = TipexRunner(zmodel, ztools, clock="wall")
    tasks = zsuite.tasks(3, a.tasks)
    cfg = ExecutionConfig(width=4, granularity=8, call_timeout_s=None, max_inflight=None)
    graph, _ = build_graph(zmodel, ztools, 8, cfg.replica_seed(0), cfg.temperature)
    best = {"TIPEX": float("inf"), "LangGraph": float("inf")}
    calls = {}
    for _ in range(3):
        zmodel.calls = 0
        t = time.perf_counter()
        zr.run(tasks, cfg)
        best["TIPEX"] = min(best["TIPEX"], time.perf_counter() - t)
        calls["TIPEX"] = zmodel.calls
        zmodel.calls = 0

        async def lg() -> None:
            for t_ in tasks:
                await langgraph_solve(graph, t_, 4)

        t = time.perf_counter()
        run(lg(), "wall")
        best["LangGraph"] = min(best["LangGraph"], time.perf_counter() - t)
        calls["LangGraph"] = zmodel.calls
    table(f"Wall time per model call (level 3, w=4, g=8, zero-latency scripted model, "
          f"{a.tasks} tasks one after another, best of 3)",
          ["framework", "model calls", "us per call"],
          [[k, calls[k], best[k] / calls[k] * 1e6] for k in best], name="overhead")
    if a.out_results:
        out = results.write(
            a.out_results, TABLES, plugin="tipex", seeds=[0], clock=clock, threads=1,
            command="python " + shlex.join(["plugins/tipex/benchmarks/peer_langgraph.py",
                                            *sys.argv[1:]]),
            tolerance={"us per call": {"timing": True, "why": "wall clock of one process on a "
                                       "shared CPU: shown, never compared"}})
        print(f"# wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
