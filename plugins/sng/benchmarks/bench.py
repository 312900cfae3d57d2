"""Benchmark: Adam, SGD, ENGD (full-batch natural gradient), SNG and SPRING.

1. PINN tables (``--parts 1d``, ``2d``, ``2dseeds``): each (method, seed) is one cell of an
   ``icml.sweep`` over the plugin's own job (``icml run sng --set methods=<m> --seed <s>``),
   every method with the same CPU-time budget and the same step cap; aggregated over seeds
   with :mod:`icml.stats` (geometric means of the errors with 95% bootstrap CIs over seeds)
   and written with ``icml.results.write`` (``--out-results``). 1D: tanh [1, 32, 1], 200
   interior points; 2D: the ENGD paper's problem (30 x 30 grid + 30 points per face),
   SNG/SPRING at the 2D defaults (256 interior + 120 boundary rows per step). ``1d``/``2d``:
   the seed sets initialisation and batches; ``2dseeds``: one initialisation (init seed 0),
   the seed sets the batches (the issue-6 goal's table).
2. 2D study (``--parts 2dstudy``, 0.1-era settings): rows per step, damping, line search and
   momentum, at a step budget over sampler seeds 0, 1, 2 (one init).
3. Linear least squares with spectral decay sigma_i = i^-decay (``--parts ls``; the README's
   table is ``icml run sng evaluate``).

No pip-installable PyTorch peer exists (NetKet / vmcnet are JAX), so the baselines are torch's
own Adam and SGD. Usage (from the repository root; R=plugins/sng/results)::

    python plugins/sng/benchmarks/bench.py --parts 1d --out-results $R/bench_1d.json
    python plugins/sng/benchmarks/bench.py --parts 2d --out-results $R/bench_2d.json
    python plugins/sng/benchmarks/bench.py --parts 2dseeds --out-results $R/bench_2dseeds.json
    python plugins/sng/benchmarks/bench.py --parts 2dstudy --study-steps 600 [--study-rows 0,1]
"""

from __future__ import annotations

import argparse
import math

import torch
from icml_sng import PoissonPINN, make_least_squares, mlp
from icml_sng.train import fit_least_squares, fit_pinn, make_optimizer, tuned_sgd

SGD_GRID = [1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0]  # x 1/max_i ||a_i||^2; 32 diverges


#: The arms of the PINN tables: one sweep cell per (method, seed), each an ``icml run sng``.
PARTS = {  # part -> (dim, default budget in CPU s, methods, init_seed (-1 = the seed), title)
    "1d": (1, 10.0, "adam,sgd,engd,sng,spring", -1, "1D Poisson PINN"),
    "2d": (2, 40.0, "adam,engd,sng,spring", -1, "2D Poisson PINN"),
    "2dseeds": (2, 120.0, "sng,spring", 0, "2D Poisson PINN, one initialisation"),
}


def _geo(values: list[float]) -> dict | None:
    """Geometric mean with a 95% percentile bootstrap CI over seeds (on log10 values):
    errors span orders of magnitude, so they are averaged on a log scale."""
    from icml import stats

    vals = [v for v in values if v > 0 and math.isfinite(v)]
    if len(vals) != len(values):
        return None
    e = stats.mean_ci([math.log10(v) for v in vals], seed=0).to_dict()
    return {**e, "value": 10 ** e["value"], "lo": 10 ** e["lo"], "hi": 10 ** e["hi"],
            "method": "geometric mean; " + e["method"].replace("items", "seeds")
            + " of log10"}


