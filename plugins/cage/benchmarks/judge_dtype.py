"""Does the yes/no-check LLM judge (``CheckJudge``, SmolLM2-135M-Instruct) give the same scores
in bfloat16 as in float32? The evidence for running the judge table in bfloat16.

    python plugins/cage/benchmarks/judge_dtype.py [--items 36] [--threads 1]
        [--out-results plugins/cage/results/judge_dtype.json]

The graded reference responders at chain corruption 0, 0.5 and 1 (answers right 80% of the time)
answer the first --items questions of the default benchmark (60 scenes, seed 0); both probes'
responses are judged by the same judge in float32 and in bfloat16. Per set: both means, the
paired difference bf16 - fp32 with its 95% interval (``icml.stats.paired_diff_ci``), the largest
item difference, and the correlation of the item scores. Clock columns are ``timing``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from icml_cage.dataset import generate_benchmark
from icml_cage.judges import CheckJudge
from icml_cage.probes import Query
from icml_cage.responders import GradedResponder

import icml.results as R
from icml import stats
from icml.models import load_pretrained

TOL = {"fp32 s": {"timing": True, "why": "clock reading on a shared 2-core CPU"},
       "bf16 s": {"timing": True, "why": "clock reading on a shared 2-core CPU"},
       "speed-up": {"timing": True, "why": "ratio of two clock readings on a shared CPU"}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=36)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out-results", default="")
    args = parser.parse_args()
    clock = R.Clock()
    threads = R.apply_threads(args.threads)
    bench = generate_benchmark(60, seed=0)
    items = bench.subset(limit=args.items).items
    sets = []
    for c in (0.0, 0.5, 1.0):
        g = GradedResponder(bench, corrupt=c, answer_accuracy=0.8, seed=0)
        for probe in ("text", "chain"):
            if probe == "text" and c:
                continue  # the text responses do not depend on the corruption
            resp = g.respond([Query(it.id, None, it.question, "", probe, 128) for it in items])
            sets.append((f"graded-{c:g} {probe}", probe, resp))
    model, tok = load_pretrained("smollm2-135m-instruct", dtype=torch.float32)
    scores: dict[str, dict[str, list[float]]] = {}
    secs: dict[str, float] = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        judge = CheckJudge(model.to(dtype), tok, batch_size=16)
        t0 = time.perf_counter()
        scores[name] = {s: judge.score_many(resp, items, probe) for s, probe, resp in sets}
        secs[name] = time.perf_counter() - t0
    rows = []
    for s, _, _ in sets:
        a, b = np.asarray(scores["fp32"][s]), np.asarray(scores["bf16"][s])
        diff = stats.paired_diff_ci(b, a, seed=0)
        rows.append([s, len(a), float(a.mean()), float(b.mean()), diff.to_dict(),
                     float(np.abs(a - b).max()), float(np.corrcoef(a, b)[0, 1])])
    table = R.make_table(
        f"CheckJudge scores, float32 vs bfloat16 ({len(items)} items per set)",
        ["set", "n", "mean fp32", "mean bf16", "bf16 - fp32 [95% CI]", "max |item diff|",
         "item pearson"], rows, name="dtype",
        formats={"mean fp32": ".3f", "mean bf16": ".3f", "bf16 - fp32 [95% CI]": ".3f",
                 "max |item diff|": ".3f", "item pearson": ".4f"})
    speed = R.make_table("Judge time, the same responses", ["fp32 s", "bf16 s", "speed-up"],
                         [[secs["fp32"], secs["bf16"], secs["fp32"] / secs["bf16"]]],
                         name="time", formats={"fp32 s": ".1f", "bf16 s": ".1f",
                                               "speed-up": ".2f"})
    for t in (table, speed):
        print(R.render_table(t), end="\n\n")
    if args.out_results:
        cmd = "python plugins/cage/benchmarks/judge_dtype.py"
        if args.items != 36:
            cmd += f" --items {args.items}"
        path = R.write(args.out_results, [table, speed],
                       command=f"{cmd} --threads {args.threads} --out-results "
                               f"{args.out_results}",
                       plugin="cage", seeds=[0], quick=False, tolerance=TOL, clock=clock,
                       threads=threads)
        print(f"results file: {path}")


if __name__ == "__main__":
    main()
