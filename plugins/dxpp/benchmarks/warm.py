"""Warm starts: the forward with the previous active set (``solve_qp(..., warm_active=...)``,
what ``DXPPQPLayer(warm_start=True)`` does) against a cold solve, in one run.

    python plugins/dxpp/benchmarks/warm.py

q is moved by eps * mean|q| of Gaussian noise; each arm is the fastest of 3 calls. ``path`` says
whether the warm point verified ("warm") or the solver had to run; ``max dx`` compares the warm
and cold solutions of the moved problem.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import _results
import numpy as np

from icml import results


def _best(f, repeats: int):
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simplex-n", type=int, default=100_000)
    ap.add_argument("--random-n", type=int, default=300)
    ap.add_argument("--eps", default="0.01,0.3,3")
    ap.add_argument("--repeats", type=int, default=3)
    _results.add_option(ap)
    args = ap.parse_args()
    clock = results.Clock()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    threads = results.apply_threads(1)
    rows: list[list[object]] = []
    from icml_dxpp.forward import solve_qp
    from icml_dxpp.problems import random_qp, simplex_projection
    from threadpoolctl import threadpool_limits

    print("| problem | eps | cold ms | warm ms | warm path | max dx |")
    print("|---|---|---|---|---|---|")
    with threadpool_limits(threads):
        for name, prob in ((f"simplex n={args.simplex_n}", simplex_projection(args.simplex_n,
                                                                               seed=0)),
                           (f"random n={args.random_n}", random_qp(args.random_n,
                                                                   seed=0).problem)):
            active = solve_qp(prob).extras["active"]
            for eps in (float(e) for e in args.eps.split(",")):
                rng = np.random.default_rng(1)
                moved = dataclasses.replace(
                    prob, q=prob.q + eps * np.abs(prob.q).mean() * rng.standard_normal(prob.n))
                tc, cold = _best(lambda p=moved: solve_qp(p), args.repeats)
                tw, warm = _best(lambda p=moved, a=active: solve_qp(p, warm_active=a),
                                 args.repeats)
                print(f"| {name} | {eps:g} | {tc * 1e3:.1f} | {tw * 1e3:.1f} | "
                      f"{warm.extras['path']} | {np.abs(warm.x - cold.x).max():.1e} |")
                rows.append([name, eps, tc * 1e3, tw * 1e3, tc / tw, warm.extras["path"],
                             float(np.abs(warm.x - cold.x).max())])
    if args.out_results:
        ms = ("cold ms", "warm ms", "cold / warm")
        table = results.make_table(
            "warm start from the previous active set vs a cold solve (fastest of "
            f"{args.repeats})", ["problem", "eps", *ms, "warm path", "max dx"], rows,
            name="warm", formats={"eps": "g", "cold ms": ".1f", "warm ms": ".1f",
                                  "cold / warm": ".2f", "max dx": ".1e"})
        _results.write(args.out_results, __file__, [table], clock=clock, threads=threads,
                       tolerance=_results.timing(*ms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