def sweep_table(part: str, budget: float, methods: list[str], seeds: list[int],
                workers: int, out: str | None) -> dict:
    """``part``'s table: every method x seed one cell of an ``icml.sweep`` over the sng job
    (``methods=<m>``, equal CPU-time budget and equal step cap for every method, errors every
    10 steps), aggregated over seeds with :mod:`icml.stats`."""
    import tempfile
    from pathlib import Path

    from icml import results, stats
    from icml.sweep import sweep

    dim, _, _, init_seed, title = PARTS[part]
    overrides = [f"dim={dim}", f"time_limit={budget:g}", "steps=1000000", "clock=cpu",
                 "eval_every=10", f"init_seed={init_seed}"]
    with tempfile.TemporaryDirectory() as tmp:
        res = sweep("sng", "train", grid={"methods": methods}, seeds=seeds,
                    out=Path(out or tmp) / part, overrides=overrides, device="cpu",
                    workers=workers, threads=1, plot=False)
    if not res.ok:
        raise SystemExit(f"{part}: cells failed: " + "; ".join(
            f"{c.name}: {c.error}" for c in res.cells if c.status != "ok"))
    rows = []
    for m in methods:
        runs = sorted((c for c in res.cells if c.params["methods"] == m), key=lambda c: c.seed)
        met = [c.metrics for c in runs]
        hit = [r for r in met if f"{m}_steps_to_target" in r]

        def per_seed(key: str, fmt: str, met: list[dict] = met) -> str:
            return ", ".join(f"{r[key]:{fmt}}" if key in r else "never" for r in met)

        rows.append([m, f"{len(hit)}/{len(met)}",
                     per_seed(f"{m}_steps_to_target", ".0f"),
                     per_seed(f"{m}_seconds_to_target", ".2f"),
                     _geo([r[f"{m}_rel_l2"] for r in met]),
                     _geo([r[f"{m}_late_median_rel_l2"] for r in met]),
                     per_seed(f"{m}_rel_l2", ".2e"),
                     stats.mean_ci([r[f"{m}_steps"] for r in met], seed=0)])
    init = "init seed 0, sampler seeds" if init_seed == 0 else "seeds (init and batches)"
    return results.make_table(
        f"{title}, {budget:g} CPU s per run, {init} {', '.join(map(str, seeds))}",
        ["method", "seeds at 1e-6", "steps to 1e-6 per seed", "CPU s to 1e-6 per seed",
         "final rel L2 (geo. mean [95% CI])", "median rel L2, last 10% (geo. mean [95% CI])",
         "final rel L2 per seed", "steps run (mean [95% CI])"],
        rows, name=part, formats={"final rel L2 (geo. mean [95% CI])": ".2e",
                                  "median rel L2, last 10% (geo. mean [95% CI])": ".2e",
                                  "steps run (mean [95% CI])": ".0f"})


#: The 2D study: label -> (method, optimizer settings). Step budget (load-independent).
STUDY_2D = [
    ("ENGD (full batch, 1020 rows)", "engd", {}),
    ("SNG 64+64 rows (old default, k ~ p)", "sng", {"batch_size": 64,
                                                     "boundary_batch_size": 64}),
    ("SNG 32+32 rows (k < p)", "sng", {"batch_size": 32, "boundary_batch_size": 32}),
    ("SNG 64+64, lambda=1e-8", "sng", {"batch_size": 64, "boundary_batch_size": 64,
                                        "damping": 1e-8}),
    ("SNG 128+120", "sng", {"batch_size": 128}),
    ("SNG 256+120 (new default)", "sng", {"batch_size": 256}),
    ("SNG 512+120", "sng", {"batch_size": 512}),
    ("SNG 256+120, line search on the batch", "sng", {"batch_size": 256,
                                                       "line_search_on": "batch"}),
    ("SPRING 64+64, mu=0.5 (old default)", "spring", {"batch_size": 64,
                                                       "boundary_batch_size": 64}),
    ("SPRING 256+120, mu=0.5 (new 2D default)", "spring", {"batch_size": 256}),
    ("SPRING 256+120, mu=0.2", "spring", {"batch_size": 256, "momentum": 0.2}),
    ("SPRING 256+120, mu=0.05", "spring", {"batch_size": 256,
                                                             "momentum": 0.05}),
]


def study_2d(steps: int, seeds: list[int], only: list[int] | None) -> None:
    """Same init (seed 0), sampler seeds ``seeds``: error after ``steps`` steps."""
    print(f"\n### 2D study: {steps} steps, sampler seeds {seeds} (init seed 0)\n")
    print("| setting | rows per step | final rel L2 per seed | best (min over seeds) | "
          "steps to 1e-6 per seed | s to 1e-6 per seed | ms per step |")
    print("|---|---|---|---|---|---|---|")
    for i, (label, m, extra) in enumerate(STUDY_2D):
        if only and i not in only:
            continue
        finals, bests, s6, t6, ms, rows = [], [], [], [], [], "1020"
        for seed in (seeds if m != "engd" else seeds[:1]):
            prob = PoissonPINN(mlp(2, [32], seed=0), dim=2, n_interior=30, n_boundary=30)
            kw = dict(damping=1e-10, momentum=0.5, line_search=12, seed=seed) | extra
            if m == "engd":
                kw.pop("seed")
            h = fit_pinn(prob, m, steps=steps, eval_every=10, **kw)
            if m != "engd":
                opt = make_optimizer(m, prob, **kw)
                rows = str(opt.batch_size)
            finals.append(h.final)
            bests.append(h.best)
            hit = [s for s, e in zip(h.steps, h.errors) if e <= 1e-6]
            s6.append(str(hit[0]) if hit else "never")
            t = h.time_to(1e-6)
            t6.append(f"{t:.1f}" if math.isfinite(t) else "never")
            ms.append(1e3 * h.times[-1] / h.steps[-1])
        print(f"| {label} | {rows} | {', '.join(f'{e:.1e}' for e in finals)} | "
              f"{min(bests):.1e} | {', '.join(s6)} | {', '.join(t6)} | "
              f"{sum(ms) / len(ms):.0f} |", flush=True)


