"""Reduced-budget run on the real pretrained model (SmolLM2-135M-Instruct, offline through
icml.models.load_pretrained): LoRA on q_proj/v_proj, the synthetic federated task tokenized
with the model's own tokenizer (digits are single tokens), no task pre-training.

    python plugins/het-cpflora/benchmarks/bench_pretrained.py \
        --out-results plugins/het-cpflora/results/bench_pretrained.json
"""

from __future__ import annotations

import argparse
import logging
import random
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from icml_het_cpflora.config import FederationConfig, TrainConfig
from icml_het_cpflora.job import _check, run_strategy
from icml_het_cpflora.ranks import ClientRankSpec
from icml_het_cpflora.simulator import ClientDataset
from icml_het_cpflora.task import STYLES, encode, make_examples

import icml
from icml import results as R
from icml import stats
from icml.models import load_pretrained
from icml.seeding import seed_everything


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--local-steps", type=int, default=8)
    ap.add_argument("--strategies", nargs="+", default=["het-cpflora", "fedit", "local"])
    ap.add_argument("--out-results", default="", help="write the table as a results file")
    args = ap.parse_args()
    clock = R.Clock()
    threads = R.apply_threads(1)  # ICML_THREADS when set (icml reproduce --threads)
    seed_everything(args.seed)
    cfg = TrainConfig(federation=FederationConfig(rounds=args.rounds,
                                                  local_steps=args.local_steps, lr=1e-3,
                                                  batch_size=8),
                      train_size=32, test_size=24, strategies=args.strategies)
    base, tok = load_pretrained("smollm2-135m-instruct")
    specs = [ClientRankSpec(s, p) for s, p in zip(cfg.r_shared, cfg.r_personal)]
    _check(cfg, base, specs)
    rng = random.Random(args.seed + 1)
    train, tests = [], []
    for i in range(len(specs)):
        kw = {"own_task": i, "own_share": cfg.own_share, "style": STYLES[i],
              "length": cfg.digits, "rng": rng}
        enc = encode(tok, make_examples(cfg.train_size, **kw))
        train.append(ClientDataset(enc["input_ids"], enc["labels"],
                                   prompt_ids=enc["prompt_ids"]))
        tests.append(encode(tok, make_examples(cfg.test_size, **kw)))
    env = {"tok": tok, "base": base, "specs": specs, "train": train, "tests": tests}
    ctx = icml.RunContext(out_dir=Path(tempfile.mkdtemp()), seed=args.seed,
                          show_progress=False, logger=logging.getLogger("bench"))
    print("| strategy | local acc | other-clients acc | bytes/round | s/round |")
    print("|---|---|---|---|---|")
    rows = []
    for name in cfg.strategies:
        t0 = time.perf_counter()
        out = run_strategy(ctx, cfg, env, name)
        for arm, accs in out["arms"].items():
            print(f"| {arm} | {statistics.mean(a for a, _ in accs):.3f} | "
                  f"{statistics.mean(g for _, g in accs):.3f} | {out['bytes_per_round']:.0f} | "
                  f"{out['round_s']:.2f} |", flush=True)
            loc, gen = [a for a, _ in accs], [g for _, g in accs]
            rows.append([arm, stats.mean_ci(loc), stats.mde_from_samples(loc),
                         stats.mean_ci(gen), stats.mde_from_samples(gen),
                         out["bytes_per_round"], out["round_s"]])
        print(f"<!-- {name}: {time.perf_counter() - t0:.0f} s -->", flush=True)
    if args.out_results:
        cols = ["strategy", "local acc", "local MDE", "other-clients acc", "other MDE",
                "bytes/round", "s/round"]
        table = R.make_table(f"SmolLM2-135M-Instruct, seed {args.seed}, {args.rounds} rounds x "
                             f"{args.local_steps} local steps: mean over {len(specs)} clients "
                             "[95% bootstrap CI over clients]", cols, rows, name="pretrained",
                             formats={c: ".3f" for c in cols[1:5]}
                             | {"bytes/round": ".0f", "s/round": ".2f"})
        R.write(args.out_results, [table], plugin="het-cpflora", seeds=[args.seed], clock=clock,
                threads=threads, quick=False,
                tolerance={"s/round": {"timing": True, "why": "wall time on a shared machine"},
                           **(R.load(args.out_results).get("tolerance") or {}
                              if Path(args.out_results).is_file() else {})},
                command=" ".join(["python", "plugins/het-cpflora/benchmarks/bench_pretrained.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]))


if __name__ == "__main__":
    main()
