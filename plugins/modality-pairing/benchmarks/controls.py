"""Controls that separate smoothing from more data (issue 61), against stochastic pairing.

    python plugins/modality-pairing/benchmarks/controls.py --seeds 5 \\
        --out-results plugins/modality-pairing/results/controls.json

Every arm trains the same additive late-fusion network except ``unimodal`` (one encoder):

* ``const_b``  modality b replaced by a constant: unimodal information, fusion architecture;
* ``twin_a``   b replaced by a second view of a, paired stochastically: the pairing kernel
  with no second modality;
* ``noise``    fixed pairing + Gaussian noise on b with the per-feature std of the swap
  ``x_b^j - x_b^i`` that stochastic pairing makes (matched strength);
* ``sam``      fixed pairing + SAM at radius ``rho`` = 0.05, the ε-sharpness radius measured;
* ``mixup``    fixed pairing + within-class mixup of both modalities (λ ~ Beta(1, 1)).

Three settings: the default synthetic data (2000x15, conditionally independent given the
class), the same with ``shared_noise`` swept (conditional independence fails by that
within-class correlation), and sklearn's digits split into left/right halves (real data).
Differences are paired by seed (same data, same initialisation) against stochastic pairing:
``icml.stats.paired_diff_ci`` (percentile bootstrap over seeds) and the minimum detectable
effect ``icml.stats.mde_mean`` (80% power, α = 0.05) from the sd of the paired differences.
Single-threaded CPU, float32; sharpness on the held-out split.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

from icml_modality_pairing.config import Settings  # noqa: E402
from icml_modality_pairing.experiment import parse_regime, run_arm  # noqa: E402

from icml import results, stats  # noqa: E402

ARMS = ("unimodal", "const_b", "twin_a", "fixed", "stochastic", "noise", "sam", "mixup")
SWEEP_ARMS = ("const_b", "fixed", "stochastic", "noise", "sam", "mixup")
WHAT = {"unimodal": "modality a alone, one encoder",
        "const_b": "fusion net, b = constant",
        "twin_a": "fusion net, b = a's same-class partner",
        "fixed": "fusion net, own partner",
        "stochastic": "fusion net, same-class partner",
        "noise": "fixed + matched noise on b",
        "sam": "fixed + SAM (ρ = 0.05)",
        "mixup": "fixed + within-class mixup"}
CONTRASTS = (("second modality (fixed − const_b)", "fixed", "const_b"),
             ("pairing (stochastic − fixed)", "stochastic", "fixed"),
             ("pairing kernel, one modality (twin_a − const_b)", "twin_a", "const_b"),
             ("matched noise (noise − fixed)", "noise", "fixed"),
             ("SAM (sam − fixed)", "sam", "fixed"),
             ("within-class mixup (mixup − fixed)", "mixup", "fixed"))
METRICS = ("accuracy", "lambda_max", "eps_sharpness")


def measure(arms, regime, seeds, s):
    """``{arm: {metric: [value per seed]}}`` of every arm on ``regime``."""
    n, ep = parse_regime(regime)
    out = {}
    for a in arms:
        runs = [run_arm(a, n, ep, seed, s).metrics for seed in seeds]
        out[a] = {k: [r[k] for r in runs] for k in METRICS}
    return out


def _ms(v, d=3):
    return f"{statistics.fmean(v):.{d}f} ± {statistics.stdev(v):.{d}f}"


def _diff(a, b):
    est = stats.paired_diff_ci(a, b, seed=0).to_dict()
    d = [x - y for x, y in zip(a, b, strict=True)]
    return est, stats.mde_mean(statistics.stdev(d), len(d))


def arm_rows(prefix, raw, arms):
    rows, ref = [], raw["stochastic"]
    for a in arms:
        m = raw[a]
        if a == "stochastic":
            da = dl = mde = None
        else:
            da, mde = _diff(m["accuracy"], ref["accuracy"])
            dl, _ = _diff(m["lambda_max"], ref["lambda_max"])
        rows.append([*prefix, a, WHAT[a], _ms(m["accuracy"]), da, mde,
                     _ms(m["lambda_max"], 2), dl, _ms(m["eps_sharpness"], 4)])
    return rows


ARM_COLS = ["arm", "what", "test acc", "Δacc vs stochastic [95% CI]", "MDE Δacc",
            "λ_max", "Δλ_max vs stochastic [95% CI]", "ε-sharp"]
FORMATS = {"Δacc vs stochastic [95% CI]": ".3f", "MDE Δacc": ".3f",
           "Δλ_max vs stochastic [95% CI]": ".2f"}


def contrast_rows(label, raw):
    rows = []
    for name, a, b in CONTRASTS:
        if a in raw and b in raw:
            da, mde = _diff(raw[a]["accuracy"], raw[b]["accuracy"])
            dl, _ = _diff(raw[a]["lambda_max"], raw[b]["lambda_max"])
            rows.append([label, name, da, mde, dl])
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--regime", default="2000x15", help="default-data regime")
    ap.add_argument("--shared", type=float, nargs="*", default=[0.2, 0.4, 0.6, 0.8],
                    help="shared_noise levels of the sweep (0 is the default-data table)")
    ap.add_argument("--digits", nargs="*", default=["500x15", "200x30"],
                    help="digits regimes (n_train <= 1796)")
    ap.add_argument("--n-test", type=int, default=1000)
    ap.add_argument("--out-results", default="")
    args = ap.parse_args(argv)
    threads = results.apply_threads(1)
    clock = results.Clock()
    seeds = list(range(args.seeds))
    base = dict(n_test=args.n_test, trace_samples=0, gauss_samples=1)

    default = (measure(ARMS, args.regime, seeds, Settings(**base)))
    sweep = {0.0: default}
    for sh in args.shared:
        sweep[sh] = (measure(SWEEP_ARMS, args.regime, seeds,
                                     Settings(shared_noise=sh, **base)))
    digits = {r: (measure(ARMS, r, seeds, Settings(dataset="digits", **base)))
              for r in args.digits}

    t_default = results.make_table(
        f"controls on the default data ({args.regime}, conditionally independent given the "
        f"class; {len(seeds)} seeds, mean ± sd; Δ paired by seed)",
        ARM_COLS, arm_rows([], default, ARMS), name="controls-default", formats=FORMATS)
    t_sweep = results.make_table(
        f"conditional independence broken by shared_noise ({args.regime}; {len(seeds)} seeds)",
        ["shared_noise", *ARM_COLS],
        [r for sh, raw in sweep.items()
         for r in arm_rows([sh], raw, [a for a in ARMS if a in raw and a in SWEEP_ARMS])],
        name="ci-sweep", formats=FORMATS | {"shared_noise": ".1f"})
    t_digits = results.make_table(
        f"digits, left half (a) + right half (b) ({len(seeds)} seeds; held-out split)",
        ["regime", *ARM_COLS], [r for reg, raw in digits.items() for r in arm_rows([reg], raw,
                                                                                   ARMS)],
        name="controls-digits", formats=FORMATS)
    t_contrast = results.make_table(
        "what each ingredient adds (paired by seed; Δacc and Δλ_max of the first arm minus "
        "the second)",
        ["data", "contrast", "Δacc [95% CI]", "MDE Δacc", "Δλ_max [95% CI]"],
        contrast_rows(f"synthetic {args.regime}", default)
        + [r for sh in args.shared for r in contrast_rows(f"shared_noise={sh:g}", sweep[sh])
           if r[1].startswith(("pairing (", "matched", "SAM"))]
        + [r for reg, raw in digits.items() for r in contrast_rows(f"digits {reg}", raw)],
        name="contrasts", formats={"Δacc [95% CI]": ".3f", "MDE Δacc": ".3f",
                                   "Δλ_max [95% CI]": ".2f"})
    tables = [t_default, t_contrast, t_sweep, t_digits]
    for t in tables:
        print(f"\n## {t['title']}\n\n{results.render_table(t)}")
    if args.out_results:
        results.write(args.out_results, tables, plugin="modality-pairing", seeds=seeds,
                      clock=clock, threads=threads, quick=False,
                      command="python " + shlex.join(
                          ["plugins/modality-pairing/benchmarks/controls.py",
                           *(sys.argv[1:] if argv is None else argv)]))
    return tables


if __name__ == "__main__":
    main()
