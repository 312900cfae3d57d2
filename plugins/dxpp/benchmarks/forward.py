"""Which forward is fastest at the accuracy the backward needs? One run, all installed solvers.

    python plugins/dxpp/benchmarks/forward.py

For each problem and forward setting: forward time (fastest of 3; 1 at n > 20 000) and the
relative error of the dXPP gradients (all six, upstream ḡ ~ N(0, I)) against the reduced KKT at
clarabel's 1e-12 solution (the main benchmark's reference).
"""

from __future__ import annotations

import argparse
import os
import time

import _results
import numpy as np

from icml import results

SETTINGS = [("clarabel", None, False), ("clarabel", 1e-8, False), ("clarabel", 1e-8, True),
            ("daqp", None, False), ("piqp", None, False), ("piqp", 1e-8, True),
            ("osqp", 1e-6, True)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dense-n", type=int, default=300)
    ap.add_argument("--simplex-n", type=int, default=100_000)
    _results.add_option(ap)
    args = ap.parse_args()
    clock = results.Clock()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    threads = results.apply_threads(1)
    rows: list[list[object]] = []
    import qpsolvers
    from icml_dxpp import differentiate, solve_qp
    from icml_dxpp.benchmark import rel_error
    from icml_dxpp.problems import random_qp, simplex_projection
    from threadpoolctl import threadpool_limits

    print("| problem | solver | tol | polish | fwd ms | grad err vs KKT@1e-12 |")
    print("|---|---|---|---|---|---|")
    with threadpool_limits(threads):
        for name, prob in ((f"random n={args.dense_n}", random_qp(args.dense_n, seed=0).problem),
                           (f"simplex n={args.simplex_n}",
                            simplex_projection(args.simplex_n, seed=0))):
            g = np.random.default_rng(0).standard_normal(prob.n)
            ref_sol = solve_qp(prob, "clarabel")
            ref = differentiate(prob, g, solution=ref_sol, method="kkt")[1]
            for solver, tol, pol in SETTINGS:
                if solver not in qpsolvers.available_solvers:
                    continue
                if solver == "daqp" and prob.sparse:
                    continue  # a dense solver
                best, sol = float("inf"), None
                row = [name, solver, f"{tol:g}" if tol else "default", str(pol)]
                try:
                    for _ in range(1 if prob.n > 20000 else 3):
                        t = time.perf_counter()
                        sol = solve_qp(prob, solver, tol=tol, polish_solution=pol)
                        best = min(best, time.perf_counter() - t)
                    err = rel_error(differentiate(prob, g, solution=sol)[1], ref)
                    cell = f"{best * 1e3:.1f} | {err:.2e}"
                    row += [best * 1e3, err]
                except Exception as exc:  # noqa: BLE001 - report and go on
                    cell = f"– | failed: {type(exc).__name__}: {str(exc)[:50]}"
                    row += [None, f"failed: {type(exc).__name__}: {str(exc)[:50]}"]
                rows.append(row)
                print(f"| {name} | {solver} | {tol if tol else 'default'} | {pol} | {cell} |",
                      flush=True)
    if args.out_results:
        table = results.make_table(
            "forward settings: time (fastest of 3; 1 at n > 20 000) and dXPP gradient error "
            "vs reduced KKT at clarabel 1e-12",
            ["problem", "solver", "tol", "polish", "fwd ms", "grad err vs KKT@1e-12"], rows,
            name="forward", formats={"fwd ms": ".1f", "grad err vs KKT@1e-12": ".2e"})
        _results.write(args.out_results, __file__, [table], clock=clock, threads=threads,
                       tolerance=_results.timing("fwd ms"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
