"""Throughput of benchmark generation and of evaluation, in one run.

    python plugins/cage/benchmarks/bench_cage.py [--items 5000] [--vlm-items 90]
        [--out-results plugins/cage/results/bench.json]

Generation: items/s for a benchmark of --items questions (goal: 5,000 in under a minute on CPU),
plus writing it as JSONL + PNG. Evaluation: items/s (both probes + rule judge) for the oracle
and for the tiny LLaVA- and Qwen2-VL-style VLMs, with ratios to the oracle (the cost of the
model itself). With --out-results the tables go to a results file (``icml.results``; clock
readings are declared ``timing``: shown, never compared). There is no pip-installable AG
baseline to compare against (see README).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch
from icml_cage import dataset
from icml_cage.dataset import balance, generate_benchmark, rung_disagreement
from icml_cage.evaluate import evaluate
from icml_cage.responders import OracleResponder, VLMResponder
from icml_cage.tiny_vlm import tiny_llava, tiny_qwen2vl

import icml.results as R

TIMING = {c: {"timing": True, "why": "clock reading on a shared 2-core CPU"}
          for c in ("seconds", "items/s", "time vs oracle")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--vlm-items", type=int, default=90)
    parser.add_argument("--out-results", default="", help="write the tables as a results file")
    args = parser.parse_args()
    clock = R.Clock()
    threads = R.apply_threads(1)
    torch.manual_seed(0)
    n_images = -(-args.items // 9)
    t0 = time.perf_counter()
    bench = generate_benchmark(n_images, seed=0)
    gen_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        bench.save(tmp)
        save_s = time.perf_counter() - t0
    search = dataset.SEARCH
    dataset.SEARCH = 1  # no balancing search: what the 16 candidates per scene cost
    t0 = time.perf_counter()
    unbalanced = generate_benchmark(n_images, seed=0)
    one_s = time.perf_counter() - t0
    dataset.SEARCH = search
    gen_rows = [[f"generate {len(bench)} items ({n_images} images)", len(bench), gen_s,
                 len(bench) / gen_s],
                ["write JSONL + PNG", len(bench), save_s, len(bench) / save_s],
                ["generate, 1 candidate per scene (no balancing)", len(unbalanced), one_s,
                 len(unbalanced) / one_s]]
    bal_rows = [[r["rung"], r["template"], r["n"], r["yes"]] for r in balance(bench.items)]
    dis_rows = [[k, v] for k, v in rung_disagreement(bench.items).items()]
    sub = bench.subset(limit=args.vlm_items)
    rows = []
    for name, make in (("oracle", None), ("tiny-llava", tiny_llava),
                       ("tiny-qwen2vl", tiny_qwen2vl)):
        if make is None:
            responder = OracleResponder(sub)
        else:
            model, proc = make(seed=0)
            responder = VLMResponder(model, proc, max_new_tokens=24, batch_size=16)
        t0 = time.perf_counter()
        evaluate(responder, sub)
        rows.append((name, time.perf_counter() - t0))
    base = rows[0][1]
    eval_rows = [[name, s, len(sub) / s, s / base] for name, s in rows]
    tables = [
        R.make_table("Generation throughput", ["stage", "items", "seconds", "items/s"],
                     gen_rows, name="generation", formats={"seconds": ".2f", "items/s": ",.0f"}),
        R.make_table(f"Answer balance of the {len(bench)}-item benchmark (share of 'yes')",
                     ["rung", "template", "n", "share yes"], bal_rows, name="balance",
                     formats={"share yes": ".2f"}),
        R.make_table("Answers that differ (same scene)", ["answers that differ", "share"],
                     dis_rows, name="disagreement", formats={"share": ".2f"}),
        R.make_table(f"Evaluate ({len(sub)} items, both probes)",
                     ["responder", "seconds", "items/s", "time vs oracle"], eval_rows,
                     name="evaluate", formats={"seconds": ".2f", "items/s": ",.1f",
                                               "time vs oracle": ".0f"}),
    ]
    for t in tables:
        print(R.render_table(t), end="\n\n")
    if args.out_results:
        cmd = "python plugins/cage/benchmarks/bench_cage.py"
        if args.items != 5000 or args.vlm_items != 90:
            cmd += f" --items {args.items} --vlm-items {args.vlm_items}"
        path = R.write(args.out_results, tables, command=f"{cmd} --out-results "
                       f"{args.out_results}", plugin="cage", seeds=[0], quick=True,
                       tolerance=TIMING, clock=clock, threads=threads)
        print(f"results file: {path}")


if __name__ == "__main__":
    main()
