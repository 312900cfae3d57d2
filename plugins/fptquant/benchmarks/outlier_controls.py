"""Controls of the default job (tiny Llama, seed 0, the default arms): the same trained model
with no injected outliers (``outlier_strength=0``), with the residual/MLP outliers only
(``outlier_sites=norm,mlp``) and with all four kinds (the default job); then SmoothQuant's
migration strength swept on the default outlier model (``smoothquant_alpha``).

    python plugins/fptquant/benchmarks/outlier_controls.py \\
        --out-results plugins/fptquant/results/outlier_controls.json

Each setting is ``run_arms`` on a fresh copy of one pre-trained tiny model, i.e. what
``icml run fptquant --set outlier_strength=0`` (etc.) computes. One torch thread; no clock
column (perplexities only), so a rerun compares every cell exactly.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import shlex
import sys

import torch
from icml_fptquant import QuantizeConfig
from icml_fptquant.pipeline import ARM_LABELS, build_model, run_arms

from icml import results as R
from icml.config import build_config

SETTINGS = {"ppl, no outliers (`outlier_strength=0`)": {"outlier_strength": 0.0},
            "ppl, norm + MLP outliers only (`outlier_sites=norm,mlp`)":
                {"outlier_sites": ["norm", "mlp"]},
            "ppl, default (all four kinds)": {}}
ALPHAS = (0.3, 0.5, 0.65, 0.8, 0.9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--alphas", default=",".join(map(str, ALPHAS)))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="job config override, as `icml run fptquant --set` (tests use tiny "
                    "settings; the README table uses none)")
    ap.add_argument("--out-results", default="", help="write the tables as a results file")
    args = ap.parse_args()
    clock = R.Clock()
    threads = R.apply_threads(1)
    cfg = build_config(QuantizeConfig, {}, args.set)
    base = build_model(cfg, "cpu", torch.float32, seed=0)
    fp = copy.deepcopy(base["model"])  # run_arms injects the outliers in place

    def rows_of(c: QuantizeConfig) -> dict[str, dict[str, float]]:
        return run_arms(c, dict(base, model=copy.deepcopy(fp)), seed=0)["rows"]

    ppl = {label: rows_of(dataclasses.replace(cfg, **change))
           for label, change in SETTINGS.items()}
    cols = ["arm", *SETTINGS]
    controls = R.make_table(
        "Controls of the default job: perplexity without and with injected outliers",
        cols, [[ARM_LABELS[a], *(ppl[s][a]["ppl"] for s in SETTINGS)] for a in cfg.arms],
        name="controls", formats={c: ".2f" for c in SETTINGS})
    alpha_rows = []
    for a in (float(x) for x in args.alphas.split(",")):
        r = rows_of(dataclasses.replace(cfg, arms=["fp", "smoothquant"], smoothquant_alpha=a))
        alpha_rows.append([a, r["smoothquant"]["ppl"]])
        print(f"alpha {a}: SmoothQuant-style perplexity {alpha_rows[-1][1]:.3f}", flush=True)
    alpha = R.make_table("SmoothQuant-style arm: migration strength on the default outlier model",
                         ["smoothquant_alpha", "perplexity"], alpha_rows, name="alpha",
                         formats={"perplexity": ".2f"})
    print(R.render_table(controls))
    print(R.render_table(alpha))
    if args.out_results:
        R.write(args.out_results, [controls, alpha], plugin="fptquant", seeds=[0], clock=clock,
                threads=threads, quick=True,  # 15 s: part of `icml reproduce fptquant --quick`
                command=" ".join(["python", "plugins/fptquant/benchmarks/outlier_controls.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]))


if __name__ == "__main__":
    main()
