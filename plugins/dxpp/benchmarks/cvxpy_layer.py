"""The cvxpy QP layer against the tensor API on the same QP (and cvxpylayers, with --peers).

    python plugins/dxpp/benchmarks/cvxpy_layer.py [--peers /tmp/dxpp-peers]

The QP is ``random_qp(n)`` written in cvxpy with parameters q, h, b (as the main benchmark's
cvxpylayers arm): min ½xᵀQx + qᵀx s.t. Gx ≤ h, Ax = b. Both dXPP arms go through torch,
tensors in to gradients out; forward = the layer call, backward = ``(x * g).sum().backward()``,
fastest of --repeats (default 5; the two dXPP arms alternate call by call). ``build s`` is the
one-off cost of the layer's construction (cvxpy's
canonicalisation and the probing of its affine parameter map). ``grad err`` is the relative
error of (∂q, ∂h, ∂b) against the tensor API's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import _results
import numpy as np

from icml import results


def _time(fn, repeats):
    best_f = best_b = float("inf")
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        xs, loss_fn, leaves = fn()
        t1 = time.perf_counter()
        loss_fn(xs).backward()
        t2 = time.perf_counter()
        best_f, best_b = min(best_f, t1 - t0), min(best_b, t2 - t1)
        out = [t.grad.detach().numpy().copy() for t in leaves]
    return best_f, best_b, out


def run_size(n: int, repeats: int, CvxpyLayer, out: list) -> None:
    """One table block: the tensor API, the cvxpy layer (and cvxpylayers) on random_qp(n)."""
    import cvxpy as cp
    import torch
    from icml_dxpp import CvxpyQPLayer, dxpp_solve
    from icml_dxpp.problems import random_qp

    prob = random_qp(n, seed=0).problem
    g = torch.tensor(np.random.default_rng(1).standard_normal(n))
    T = lambda a: torch.tensor(np.asarray(a), dtype=torch.float64)  # noqa: E731
    Q, G, A = T(prob.Q), T(prob.G), T(prob.A)

    def loss(x):
        return (x * g).sum()

    def tensor_api():
        q, h, b = (T(v).requires_grad_() for v in (prob.q, prob.h, prob.b))
        return dxpp_solve(Q, q, G, h, A, b).x, loss, (q, h, b)

    x = cp.Variable(n)
    qp, hp, bp = cp.Parameter(n), cp.Parameter(prob.m), cp.Parameter(prob.p)
    problem = cp.Problem(cp.Minimize(0.5 * cp.quad_form(x, cp.psd_wrap(prob.Q))
                                     + qp @ x), [prob.G @ x <= hp, prob.A @ x == bp])
    t = time.perf_counter()
    layer = CvxpyQPLayer(problem, [qp, hp, bp], [x])
    build = time.perf_counter() - t

    def through_cvxpy(layer=layer):
        q, h, b = (T(v).requires_grad_() for v in (prob.q, prob.h, prob.b))
        return layer(q, h, b)[0], loss, (q, h, b)

    # the two dXPP arms alternate, one call each per round, so a burst of load on the shared
    # machine hits both alike
    f0 = b0 = f1 = b1 = float("inf")
    for _ in range(repeats):
        fa, ba, ref = _time(tensor_api, 1)
        fb, bb, got = _time(through_cvxpy, 1)
        f0, b0, f1, b1 = min(f0, fa), min(b0, ba), min(f1, fb), min(b1, bb)
    rows = [("tensor API (dxpp_solve)", "", f0, b0, ref)]
    rows.append(("CvxpyQPLayer", f"{build:.2f}", f1, b1, got))
    if CvxpyLayer is not None and n <= 300:
        t = time.perf_counter()
        peer = CvxpyLayer(problem, parameters=[qp, hp, bp], variables=[x])
        pbuild = time.perf_counter() - t

        def cvxpylayers(peer=peer):
            q, h, b = (T(v).requires_grad_() for v in (prob.q, prob.h, prob.b))
            (xs,) = peer(q, h, b, solver_args={"solve_method": "Clarabel"})
            return xs, loss, (q, h, b)

        f2, b2, pg = _time(cvxpylayers, 1 if n > 100 else repeats)
        from importlib.metadata import version

        rows.append((f"cvxpylayers {version('cvxpylayers')}", f"{pbuild:.2f}", f2, b2, pg))
    base = f0 + b0
    nref = np.sqrt(sum(np.sum(r ** 2) for r in ref))
    for name, build_s, f, b, gr in rows:
        err = np.sqrt(sum(np.sum((a - r) ** 2) for a, r in zip(gr, ref, strict=True)))
        print(f"| {n} | {name} | {build_s} | {f * 1e3:.2f} | {b * 1e3:.2f} | "
              f"{(f + b) * 1e3:.2f} | {(f + b) / base:.2f} | {err / nref:.2e} |")
        out.append([n, name, float(build_s) if build_s else None, f * 1e3, b * 1e3,
                    (f + b) * 1e3, (f + b) / base, err / nref])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="20,100,300")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--peers", default="")
    _results.add_option(ap)
    args = ap.parse_args()
    clock = results.Clock()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.peers:
        sys.path.insert(0, args.peers)
    from threadpoolctl import threadpool_limits

    threads = results.apply_threads(1)
    try:
        from cvxpylayers.torch import CvxpyLayer
    except ImportError as exc:
        if args.peers:
            print(f"error: cvxpylayers not importable from --peers {args.peers}: {exc}",
                  file=sys.stderr)
            return 2
        CvxpyLayer = None
    rows: list[list[object]] = []
    print("| n | arm | build s | fwd ms | bwd ms | total ms | total / tensor API | grad err |")
    print("|---|---|---|---|---|---|---|---|")
    with threadpool_limits(threads):
        for n in (int(s) for s in args.sizes.split(",")):
            run_size(n, args.repeats, CvxpyLayer, rows)
    if args.out_results:
        ms = ("build s", "fwd ms", "bwd ms", "total ms", "total / tensor API")
        table = results.make_table(
            "the same QP through the tensor API, CvxpyQPLayer and cvxpylayers",
            ["n", "arm", *ms, "grad err"], rows, name="cvxpy-layer",
            formats={**dict.fromkeys(ms, ".2f"), "grad err": ".2e"})
        _results.write(args.out_results, __file__, [table], clock=clock, threads=threads,
                       tolerance=_results.timing(*ms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
