"""Gradient parity with cvxpylayers' ``CvxpyLayer`` on QPs from its README and examples.

    python plugins/dxpp/benchmarks/cvxpylayers_parity.py --peers /tmp/dxpp-peers

Runs only in the benchmark environment (cvxpylayers is never a dependency; see the README).
Each problem gets the same random parameters in both layers and the same upstream gradient;
reported: max |x_ours − x_cvxpylayers| and the relative error of every parameter gradient.
cvxpylayers solves with SCS by default (accuracy ~1e-4); it is given Clarabel here.
"""

from __future__ import annotations

import argparse
import sys

import _results
import numpy as np

from icml import results


def problems(cp):
    """(name, problem, parameters, variables, parameter values) — QPs from cvxpylayers' docs."""
    rng = np.random.default_rng(0)
    out = []
    # README: min ½‖Ax − b‖₁ s.t. x ≥ 0 (an LP; in QP form with Q = 0)
    n, m = 2, 3
    x, A, b = cp.Variable(n), cp.Parameter((m, n)), cp.Parameter(m)
    out.append(("README ½‖Ax−b‖₁, x ≥ 0", cp.Problem(cp.Minimize(0.5 * cp.pnorm(A @ x - b, p=1)),
                                                      [x >= 0]),
                [A, b], [x], [rng.standard_normal((m, n)), rng.standard_normal(m)]))
    # examples: ReLU as a projection
    y, z = cp.Parameter(8), cp.Variable(8)
    out.append(("ReLU  min ‖z−y‖², z ≥ 0", cp.Problem(cp.Minimize(cp.sum_squares(z - y)),
                                                      [z >= 0]),
                [y], [z], [rng.standard_normal(8)]))
    # examples: sparsemax (projection onto the simplex)
    y2, z2 = cp.Parameter(10), cp.Variable(10)
    out.append(("sparsemax", cp.Problem(cp.Minimize(cp.sum_squares(z2 - y2)),
                                        [z2 >= 0, cp.sum(z2) == 1]),
                [y2], [z2], [rng.standard_normal(10)]))
    # examples: constrained least squares (data-fitting layer)
    F, gp = cp.Parameter((12, 5)), cp.Parameter(12)
    w = cp.Variable(5)
    out.append(("constrained LS", cp.Problem(
        cp.Minimize(cp.sum_squares(F @ w - gp) + 0.1 * cp.sum_squares(w)),
        [w >= -0.1, cp.sum(w) == 1]), [F, gp], [w],
        [rng.standard_normal((12, 5)), rng.standard_normal(12)]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", default="")
    _results.add_option(ap)
    args = ap.parse_args()
    clock = results.Clock()
    threads = results.apply_threads(1)
    rows: list[list[object]] = []
    if args.peers:
        sys.path.insert(0, args.peers)
    import cvxpy as cp
    import torch
    from cvxpylayers.torch import CvxpyLayer
    from icml_dxpp import CvxpyQPLayer

    print("| problem | max abs x diff | grad rel. err (per parameter) |")
    print("|---|---|---|")
    for name, prob, params, variables, vals in problems(cp):
        res = {}
        for arm in ("ours", "peer"):
            layer = (CvxpyQPLayer(prob, params, variables) if arm == "ours" else
                     CvxpyLayer(prob, parameters=params, variables=variables))
            ts = [torch.tensor(v, requires_grad=True) for v in vals]
            kw = {"solver_args": {"solve_method": "Clarabel"}} if arm == "peer" else {}
            (xs,) = layer(*ts, **kw)
            wts = torch.tensor(np.random.default_rng(7).standard_normal(xs.shape))
            (xs * wts).sum().backward()
            res[arm] = (xs.detach().numpy(), [t.grad.numpy() for t in ts])
        dx = np.abs(res["ours"][0] - res["peer"][0]).max()
        errs = [np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)
                for a, b in zip(res["ours"][1], res["peer"][1], strict=True)]
        print(f"| {name} | {dx:.1e} | {', '.join(f'{e:.1e}' for e in errs)} |")
        rows.append([name, float(dx), ", ".join(f"{e:.1e}" for e in errs)])
    if args.out_results:
        table = results.make_table(
            "CvxpyQPLayer vs cvxpylayers (Clarabel) on QPs from cvxpylayers' docs",
            ["problem", "max abs x diff", "grad rel. err (per parameter)"], rows,
            name="parity", formats={"max abs x diff": ".1e"})
        _results.write(args.out_results, __file__, [table], clock=clock, threads=threads,
                       quick=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
