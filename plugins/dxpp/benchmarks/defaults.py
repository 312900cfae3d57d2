"""The trade-offs behind two defaults, measured in one run.

    python plugins/dxpp/benchmarks/defaults.py

1. The ρ rule. The paper uses ρ = c‖dual‖₁; ``rho_min`` floors ‖dual‖₁ (our option, the default
   before version 0.2). Gradient error of dXPP vs the reduced KKT, both at the exact (constructed)
   solution, so only the backward differs, on: well-conditioned random QPs (duals ~1), an
   ill-conditioned QP with small duals (Q of rank 9 scaled by 0.01, duals ~0.01), and a QP whose
   equality duals are exactly zero (Ax = b holds at the unconstrained optimum of its block);
   the default since 0.3 adds the zero-dual guard (``zero_dual_guard=1e-3``), ours.
2. ``linear_solver='auto'`` on large sparse systems: CG (residual-checked, direct fallback) once
   n ≥ ``cg_min_n`` (the official code's 50 000 rule) vs the direct sparse solve.
"""

from __future__ import annotations

import argparse
import os
import time

import _results
import numpy as np

from icml import results


def _known(n: int, m: int, p: int, k: int, seed: int, q_rank: int | None = None,
           q_scale: float = 1.0, dual_scale: float = 1.0, zero_mu: bool = False):
    from icml_dxpp.forward import QPResult
    from icml_dxpp.qp import make_problem

    rng = np.random.default_rng(seed)
    r = 2 * n if q_rank is None else q_rank
    M = rng.standard_normal((n, r))
    Q = q_scale * (M @ M.T / r + (1e-3 * np.eye(n) if q_rank is None else 0.0))
    G = rng.standard_normal((m, n)) / np.sqrt(n)
    A = rng.standard_normal((p, n)) / np.sqrt(n)
    x = rng.standard_normal(n)
    act = rng.permutation(m)[:k]
    nu = np.zeros(m)
    nu[act] = dual_scale * (0.5 + rng.random(k))
    slack = 0.5 + rng.random(m)
    slack[act] = 0.0
    mu = np.zeros(p) if zero_mu else dual_scale * rng.standard_normal(p)
    q = -(Q @ x + G.T @ nu + A.T @ mu)
    prob = make_problem((Q + Q.T) / 2, q, G, G @ x + slack, A, A @ x, check=False)
    return prob, QPResult(x, eq_dual=mu, ineq_dual=nu, solver="constructed")


def rho_rule(repeats: int) -> list[tuple[str, float, float, float]]:
    from icml_dxpp import differentiate
    from icml_dxpp.benchmark import rel_error

    cases = {
        "random n=50 (duals ~1)": [_known(50, 50, 12, 25, s) for s in range(repeats)],
        "ill-cond. n=34, rank-9 Q x0.01, duals ~0.01": [
            _known(34, 34, 8, 17, s, q_rank=9, q_scale=0.01, dual_scale=0.01)
            for s in range(repeats)],
        "zero equality duals n=30": [_known(30, 30, 5, 10, s, zero_mu=True)
                                     for s in range(repeats)],
    }
    rows = []
    for name, probs in cases.items():
        arms = {"paper": {"zero_dual_guard": None},
                "guard": {},  # the default: the paper's rule + the zero-dual guard
                "floor": {"rho_min": 1.0, "zero_dual_guard": None}}
        errs = dict.fromkeys(arms, 0.0)
        for i, (prob, sol) in enumerate(probs):
            g = np.random.default_rng(100 + i).standard_normal(prob.n)
            ref = differentiate(prob, g, solution=sol, method="kkt")[1]
            for arm, kw in arms.items():
                got = differentiate(prob, g, solution=sol, **kw)[1]
                errs[arm] = max(errs[arm], rel_error(got, ref))
        rows.append((name, errs["paper"], errs["guard"], errs["floor"]))
    return rows


def auto_solver(simplex_n: int, chain_d: int) -> list[tuple[str, int, str, float, float]]:
    from icml_dxpp import differentiate, solve_qp
    from icml_dxpp.benchmark import rel_error
    from icml_dxpp.problems import chain_projection, simplex_projection

    rows = []
    for name, prob in ((f"simplex n={simplex_n}", simplex_projection(simplex_n, seed=0)),
                       (f"chain d={chain_d}", chain_projection(chain_d, N=100, seed=0))):
        sol = solve_qp(prob, "clarabel")
        g = np.random.default_rng(1).standard_normal(prob.n)
        ref = differentiate(prob, g, solution=sol, method="kkt")[1]
        for label, kw in (("auto (n >= cg_min_n: CG)", {"cg_min_n": 50_000}),
                          ("direct sparse (cg_min_n=None)", {"cg_min_n": None})):
            best, out = float("inf"), None
            for _ in range(3):
                t = time.perf_counter()
                out = differentiate(prob, g, solution=sol, **kw)
                best = min(best, time.perf_counter() - t)
            it = out[2].get("cg_iters", "")
            rows.append((name, prob.n, f"{label} -> {out[2]['linear_solver']} {it}", best * 1e3,
                         rel_error(out[1], ref)))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--simplex-n", type=int, default=100_000)
    ap.add_argument("--chain-d", type=int, default=500)
    _results.add_option(ap)
    args = ap.parse_args()
    clock = results.Clock()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from threadpoolctl import threadpool_limits

    threads = results.apply_threads(1)
    rho_rows: list[list[object]] = []
    cg_rows: list[list[object]] = []
    with threadpool_limits(threads):
        print("| problem | max err, paper's rule unguarded (zero_dual_guard=None) | "
              "max err, default (paper + zero-dual guard) | max err, rho_min=1 |")
        print("|---|---|---|---|")
        for name, e0, eg, e1 in rho_rule(args.seeds):
            print(f"| {name} | {e0:.2e} | {eg:.2e} | {e1:.2e} |")
            rho_rows.append([name, e0, eg, e1])
        print()
        print("| problem | n | linear solver | backward ms | err vs KKT |")
        print("|---|---|---|---|---|")
        for name, n, label, ms, err in auto_solver(args.simplex_n, args.chain_d):
            print(f"| {name} | {n} | {label} | {ms:.1f} | {err:.2e} |")
            cg_rows.append([name, n, label, ms, err])
    if args.out_results:
        errs = ("paper's rule unguarded (zero_dual_guard=None)",
                "default (paper + zero-dual guard)", "rho_min=1")
        tables = [
            results.make_table(
                f"rho rule: max relative gradient error vs reduced KKT over {args.seeds} seeds",
                ["problem", *errs], rho_rows, name="rho",
                formats=dict.fromkeys(errs, ".2e")),
            results.make_table(
                "linear_solver='auto' on large sparse systems: backward only, fastest of 3",
                ["problem", "n", "linear solver", "backward ms", "err vs KKT"], cg_rows,
                name="cg", formats={"backward ms": ".1f", "err vs KKT": ".2e"}),
        ]
        _results.write(args.out_results, __file__, tables, clock=clock, threads=threads,
                       seeds=list(range(args.seeds)), tolerance=_results.timing("backward ms"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
