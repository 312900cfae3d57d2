"""Benchmark: SmolLM2 with constrained tool-call decoding on all ten official tasks x trials,
graded by the official rules, and the same model as the pipeline judge (constrained to the
official schema) against the rule judge, with confidence intervals.

    python plugins/bioagent-bench/benchmarks/bench_agent.py --trials 3 \
        --out-results plugins/bioagent-bench/results/bench_agent.json

Runs: the LLM agent on every task's clean instance, ``--trials`` times (trial t samples its
choices with seed t at ``--temperature``, the official 0.2); the scripted ``correct`` agent on
every clean task and the ``naive`` one on every decoy task as the judge's known cases. The LLM
judge sees the official evidence (prompt, files, artifact tree, result and truth snippets,
metrics, rule, deterministic score) of every one of these runs.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

from icml import results as R


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--tasks", default="all", help="comma-separated task ids or 'all'")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.2)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--judge-prompt-tokens", type=int, default=1536,
                    help="the judge prompt is left-truncated to this many tokens")
    ap.add_argument("--out-results", default="")
    args = ap.parse_args()
    clock = R.Clock()
    threads = R.apply_threads(args.threads)
    import numpy as np
    import torch
    from icml_bioagent_bench.agents import ScriptedAgent
    from icml_bioagent_bench.config import LLMConfig
    from icml_bioagent_bench.constrained import constrained_judge_generator
    from icml_bioagent_bench.harness import run_agent
    from icml_bioagent_bench.judge import JudgeError, LLMJudge, completion_rate, judge_evidence
    from icml_bioagent_bench.llm_agent import TransformersToolAgent, load_llm
    from icml_bioagent_bench.robustness import pearson
    from icml_bioagent_bench.scoring import score_results
    from icml_bioagent_bench.suite import make_suite
    from icml_bioagent_bench.tasks import ALL_TASK_IDS

    from icml import stats

    tasks = list(ALL_TASK_IDS) if args.tasks == "all" else args.tasks.split(",")
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    model, tok = load_llm(args.model, device=args.device, dtype=dtype)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        suite = make_suite(Path(d), tasks=tasks, conditions=("clean", "decoy"))
        llm_recs, t_agent = [], 0.0
        for trial in range(args.trials):
            cfg = LLMConfig(model_name=args.model, max_turns=args.max_turns,
                            decoding="constrained", temperature=args.temperature,
                            sample_seed=trial)
            agent = TransformersToolAgent(cfg, model, tok)
            for tid in tasks:
                t0 = time.perf_counter()
                rec = run_agent(suite[(tid, "clean")], agent, Path(d) / "runs",
                                run_id=f"{tid}-llm-t{trial}", freeze=False)
                t_agent += time.perf_counter() - t0
                llm_recs.append((trial, rec))
                print(f"trial {trial} {tid}: match={rec.results_match} completion="
                      f"{rec.completion_rate:.2f} actions="
                      f"{[s['action'][:60] for s in rec.trace['steps']]}", flush=True)
        known = []
        for tid in tasks:
            known.append(run_agent(suite[(tid, "clean")], ScriptedAgent("correct"),
                                   Path(d) / "runs", run_id=f"{tid}-correct", freeze=False))
            known.append(run_agent(suite[(tid, "decoy")], ScriptedAgent("naive"),
                                   Path(d) / "runs", run_id=f"{tid}-decoy-naive", freeze=False))
        judge = LLMJudge(constrained_judge_generator(
            model, tok, max_prompt_tokens=args.judge_prompt_tokens), retries=0, fallback=None)
        judged, t_judge = [], 0.0
        for src, rec in [("llm agent", r) for _, r in llm_recs] + [
                (f"scripted {r.agent} ({r.condition})", r) for r in known]:
            task = suite[(rec.task_id, rec.condition)]
            ws = Path(rec.workspace)
            score = score_results(task.task_id, ws / "results", task.truth_dir)
            t0 = time.perf_counter()
            try:
                a = judge.assess(task, ws, score, judge_evidence(task, ws, score))
            except JudgeError as exc:
                print(f"judge failed on {rec.task_id}: {exc}")
                continue
            t_judge += time.perf_counter() - t0
            judged.append((src, rec, a))
    # -- tables ---------------------------------------------------------------------------
    per_task = []
    for tid in tasks:
        rs = [r for _, r in llm_recs if r.task_id == tid]
        steps = [s for r in rs for s in r.trace["steps"]]
        per_task.append([tid, len(rs), sum(r.results_match for r in rs),
                         100 * float(np.mean([r.completion_rate for r in rs])),
                         100 * float(np.mean([r.adjusted_completion_rate for r in rs])),
                         len(steps), sum(s["returncode"] == 0 for s in steps),
                         sum('"run_step"' in s["action"] and s["returncode"] == 0
                             for s in steps),
                         sum('"finish"' in s["action"] for s in steps)])
    M = np.array([[float(r.results_match) for t, r in llm_recs if t == trial]
                  for trial in range(args.trials)])
    C = np.array([[r.completion_rate for t, r in llm_recs if t == trial]
                  for trial in range(args.trials)])
    rm = stats.proportion_ci(M.ravel())  # Wilson: stays open at 0/n
    cm = stats.hierarchical_ci(C)  # completion: two-level bootstrap over trials and tasks
    n = M.size
    summary = [["llm (constrained)", n, 100 * rm.value, 100 * rm.lo, 100 * rm.hi,
                100 * cm.value, 100 * cm.lo, 100 * cm.hi,
                min(100.0, 100 * stats.mde_proportion(n, p=max(rm.value, 1 / n)))]]
    for name in ("correct", "naive"):
        rs = [r for r in known if r.agent == name]
        e = stats.proportion_ci([float(r.results_match) for r in rs])
        c = stats.mean_ci([r.completion_rate for r in rs])
        summary.append([f"scripted {name} ({rs[0].condition})", len(rs), 100 * e.value,
                        100 * e.lo, 100 * e.hi, 100 * c.value, 100 * c.lo, 100 * c.hi,
                        None])
    judge_rows = []
    for label, sel in (("all judged runs", lambda s: True),
                       ("llm agent runs", lambda s: s == "llm agent"),
                       ("scripted runs", lambda s: s != "llm agent")):
        js = [(r, a) for s, r, a in judged if sel(s)]
        if not js:
            continue
        rule = [bool(r.assessment["final_result_reached"]) for r, _ in js]
        llmj = [bool(a.final_result_reached) for _, a in js]
        agree = stats.proportion_ci([float(x == y) for x, y in zip(rule, llmj)])
        base = max(np.mean(rule), 1 - np.mean(rule))
        rc = [r.completion_rate for r, _ in js]
        lc = [completion_rate(a) for _, a in js]
        pr = pearson(rc, lc)
        judge_rows.append([label, len(js), 100 * float(np.mean(rule)),
                           100 * float(np.mean(llmj)), 100 * agree.value, 100 * agree.lo,
                           100 * agree.hi, 100 * float(base),
                           pr if math.isfinite(pr) else None,
                           100 * float(np.mean(rc)), 100 * float(np.nanmean(lc))])
    timing = [[len(llm_recs), t_agent, t_agent / max(len(llm_recs), 1), len(judged), t_judge,
               t_judge / max(len(judged), 1), load]]
    for row in per_task:
        print(row)
    for row in summary + judge_rows + timing:
        print(row)
    if args.out_results:
        pct = ".1f"
        tabs = [
            R.make_table(f"SmolLM2 ({args.model}) with constrained tool-call decoding, "
                         f"{args.trials} trials per task (temperature {args.temperature:g}, "
                         f"{args.max_turns} actions per run, {args.dtype})",
                         ["task", "runs", "results_match", "completion %",
                          "adjusted completion %", "actions", "actions without error",
                          "pipeline steps run", "finish calls"], per_task, name="agent-tasks",
                         formats={"completion %": pct, "adjusted completion %": pct}),
            R.make_table("results_match and completion rate over tasks x trials (95 % CIs: "
                         "Wilson for results_match, a two-level bootstrap over trials and "
                         "tasks for the LLM agent's completion, an item bootstrap for the "
                         "scripted references'); MDE = minimum detectable difference of "
                         "results_match rates at this n (80 % power)",
                         ["agent", "runs", "results_match %", "CI low", "CI high",
                          "completion %", "completion CI low", "completion CI high", "MDE %"],
                         summary, name="agent-summary",
                         formats={c: pct for c in ("results_match %", "CI low", "CI high",
                                                   "completion %", "completion CI low",
                                                   "completion CI high", "MDE %")}),
            R.make_table("The same model as the pipeline judge (constrained to the official "
                         "schema) against the rule judge: final_result_reached rates, their "
                         "agreement (Wilson 95 % CI) next to the agreement of always giving "
                         "the majority answer, and the completion rates",
                         ["runs", "n", "rule: final_result_reached %",
                          "LLM: final_result_reached %", "agreement %", "CI low", "CI high",
                          "majority-answer agreement %", "Pearson completion",
                          "completion rule %", "completion LLM %"], judge_rows,
                         name="judge-agreement",
                         formats={c: pct for c in ("rule: final_result_reached %",
                                                   "LLM: final_result_reached %",
                                                   "agreement %", "CI low", "CI high",
                                                   "majority-answer agreement %",
                                                   "completion rule %", "completion LLM %")}
                         | {"Pearson completion": ".2f"}),
            R.make_table("Time (clock readings on the shared machine; load = 1-min load "
                         "average at the start)",
                         ["agent runs", "agent s", "s per run", "judged runs", "judge s",
                          "s per judgement", "load"], timing, name="agent-time",
                         formats={"agent s": ".0f", "s per run": ".1f", "judge s": ".0f",
                                  "s per judgement": ".1f", "load": ".1f"}),
        ]
        R.write(args.out_results, tabs, plugin="bioagent-bench", clock=clock, threads=threads,
                quick=False, seeds=list(range(args.trials)),
                tolerance={c: {"timing": True, "why": "wall time on a shared machine"}
                           for c in ("agent s", "s per run", "judge s", "s per judgement",
                                     "load")},
                command=" ".join(["python", "plugins/bioagent-bench/benchmarks/bench_agent.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]))


if __name__ == "__main__":
    main()
