"""Benchmark: generate and grade the whole suite with the scripted agents, per tool backend
(pypi: pysam + mappy; debian: bwa, samtools, bcftools, salmon, kraken2; builtin: pure Python),
time per task and total, the completion table per agent and condition, and the DE test against
the pydeseq2 peer where installed. Every arm runs the same suite in the same process, timed with
perf_counter around generation and around run+grade.

    python plugins/bioagent-bench/benchmarks/bench_suite.py [--backends pypi debian builtin] \
        [--out-results plugins/bioagent-bench/results/bench_suite.json]

``--out-results`` writes the tables as a results file (``icml.results``); the seconds and the
ratios of seconds are clock readings, declared ``timing`` (shown, never compared on a rerun).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from pathlib import Path

from icml import results as R

TIMING = {c: {"timing": True, "why": "wall-clock seconds on a shared machine (or their ratio): "
              "shown, not compared"}
          for c in ("generate s", "run+grade s (12 runs)", "total s", "total vs pypi",
                    "seconds")}


def run_backend(backend: str, root: Path, seed: int) -> dict:
    from icml_bioagent_bench.agents import ScriptedAgent
    from icml_bioagent_bench.suite import completion_table, evaluate_suite, make_suite

    gen: dict[str, float] = {}
    t0 = time.perf_counter()
    suite = make_suite(root, seed=seed, timings=gen)
    t_gen = time.perf_counter() - t0
    agents = [ScriptedAgent(p, backend=backend) for p in ("correct", "naive", "robust")]
    t0 = time.perf_counter()
    recs = evaluate_suite(suite, agents, root / "runs")
    t_run = time.perf_counter() - t0
    per_task = {tid: (gen[tid], sum(r.seconds for r in recs if r.task_id == tid))
                for tid in gen}
    return {"gen": t_gen, "run": t_run, "per_task": per_task, "records": recs,
            "table": completion_table(recs)}


def de_peer(root: Path, seed: int) -> list[list]:
    """Built-in DE test vs pydeseq2 on the deseq task: planted genes found, false calls, time."""
    from icml_bioagent_bench.de import differential_expression
    from icml_bioagent_bench.tasks.deseq import make_deseq_task
    from icml_bioagent_bench.tools import has_tool

    task = make_deseq_task(root / "de", seed=seed)
    truth = {ln.split(",")[0] for ln in (task.truth_dir / "de_genes.csv").read_text()
             .splitlines()[1:]}
    rows = []
    for b in ("builtin", "pydeseq2"):
        if not has_tool(b):
            continue
        t0 = time.perf_counter()
        genes, tab, _ = differential_expression(task.data_dir / "counts.tsv",
                                                task.data_dir / "samples.tsv",
                                                reference_level="planktonic", backend=b)
        dt = time.perf_counter() - t0
        sig = {g for g, p in zip(genes, tab["padj"]) if p == p and p < 0.05}
        rows.append([b, len(sig), len(sig & truth), len(sig - truth), dt])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backends", nargs="+", default=["pypi", "debian", "builtin"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-results", default="", help="write the tables as a results file")
    args = ap.parse_args()
    clock = R.Clock()
    tables = []
    from icml_bioagent_bench.tools import ToolMissingError, resolve

    results = {}
    for b in args.backends:
        try:
            for stage in ("align", "call", "quant", "classify"):
                resolve(stage, b)
        except ToolMissingError as exc:
            print(f"skip {b}: {exc}")
            continue
        with tempfile.TemporaryDirectory() as d:
            results[b] = run_backend(b, Path(d), args.seed)
            from icml_bioagent_bench.workspace import remove_tree

            remove_tree(Path(d) / "runs")
    base = results.get("pypi") or next(iter(results.values()))
    trows = []
    for b, r in results.items():
        for tid, (g, s) in r["per_task"].items():
            bg, bs = base["per_task"][tid]
            trows.append([b, tid, g, s, g + s, (g + s) / (bg + bs)])
        tot, btot = r["gen"] + r["run"], base["gen"] + base["run"]
        trows.append([b, "**all (48 runs)**", r["gen"], r["run"], tot, tot / btot])
    tables.append(R.make_table(
        "Time to generate and grade the whole suite per tool backend",
        ["backend", "task", "generate s", "run+grade s (12 runs)", "total s", "total vs pypi"],
        trows, name="time", formats={"generate s": ".2f", "run+grade s (12 runs)": ".2f",
                                     "total s": ".2f", "total vs pypi": ".2f"}))
    print("| backend | task | generate s | run+grade s (12 runs) | total s | total vs pypi |")
    print("|---|---|---|---|---|---|")
    for b, r in results.items():
        for tid, (g, s) in r["per_task"].items():
            bg, bs = base["per_task"][tid]
            print(f"| {b} | {tid} | {g:.2f} | {s:.2f} | {g + s:.2f} | {(g + s) / (bg + bs):.2f}x |")
        tot, btot = r["gen"] + r["run"], base["gen"] + base["run"]
        print(f"| {b} | **all (48 runs)** | {r['gen']:.2f} | {r['run']:.2f} | {tot:.2f} | "
              f"{tot / btot:.2f}x |")
    print()
    for b, r in results.items():
        cols, rows = r["table"]
        tables.append(R.make_table(f"Completion per agent and condition, backend={b}", cols,
                                   rows, name=f"completion-{b}",
                                   formats={c: ".1f" for c in cols
                                            if any(isinstance(row[cols.index(c)], float)
                                                   for row in rows)}))
        print(f"completion table, backend={b}")
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for row in rows:
            print("| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v)
                                    for v in row) + " |")
        print()
    with tempfile.TemporaryDirectory() as d:
        rows = de_peer(Path(d), args.seed)
    print("| DE test | genes padj<0.05 | planted found (of 30) | false calls | seconds |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row[0]} | {row[1]} | {row[2]} | {row[3]} | {row[4]:.3f} |")
    tables.append(R.make_table("DE step vs the pydeseq2 peer (deseq task, 30 planted DE genes)",
                               ["DE test", "genes padj<0.05", "planted found (of 30)",
                                "false calls", "seconds"], rows, name="de-peer",
                               formats={"seconds": ".3f"}))
    if args.out_results:
        R.write(args.out_results, tables, plugin="bioagent-bench", seeds=[args.seed],
                clock=clock, quick=True,
                tolerance={**TIMING, **(R.load(args.out_results).get("tolerance") or {}
                                        if Path(args.out_results).is_file() else {})},
                command=" ".join(["python", "plugins/bioagent-bench/benchmarks/bench_suite.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]))


if __name__ == "__main__":
    main()
