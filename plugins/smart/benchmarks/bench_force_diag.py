"""Why SMART's lift is worse than PointNet-MLP's: the same training and force evaluation as
``bench_peers.py`` for variants of the inputs and the budget, over seeds.

    python plugins/smart/benchmarks/bench_force_diag.py \
        --out-results plugins/smart/results/force_diag.json

Variants ``ARM[:norm][@STEPS]``: ``norm`` z-scores the simulation parameters
``xi = (U, cos a, sin a, gamma)`` with the training set's statistics before the model sees them
(a wrapper around the unchanged model; the circulation ``gamma`` spans only +-0.2 raw);
``@STEPS`` trains that many steps instead of ``--steps``. The lift slope (least squares of
predicted on exact lift, dense quadrature) is 1 when the circulation's effect on the surface
pressure is captured and 0 when the model ignores it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_peers import LABELS, build  # noqa: E402


class ParamScaled(torch.nn.Module):
    """``model`` with its parameter input z-scored: ``model(g, (xi - mean) / std, q)``."""

    def __init__(self, model: torch.nn.Module, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.inner = model
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    @property
    def config(self):  # noqa: ANN201 - the trainer stores the target statistics here
        return self.inner.config

    def normalize(self, y):  # noqa: ANN001, ANN201
        return self.inner.normalize(y)

    def forward(self, g, p, q):  # noqa: ANN001, ANN201
        return self.inner(g, (p - self.mean) / self.std, q)

    def predict(self, g, p, q, chunk_size: int = 65536):  # noqa: ANN001, ANN201
        return self.inner.predict(g, (p - self.mean) / self.std, q, chunk_size=chunk_size)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--dim", type=int, default=48)
    ap.add_argument("--variants", nargs="+",
                    default=["smart:norm", "pointnet:norm", "smart@900", "pointnet@900"])
    ap.add_argument("--dense", type=int, default=512)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out-results", default="")
    a = ap.parse_args()
    from icml import ConfigError, results

    variants = []
    for v in a.variants:
        head, _, steps = v.partition("@")
        arm, _, norm = head.partition(":")
        if arm not in ("smart", "smart+qp", "last_layer", "pointnet") or norm not in ("", "norm") \
                or (steps and not steps.isdigit()):
            raise ConfigError(f"--variants {v!r}: ARM[:norm][@STEPS], ARM one of smart, "
                              "smart+qp, last_layer, pointnet")
        variants.append((v, arm, norm == "norm", int(steps) if steps else a.steps))
    clock = results.Clock()
    threads = results.apply_threads(a.threads)
    from icml_smart.baselines import num_params
    from icml_smart.config import SMARTSettings
    from icml_smart.job import make_data
    from icml_smart.training import evaluate_forces, evaluate_surrogate, train_surrogate

    cfg = SimpleNamespace(case="ellipse", n_train=512, n_test=128, n_boundary=64,
                          n_queries=256, min_aspect=0.4, max_circulation=0.2,
                          model=SMARTSettings(dim=a.dim))
    rows = []
    for seed in a.seeds:
        train, test = make_data(cfg, seed)
        xi = torch.stack([c["params"] for c in train.cases])
        for tag, arm, norm, steps in variants:
            model = build(arm, cfg, train, seed)
            if norm:
                model = ParamScaled(model, xi.mean(0), xi.std(0))
            st = train_surrogate(model, train, steps=steps, batch_size=16, lr=2e-3,
                                 query_subsample=128, surface_weight=0.1, seed=seed)
            ev = evaluate_surrogate(model, test)
            fo = evaluate_forces(model, test, dense=a.dense)
            rows.append({"seed": seed, "variant": tag, "steps": steps, "train_s": st.seconds,
                         "params": num_params(model), **ev,
                         **{k: v for k, v in fo.items() if not k.endswith("_err")}})
            print(json.dumps(rows[-1]), flush=True)
    cols = ["variant", "model", "params z-scored", "steps", "seeds", "rel-L2 mean",
            "surface C_p rel-L2", "C_L MAE cloud", "C_L MAE dense", "lift slope dense",
            "slope min over seeds", "train s"]
    out = []
    for tag, arm, norm, steps in variants:
        rs = [r for r in rows if r["variant"] == tag]
        m = lambda k, rs=rs: statistics.mean(r[k] for r in rs)  # noqa: E731
        out.append([tag, LABELS[arm], "yes" if norm else "no", steps, len(rs), m("rel_l2"),
                    m("surface_cp_rel_l2"), m("cloud_lift_mae"), m("dense_lift_mae"),
                    m("dense_lift_slope"), min(r["dense_lift_slope"] for r in rs),
                    m("train_s")])
        print(" | ".join(f"{x:.4g}" if isinstance(x, float) else str(x) for x in out[-1]))
    if a.out_results:
        f4 = ".4f"
        tab = results.make_table(
            f"force diagnosis: 128 test cases per seed, seeds {a.seeds}, dim {a.dim}", cols, out,
            name="force-diag", formats={**{c: f4 for c in cols[5:10]}, "lift slope dense": ".3f",
                                        "slope min over seeds": ".3f", "train s": ".0f"})
        results.write(a.out_results, [tab], plugin="smart", seeds=a.seeds, clock=clock,
                      threads=threads, quick=False,
                      command="python " + shlex.join(
                          ["plugins/smart/benchmarks/bench_force_diag.py", *sys.argv[1:]]),
                      tolerance={"train s": {"timing": True, "why": "wall clock, shared machine"}},
                      notes=f"diagnostic; 1-min load average at start {clock.load0}")


if __name__ == "__main__":
    main()
