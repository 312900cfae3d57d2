"""Benchmark: the tool-calling LLM agent (SmolLM2-135M-Instruct from icml.models, offline) on
every task and condition next to the scripted agents, and the LLM judge against the rule judge
on the scripted agents' runs. One process, same suite, same timing (perf_counter per run).

    python plugins/bioagent-bench/benchmarks/bench_llm.py [--model smollm2-135m-instruct] \
        [--out-results plugins/bioagent-bench/results/bench_llm.json]

``--out-results`` writes the LLM agent's completion table as a results file (``icml.results``).
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import tempfile
import time
from pathlib import Path

from icml import results as R


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--no-prefix", action="store_true", help="do not prefill the JSON start")
    ap.add_argument("--out-results", default="", help="write the table as a results file")
    args = ap.parse_args()
    clock = R.Clock()
    threads = R.apply_threads(1)  # ICML_THREADS when set (icml reproduce --threads)
    from icml_bioagent_bench.agents import ScriptedAgent
    from icml_bioagent_bench.config import LLMConfig
    from icml_bioagent_bench.harness import run_agent
    from icml_bioagent_bench.judge import LLMJudge, RuleJudge, transformers_generator
    from icml_bioagent_bench.llm_agent import TransformersToolAgent, load_llm
    from icml_bioagent_bench.suite import completion_table, evaluate_suite, make_suite

    model, tok = load_llm(args.model)
    prefix = not args.no_prefix
    with tempfile.TemporaryDirectory() as d:
        suite = make_suite(Path(d))
        llm = TransformersToolAgent(LLMConfig(model_name=args.model, max_turns=args.max_turns,
                                              json_prefix=prefix), model, tok)
        t0 = time.perf_counter()
        recs = evaluate_suite(suite, [llm], Path(d) / "runs_llm")
        t_llm = time.perf_counter() - t0
        parsed = sum(s["returncode"] == 0 for r in recs for s in r.trace["steps"])
        total = sum(len(r.trace["steps"]) for r in recs)
        tools = sorted({s["action"][:40] for r in recs for s in r.trace["steps"]
                        if s["returncode"] == 0})
        cols, rows = completion_table(recs)
        print(f"LLM agent {args.model}, json_prefix={prefix}, {len(recs)} runs in {t_llm:.0f} s;"
              f" {parsed}/{total} actions valid; distinct valid actions: {tools[:5]}")
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for row in rows:
            print("| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v)
                                    for v in row) + " |")
        # LLM judge vs rule judge on the scripted agents' runs
        gen = transformers_generator(model, tok, max_new_tokens=80,
                                     prefix='{"steps_completed": ' if prefix else "")
        judge = LLMJudge(gen, retries=0, fallback=None)
        from icml_bioagent_bench.judge import JudgeError, completion_rate, judge_evidence
        from icml_bioagent_bench.scoring import score_results

        agree = n = valid = 0
        t0 = time.perf_counter()
        rule_c, llm_c = [], []
        for key, task in suite.items():
            for p in ("correct", "naive"):
                rec = run_agent(task, ScriptedAgent(p), Path(d) / "j",
                                run_id=f"{key[0]}-{key[1]}-{p}", judge=RuleJudge())
                n += 1
                ws = Path(rec.workspace)
                score = score_results(task.task_id, ws / "results", task.truth_dir)
                try:
                    a = judge.assess(task, ws, score, judge_evidence(task, ws, score))
                except JudgeError:
                    continue
                valid += 1
                agree += a.final_result_reached == rec.assessment["final_result_reached"]
                rule_c.append(rec.completion_rate)
                llm_c.append(completion_rate(a))
        t_j = time.perf_counter() - t0
        from icml_bioagent_bench.robustness import pearson

        print(f"\nLLM judge on {n} scripted runs (correct, naive) in {t_j:.0f} s: {valid}/{n} "
              f"answers fit the schema. On those: final_result_reached agrees with the rule "
              f"judge on {agree}/{valid}; Pearson(completion rule, completion LLM) = "
              f"{pearson(rule_c, llm_c):.2f}; mean completion rule "
              f"{100 * sum(rule_c) / max(valid, 1):.1f} %, LLM "
              f"{100 * sum(llm_c) / max(valid, 1):.1f} %")
        if args.out_results:
            agent_table = R.make_table(
                f"LLM agent {args.model}, json_prefix={prefix}, {args.max_turns} tool calls per "
                "run", cols, rows, name="llm-agent", formats={c: ".1f" for c in cols if "%" in c})
            actions = R.make_table(
                "LLM agent's actions (valid = parsed as a JSON tool call and run)",
                ["runs", "actions", "valid actions", "distinct valid actions", "agent s"],
                [[len(recs), total, parsed, ", ".join(tools), t_llm]], name="llm-actions",
                formats={"agent s": ".0f"})
            judge_table = R.make_table(
                f"LLM judge ({args.model}) vs the rule judge on the scripted agents' runs "
                "(correct, naive)",
                ["runs judged", "answers fit the schema", "final_result_reached agrees",
                 "Pearson completion (rule, LLM)", "mean completion rule %",
                 "mean completion LLM %", "judge s"],
                [[n, valid, agree, _finite(pearson(rule_c, llm_c)),
                  100 * sum(rule_c) / valid if valid else None,
                  100 * sum(llm_c) / valid if valid else None, t_j]],
                name="llm-judge",
                formats={"Pearson completion (rule, LLM)": ".2f", "mean completion rule %": ".1f",
                         "mean completion LLM %": ".1f", "judge s": ".0f"})
            R.write(args.out_results, [agent_table, actions, judge_table],
                    plugin="bioagent-bench", clock=clock, threads=threads, quick=False,
                    tolerance={"agent s": {"timing": True, "why": "wall time on a shared machine"},
                               "judge s": {"timing": True, "why": "wall time on a shared machine"}},
                    command=" ".join(["python", "plugins/bioagent-bench/benchmarks/bench_llm.py"]
                                     + [shlex.quote(x) for x in sys.argv[1:]]))


if __name__ == "__main__":
    main()
