"""Benchmark: Adam, SGD, ENGD (full-batch natural gradient), SNG and SPRING in one run.

1. 1D Poisson PINN (tanh [1, 32, 1], 200 interior points): relative L2 error at a wall-clock
   budget per method, seconds to reach 1e-6.
2. 2D Poisson PINN (ENGD paper config: tanh [2, 32, 1], 30x30 interior grid, 30 points per
   boundary face): same, larger budget.
3. Linear least squares with spectral decay sigma_i = i^-decay: tuned SGD vs SNG vs SPRING at a
   fixed step count.

No pip-installable PyTorch peer exists (NetKet / vmcnet are JAX), so the baselines are torch's
own Adam and SGD. Usage::

    python benchmarks/bench.py [--budget1d 8] [--budget2d 20] [--threads 1]
    python benchmarks/bench.py --parts 2d --methods2d engd,spring --budget2d 200
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from icml_sng import PoissonPINN, make_least_squares, mlp
from icml_sng.train import fit_least_squares, fit_pinn, tuned_sgd

SGD_GRID = [1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0]  # x 1/max_i ||a_i||^2; 32 diverges


def pinn_table(dim: int, budget: float, methods: list[tuple[str, str, dict]], n_interior: int,
               n_boundary: int, batch: int) -> None:
    print(f"\n### {dim}D Poisson PINN, {budget:g} s per method (float64)\n")
    print("| method | steps | final rel L2 | best rel L2 | s to 1e-6 | Adam final / final |")
    print("|---|---|---|---|---|---|")
    hists = {}
    for label, m, extra in methods:
        prob = PoissonPINN(mlp(dim, [32], seed=0), dim=dim, n_interior=n_interior,
                           n_boundary=n_boundary)
        kw = dict(batch_size=batch, damping=1e-10, momentum=0.5, line_search=12) | extra
        hists[label] = fit_pinn(prob, m, steps=10**6, time_limit=budget,
                                eval_every=5 if m in ("engd", "sng", "spring") else 50, **kw)
    ref = hists["adam"].final if "adam" in hists else math.nan
    for m, h in hists.items():
        t = h.time_to(1e-6)
        print(f"| {m} | {h.steps[-1]} | {h.final:.2e} | {h.best:.2e} | "
              f"{'never' if not math.isfinite(t) else f'{t:.1f}'} | {ref / h.final:.3g} |")


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
    ap.add_argument("--budget1d", type=float, default=8.0)
    ap.add_argument("--budget2d", type=float, default=20.0)
    ap.add_argument("--ls-steps", type=int, default=500)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--parts", default="1d,2d,ls", help="comma list of 1d, 2d, ls")
    ap.add_argument("--methods2d", default="adam,engd,sng,spring")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    print(f"torch {torch.__version__}, {args.threads} thread(s)")
    plain = [(m, m, {}) for m in ("adam", "sgd", "engd", "sng", "spring")]
    sng_b = ("sng (lambda=1e-6, batch line search)", "sng",
             {"damping": 1e-6, "line_search_on": "batch"})
    parts = args.parts.split(",")
    if "1d" in parts:
        pinn_table(1, args.budget1d, [*plain, sng_b], 200, 30, 32)
    if "2d" in parts:
        m2 = args.methods2d.split(",")
        pinn_table(2, args.budget2d, [p for p in plain if p[0] in m2], 30, 30, 64)
    if "ls" in parts:
        ls_table(args.ls_steps)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
