"""Benchmark: every strategy over several seeds on the default synthetic federated task
(tiny Llama pre-trained in-process): local-test (personalization) and other-clients-test
(generalization) exact match, mean ± std over seeds, bytes per round vs FedIT, s/round.

    OMP_NUM_THREADS=1 python plugins/het-cpflora/benchmarks/bench.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
from pathlib import Path

import torch
from icml_het_cpflora.config import TrainConfig
from icml_het_cpflora.job import _setup, run_strategy

import icml
from icml.seeding import seed_everything


def sd(x: list[float]) -> float:
    return statistics.stdev(x) if len(x) > 1 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--set", nargs="*", default=[], help="key=value overrides (ints/floats)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    kw = {}
    for item in args.set:
        k, v = item.split("=", 1)
        kw[k] = type(getattr(TrainConfig(), k))(v)
    cfg = TrainConfig(**kw)
    acc: dict[str, list[tuple[float, float]]] = {}
    bytes_, secs = {}, {}
    for seed in args.seeds:
        seed_everything(seed)
        ctx = icml.RunContext(out_dir=Path(tempfile.mkdtemp()), seed=seed, show_progress=False,
                              logger=logging.getLogger("bench"))
        env = _setup(ctx, cfg)
        for name in cfg.strategies:
            out = run_strategy(ctx, cfg, env, name)
            for arm, accs in out["arms"].items():
                acc.setdefault(arm, []).append((statistics.mean(a for a, _ in accs),
                                                statistics.mean(g for _, g in accs)))
                bytes_[arm] = out["bytes_per_round"]
                secs.setdefault(arm, []).append(out["round_s"])
            print(f"seed {seed} {name} done", flush=True)
    fed = bytes_.get("fedit")
    print("| strategy | local acc (personalization) | other-clients acc (generalization) | "
          "bytes/round | vs FedIT | s/round |")
    print("|---|---|---|---|---|---|")
    for arm, vals in acc.items():
        loc = [v[0] for v in vals]
        gen = [v[1] for v in vals]
        ratio = f"{bytes_[arm] / fed:.2f}" if fed else "n/a"
        print(f"| {arm} | {statistics.mean(loc):.3f} ± {sd(loc):.3f} | "
              f"{statistics.mean(gen):.3f} ± {sd(gen):.3f} | {bytes_[arm]:.0f} | {ratio} | "
              f"{statistics.mean(secs[arm]):.2f} |")


if __name__ == "__main__":
    main()
