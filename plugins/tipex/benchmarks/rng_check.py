"""The scripted model's two random generators side by side: accuracy of the same tasks and
configs with ``rng="mt"`` (the default) and ``rng="counter"`` (SplitMix64, no Mersenne Twister
seeding). Their draws differ, so single results differ; the accuracies should agree within
sampling noise.

    OMP_NUM_THREADS=1 python plugins/tipex/benchmarks/rng_check.py [--tasks 200]
"""

from __future__ import annotations

import argparse

from icml_tipex.runner import ExecutionConfig, TipexRunner
from icml_tipex.scripted import ScriptedModel
from icml_tipex.synthgaia import SynthGAIA

CONFIGS = [("bare agent", dict(planner="chain")),
           ("DAG N=1 w=4", dict(width=4)),
           ("DAG N=5 w=4", dict(n_replicas=5, width=4))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    suite = SynthGAIA(seed=a.seed)
    print(f"accuracy over {a.tasks} tasks per level, seed {a.seed}\n")
    print("| level | config | rng=mt | rng=counter |\n|---|---|---|---|")
    for lvl in (1, 2, 3):
        tasks = suite.tasks(lvl, a.tasks)
        for name, kw in CONFIGS:
            cfg = ExecutionConfig(granularity=4, seed=a.seed, max_inflight=None, **kw)
            acc = []
            for rng in ("mt", "counter"):
                out = TipexRunner(ScriptedModel(suite, seed=a.seed, rng=rng),
                                  suite.tools()).run(tasks, cfg)
                acc.append(sum(bool(o.correct) for o in out) / len(out))
            print(f"| {lvl} | {name} | {acc[0]:.3f} | {acc[1]:.3f} |")


if __name__ == "__main__":
    main()