def ls_table(steps: int) -> None:
    print(f"\n### Least squares n=500, p=100, k=20, {steps} steps: relative residual\n")
    print("| decay | SGD (best lr) | best lr x 1/max row norm^2 | SNG | SPRING (mu=0.5) "
          "| SGD / SNG | SNG / SPRING |")
    print("|---|---|---|---|---|---|---|")
    for decay in (0.0, 0.5, 1.0, 1.5, 2.0):
        prob = make_least_squares(500, 100, decay, seed=0)
        sgd, c = tuned_sgd(prob, steps=steps, batch_size=20, lr_grid=SGD_GRID)
        sng = fit_least_squares(prob, "sng", steps=steps, batch_size=20)
        spr = fit_least_squares(prob, "spring", steps=steps, batch_size=20, momentum=0.5)
        print(f"| {decay:g} | {sgd.final:.2e} | {c:g} | {sng.final:.2e} | {spr.final:.2e} | "
              f"{sgd.final / max(sng.final, 1e-300):.3g} | "
              f"{sng.final / max(spr.final, 1e-300):.3g} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=0.0,
                    help="CPU s per run of the PINN parts (0 = the part's default: 1d 10, "
                         "2d 40, 2dseeds 120)")
    ap.add_argument("--ls-steps", type=int, default=500)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--parts", default="1d", help="comma list of 1d, 2d, 2dseeds (sweeps: "
                                                  "with --out-results one part), 2dstudy, ls")
    ap.add_argument("--methods", default="", help="methods of the PINN parts (default: the "
                                                  "part's, see PARTS)")
    ap.add_argument("--seeds", default="0,1,2", help="seeds of the PINN sweeps")
    ap.add_argument("--workers", type=int, default=1,
                    help="sweep processes (1: one run at a time, as on a shared machine)")
    ap.add_argument("--sweep-dir", default=None, help="keep the sweep's runs here (resumable); "
                                                      "default: a temporary folder")
    ap.add_argument("--out-results", default=None,
                    help="with one PINN part: also write a results file "
                         "(plugins/sng/results/NAME.json)")
    ap.add_argument("--study-steps", type=int, default=600)
    ap.add_argument("--study-seeds", default="0,1,2", help="sampler seeds of the 2D study")
    ap.add_argument("--study-rows", default="", help="indices into STUDY_2D (default: all)")
    args = ap.parse_args()
    from icml import results

    parts = args.parts.split(",")
    pinn = [p for p in parts if p in PARTS]
    if args.out_results and (len(pinn) != 1 or len(parts) != 1):
        ap.error("--out-results needs exactly one of --parts 1d, 2d, 2dseeds")
    torch.set_num_threads(args.threads)
    clock = results.Clock()
    print(f"torch {torch.__version__}, {args.threads} thread(s)")
    seeds = [int(v) for v in args.seeds.split(",")]
    for part in pinn:
        budget = args.budget or PARTS[part][1]
        methods = (args.methods or PARTS[part][2]).split(",")
        table = sweep_table(part, budget, methods, seeds, args.workers, args.sweep_dir)
        print("\n" + results.render_table(table) + "\n", flush=True)
        if args.out_results:
            defaults = ap.parse_args(["--parts", part])
            extra = [f"--{k.replace('_', '-')} {getattr(args, k)}"
                     for k in ("budget", "methods", "seeds")
                     if getattr(args, k) != getattr(defaults, k)]
            cmd = " ".join([f"python plugins/sng/benchmarks/bench.py --parts {part}", *extra,
                            f"--out-results {args.out_results}"])
            why = ("each run stops at a CPU-time budget, so steps run, errors and times depend "
                   "on the machine and its load; steps to 1e-6 do not, but a run that misses "
                   "the budget by a little reads 'never'")
            path = results.write(args.out_results, [table], command=cmd, plugin="sng",
                                 seeds=seeds, quick=False, clock=clock, threads=args.threads,
                                 tolerance={"*": {"timing": True, "why": why}})
            print(f"results file: {path}")
    if "2dstudy" in parts:
        only = [int(i) for i in args.study_rows.split(",")] if args.study_rows else None
        study_2d(args.study_steps, [int(v) for v in args.study_seeds.split(",")], only)
    if "ls" in parts:
        ls_table(args.ls_steps)
    print(f"\ntotal {clock.wall():.0f} s")


if __name__ == "__main__":
    main()
