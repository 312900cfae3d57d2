"""Why SMART's force error was worse than PointNet-MLP's: the same training as
``bench_peers.py`` for a few variants, forces against the exact coefficients.

    python plugins/smart/benchmarks/bench_forces.py --out-results plugins/smart/results/forces.json

Variants ``ARM:SURFACE_WEIGHT`` (``smart+qp``: SMART with the parameter embedding also added to
every query's embedding, ``model.query_params``). The lift slope (least squares of predicted on
exact lift over the test cases) separates a model that under-resolves the circulation's effect
(slope < 1) from one that is noisy around it (slope near 1, error from scatter).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))
from bench_peers import LABELS, run_arm  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--dim", type=int, default=48)
    ap.add_argument("--n-train", type=int, default=512)
    ap.add_argument("--n-test", type=int, default=128)
    ap.add_argument("--dense", type=int, default=512)
    ap.add_argument("--variants", nargs="+",
                    default=["smart:0.1", "pointnet:0.1", "smart:1", "smart+qp:0.1"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out-results", default="")
    a = ap.parse_args()
    from icml import ConfigError, results

    variants = []
    for v in a.variants:
        arm, _, sw = v.partition(":")
        if arm not in ("smart", "smart+qp", "last_layer", "pointnet") or not sw:
            raise ConfigError(f"--variants {v!r}: use ARM:SURFACE_WEIGHT with ARM one of smart, "
                              "smart+qp, last_layer, pointnet")
        variants.append((arm, float(sw)))
    clock = results.Clock()
    threads = results.apply_threads(a.threads)
    from icml_smart.config import SMARTSettings
    from icml_smart.job import make_data

    cfg = SimpleNamespace(case="ellipse", n_train=a.n_train, n_test=a.n_test, n_boundary=64,
                          n_queries=256, min_aspect=0.4, max_circulation=0.2,
                          model=SMARTSettings(dim=a.dim))
    rows = []
    for seed in a.seeds:
        train, test = make_data(cfg, seed)
        for arm, sw in variants:
            r = run_arm(arm, "equal_steps", a.steps, cfg, train, test, seed, a, surface_weight=sw)
            r["surface_weight"] = sw
            rows.append(r)
            print(json.dumps({k: v for k, v in r.items() if not k.endswith(("_cases", "_err"))}),
                  flush=True)
    cols = ["model", "surface weight", "rel-L2 mean", "surface C_p rel-L2", "C_L MAE cloud",
            "C_L MAE dense", "lift slope dense", "C_D MAE dense", "train s"]
    out = []
    for arm, sw in variants:
        rs = [r for r in rows if r["model"] == arm and r["surface_weight"] == sw]
        m = lambda k, rs=rs: statistics.mean(r[k] for r in rs)  # noqa: E731
        out.append([LABELS[arm], sw, m("rel_l2"), m("surface_cp_rel_l2"), m("cloud_lift_mae"),
                    m("dense_lift_mae"), m("dense_lift_slope"), m("dense_drag_mae"),
                    m("train_s")])
        print(" | ".join(f"{x:.4g}" if isinstance(x, float) else str(x) for x in out[-1]))
    if a.out_results:
        f4 = ".4f"
        tab = results.make_table(
            f"force diagnosis: {a.n_test} test cases, seeds {a.seeds}, {a.steps} steps, dim "
            f"{a.dim}", cols, out, name="forces",
            formats={**{c: f4 for c in cols[2:]}, "lift slope dense": ".3f", "train s": ".0f",
                     "surface weight": "g"})
        results.write(a.out_results, [tab], plugin="smart", seeds=a.seeds, clock=clock,
                      threads=threads, quick=False,
                      command="python " + shlex.join(["plugins/smart/benchmarks/bench_forces.py",
                                                      *sys.argv[1:]]),
                      tolerance={"train s": {"timing": True, "why": "wall clock, shared machine"}},
                      notes=f"diagnostic; load average at start {clock.load0}")


if __name__ == "__main__":
    main()
