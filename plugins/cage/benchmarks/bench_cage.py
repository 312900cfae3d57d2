"""Throughput of benchmark generation and of evaluation, in one run.

    python plugins/cage/benchmarks/bench_cage.py [--items 5000] [--vlm-items 90]

Generation: items/s for a benchmark of --items questions (goal: 5,000 in under a minute on CPU),
plus writing it as JSONL + PNG. Evaluation: items/s (both probes + rule judge) for the oracle
and for the tiny LLaVA- and Qwen2-VL-style VLMs, with ratios to the oracle (the cost of the
model itself). There is no pip-installable AG baseline to compare against (see README).
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--vlm-items", type=int, default=90)
    args = parser.parse_args()
    torch.manual_seed(0)
    n_images = -(-args.items // 9)
    t0 = time.perf_counter()
    bench = generate_benchmark(n_images, seed=0)
    gen_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        bench.save(tmp)
        save_s = time.perf_counter() - t0
    print("| stage | items | seconds | items/s |\n|---|---|---|---|")
    print(f"| generate {len(bench)} items ({n_images} images) | {len(bench)} | {gen_s:.2f} | "
          f"{len(bench) / gen_s:,.0f} |")
    print(f"| write JSONL + PNG | {len(bench)} | {save_s:.2f} | {len(bench) / save_s:,.0f} |")
    search = dataset.SEARCH
    dataset.SEARCH = 1  # no balancing search: what the 16 candidates per scene cost
    t0 = time.perf_counter()
    unbalanced = generate_benchmark(n_images, seed=0)
    one_s = time.perf_counter() - t0
    dataset.SEARCH = search
    print(f"| generate, 1 candidate per scene (no balancing) | {len(unbalanced)} | {one_s:.2f} | "
          f"{len(unbalanced) / one_s:,.0f} |")
    print("\n| rung | template | n | share yes |\n|---|---|---|---|")
    for row in balance(bench.items):
        print(f"| {row['rung']} | {row['template']} | {row['n']} | {row['yes']:.2f} |")
    print("\n| answers that differ (same scene) | share |\n|---|---|")
    for key, value in rung_disagreement(bench.items).items():
        print(f"| {key} | {value:.2f} |")
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
    print(f"\n| evaluate ({len(sub)} items, both probes) | seconds | items/s | time vs oracle |")
    print("|---|---|---|---|")
    for name, s in rows:
        print(f"| {name} | {s:.2f} | {len(sub) / s:,.1f} | {s / base:,.0f}x |")


if __name__ == "__main__":
    main()
