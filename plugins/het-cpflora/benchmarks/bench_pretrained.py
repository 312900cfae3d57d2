"""Reduced-budget run on the real pretrained model (SmolLM2-135M-Instruct, offline through
icml.models.load_pretrained): LoRA on q_proj/v_proj, the synthetic federated task tokenized
with the model's own tokenizer (digits are single tokens), no task pre-training.

    OMP_NUM_THREADS=1 python plugins/het-cpflora/benchmarks/bench_pretrained.py
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch
from icml_het_cpflora.config import TrainConfig
from icml_het_cpflora.job import _check, run_strategy
from icml_het_cpflora.ranks import ClientRankSpec
from icml_het_cpflora.simulator import ClientDataset
from icml_het_cpflora.task import STYLES, encode, make_examples

import icml
from icml.models import load_pretrained
from icml.seeding import seed_everything


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--local-steps", type=int, default=8)
    ap.add_argument("--strategies", nargs="+", default=["het-cpflora", "fedit", "local"])
    args = ap.parse_args()
    torch.set_num_threads(1)
    seed_everything(args.seed)
    cfg = TrainConfig(rounds=args.rounds, local_steps=args.local_steps, lr=1e-3, batch_size=8,
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
    for name in cfg.strategies:
        t0 = time.perf_counter()
        out = run_strategy(ctx, cfg, env, name)
        for arm, accs in out["arms"].items():
            print(f"| {arm} | {statistics.mean(a for a, _ in accs):.3f} | "
                  f"{statistics.mean(g for _, g in accs):.3f} | {out['bytes_per_round']:.0f} | "
                  f"{out['round_s']:.2f} |", flush=True)
        print(f"<!-- {name}: {time.perf_counter() - t0:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
