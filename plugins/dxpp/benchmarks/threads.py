"""Simplex projection n = 10⁵ through the layer at 1 and 2 threads (issue 68's thread-count
robustness of the sparse backward).

    python plugins/dxpp/benchmarks/threads.py --out-results plugins/dxpp/results/threads.json

The main benchmark's protocol (``bench.py``'s dXPP arm): torch.sparse Q, G and dense q, h, A, b,
all requiring grad, ``dxpp_solve`` with the defaults, ``(x * ḡ).sum().backward()``; torch and
BLAS limited to 1, then 2 threads in the same process; fastest of --repeats. ``q grad err`` is
‖∂q − closed form‖/‖closed form‖ (``simplex_vjp``), so it does not depend on our own reference.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import _results
import numpy as np

from icml import results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    _results.add_option(ap)
    args = ap.parse_args(argv)
    clock = results.Clock()
    load = os.getloadavg()[0]
    sys.path.insert(0, str(Path(__file__).parent))
    import torch
    from bench import _torch_inputs
    from icml_dxpp import dxpp_solve
    from icml_dxpp.problems import simplex_projection, simplex_solution, simplex_vjp
    from threadpoolctl import threadpool_limits

    prob = simplex_projection(args.n, seed=0)
    g = np.random.default_rng(0).standard_normal(prob.n)
    exact = simplex_vjp(simplex_solution(-prob.q), g)
    gt = torch.tensor(g)
    rows: list[list[Any]] = []
    print("| n | threads | fwd ms | bwd ms | total ms | q grad err |")
    print("|---|---|---|---|---|---|")
    for th in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(th)
        with threadpool_limits(th):
            best_f = best_b = float("inf")
            err = float("nan")
            for _ in range(args.repeats):
                ts = _torch_inputs(prob)
                t0 = time.perf_counter()
                x = dxpp_solve(*ts).x
                t1 = time.perf_counter()
                (x * gt).sum().backward()
                t2 = time.perf_counter()
                best_f, best_b = min(best_f, t1 - t0), min(best_b, t2 - t1)
                dq = ts[1].grad.numpy()
                err = float(np.linalg.norm(dq - exact) / np.linalg.norm(exact))
        tot = best_f + best_b
        print(f"| {prob.n} | {th} | {1e3 * best_f:.1f} | {1e3 * best_b:.1f} | {1e3 * tot:.1f} "
              f"| {err:.2e} |", flush=True)
        rows.append([prob.n, th, 1e3 * best_f, 1e3 * best_b, 1e3 * tot, err])
    if args.out_results:
        ms = ("fwd ms", "bwd ms", "total ms")
        table = results.make_table(
            f"simplex n = {args.n} through the layer at 1 and 2 threads (fastest of "
            f"{args.repeats})", ["n", "threads", *ms, "q grad err"], rows, name="threads",
            formats={**dict.fromkeys(ms, ".1f"), "q grad err": ".2e"})
        _results.write(args.out_results, __file__, [table], clock=clock, threads=None,
                       tolerance=_results.timing(*ms),
                       notes=f"load average {load:.1f} on a shared 2-core machine at the start")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
