"""Batches of small dense QPs: the batched torch forward (``solver="torch"``) against the
per-problem default forward and qpth, in one run.

    python plugins/dxpp/benchmarks/batch.py --peers /tmp/dxpp-peers \\
        --out-results plugins/dxpp/results/batch.json

Every arm gets the same batch (``random_qp(n, seed=i)``, i < B: m = n inequalities, p = n // 4
equalities, all six inputs batched and requiring grad) and the same upstream gradient
ḡ ~ N(0, I) on x*: its own forward, ``(x * ḡ).sum().backward()``, gradients out; times are the
fastest of --repeats, torch and BLAS at 1 thread (``ICML_THREADS`` overrides). Arms:

* ``dXPP torch`` -- ``DXPPQPLayer(solver="torch")``, a fresh layer per call (cold; built
  with ``warm_start=True`` only to record its paths: a fresh layer has nothing to reuse);
* ``dXPP torch warm`` -- ``DXPPQPLayer(solver="torch", warm_start=True)`` after one call on the
  unperturbed batch; the timed batch has q moved by 1% of its mean |q| (active sets hold:
  a training step with a small learning rate);
* ``dXPP auto (per problem)`` -- the default forward, one problem at a time;
* ``qpth`` -- ``QPFunction(eps=1e-12, maxIter=50)`` as in ``bench.py``.

``paths``: how the torch arms' problems were solved (``torch``: interior point + polish;
``torch:warm``: the previous call's active set verified; ``torch -> ...``: the per-problem
fallback).

``grad err`` = ‖grads − ref‖/‖ref‖ over all six gradients, ref = the reduced KKT backward at the
per-problem default forward; ``max dx`` = largest |x − x_auto| against that forward's x.
``total / qpth`` < 1: the arm is faster than qpth.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any

import _results
import numpy as np

from icml import results

_SIX = ("Q", "q", "G", "h", "A", "b")


def _batch(B: int, n: int, eps: float = 0.0) -> tuple[dict[str, Any], np.ndarray]:
    """The batch (torch float64) and random_qp's constructed solutions (of the unmoved q)."""
    import torch
    from icml_dxpp.problems import random_qp

    known = [random_qp(n, seed=i) for i in range(B)]
    data = {k: np.stack([getattr(kq.problem, k) for kq in known]) for k in _SIX}
    x = np.stack([kq.x for kq in known])
    if eps:
        rng = np.random.default_rng(1)
        data["q"] = data["q"] + eps * np.abs(data["q"]).mean() * rng.standard_normal(
            data["q"].shape)
    return {k: torch.tensor(v) for k, v in data.items()}, x


def _time(call: Any, data: dict[str, Any], g: Any, repeats: int, fresh: Any = None
          ) -> dict[str, Any]:
    best_f = best_b = float("inf")
    out = None
    for _ in range(repeats):
        fn = fresh() if fresh is not None else call
        ins = {k: v.clone().requires_grad_() for k, v in data.items()}
        t = time.perf_counter()
        x = fn(*[ins[k] for k in _SIX])
        t1 = time.perf_counter()
        (x * g).sum().backward()
        t2 = time.perf_counter()
        best_f, best_b = min(best_f, t1 - t), min(best_b, t2 - t1)
        out = {"x": x.detach().numpy(), "grads": {k: ins[k].grad.numpy() for k in _SIX}}
    return {"fwd": best_f, "bwd": best_b, **out}


def _err(grads: dict[str, Any], ref: dict[str, Any]) -> float:
    num = sum(float(np.sum((grads[k] - ref[k]) ** 2)) for k in _SIX)
    den = sum(float(np.sum(ref[k] ** 2)) for k in _SIX)
    return float(np.sqrt(num / den))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", default="", help="folder holding qpth")
    ap.add_argument("--sizes", default="128x20,32x50", help="BxN,... batches to run")
    ap.add_argument("--repeats", type=int, default=3)
    _results.add_option(ap)
    args = ap.parse_args(argv)
    clock = results.Clock()
    load = os.getloadavg()[0]
    if args.peers:
        sys.path.insert(0, args.peers)
    try:
        from qpth.qp import QPFunction
    except ImportError as exc:
        if args.peers:  # asked for: a table without the peer would be a different table
            print(f"error: qpth not importable from --peers {args.peers}: {exc}",
                  file=sys.stderr)
            return 2
        QPFunction = None  # noqa: N806
        print(f"# qpth not available ({exc}); pass --peers DIR", file=sys.stderr)
    threads = results.apply_threads(1)  # ICML_THREADS wins
    from icml_dxpp import DXPPQPLayer, dxpp_solve
    from threadpoolctl import threadpool_limits

    rows: list[list[Any]] = []
    print("| batch | n | m | p | arm | fwd ms | bwd ms | total ms | total / qpth | grad err "
          "| max dx vs auto | paths |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with threadpool_limits(threads) if threads else contextlib.nullcontext():
        for spec in args.sizes.split(","):
            B, n = (int(v) for v in spec.lower().split("x"))
            base, _ = _batch(B, n)
            data, _ = _batch(B, n, eps=0.01)
            import torch

            g = torch.tensor(np.random.default_rng(0).standard_normal((B, n)))
            ref = _time(lambda *a: dxpp_solve(*a, backward="kkt").x, data, g, 1)
            x_ref = ref["x"]
            arms: dict[str, dict[str, Any]] = {}
            paths: dict[str, str] = {}
            layers: list[Any] = []

            def cold(layers: list[Any] = layers) -> Any:  # fresh: nothing to warm-start from
                layers.append(DXPPQPLayer(solver="torch", warm_start=True))
                return lambda *a: layers[-1](*a).x

            arms["dXPP torch"] = _time(None, data, g, args.repeats, fresh=cold)
            ps = layers[-1].options.cache["paths"]
            paths["dXPP torch"] = ", ".join(f"{p} x{ps.count(p)}" for p in sorted(set(ps)))
            warm = DXPPQPLayer(solver="torch", warm_start=True)
            warm(*[base[k] for k in _SIX])
            arms["dXPP torch warm"] = _time(lambda *a, w=warm: w(*a).x, data, g, args.repeats)
            ps = warm.options.cache["paths"]
            paths["dXPP torch warm"] = ", ".join(f"{p} x{ps.count(p)}" for p in sorted(set(ps)))
            arms["dXPP auto (per problem)"] = _time(lambda *a: dxpp_solve(*a).x, data, g,
                                                    args.repeats)
            if QPFunction is not None:
                arms["qpth"] = _time(
                    lambda *a: QPFunction(verbose=-1, eps=1e-12, maxIter=50)(*a), data, g,
                    args.repeats)
            q_tot = (arms["qpth"]["fwd"] + arms["qpth"]["bwd"]) if "qpth" in arms else None
            m, p = data["h"].shape[-1], data["b"].shape[-1]
            for name, r in arms.items():
                tot = r["fwd"] + r["bwd"]
                ratio = tot / q_tot if q_tot else None
                err = _err(r["grads"], ref["grads"])
                dx = float(np.abs(r["x"] - x_ref).max())
                path = paths.get(name, "")
                print(f"| {B} | {n} | {m} | {p} | {name} | {1e3 * r['fwd']:.2f} | "
                      f"{1e3 * r['bwd']:.2f} | {1e3 * tot:.2f} | "
                      f"{'-' if ratio is None else f'{ratio:.2f}'} | {err:.2e} | {dx:.1e} | "
                      f"{path} |", flush=True)
                rows.append([B, n, m, p, name, 1e3 * r["fwd"], 1e3 * r["bwd"], 1e3 * tot,
                             ratio, err, dx, path])
    if args.out_results:
        ms = ("fwd ms", "bwd ms", "total ms", "total / qpth")
        table = results.make_table(
            f"batches of dense QPs: batched torch forward vs per-problem and qpth (fastest of "
            f"{args.repeats})",
            ["batch", "n", "m", "p", "arm", *ms, "grad err", "max dx vs auto", "paths"], rows,
            name="batch", formats={**dict.fromkeys(ms, ".2f"), "grad err": ".2e",
                                   "max dx vs auto": ".1e"})
        _results.write(args.out_results, __file__, [table], clock=clock, threads=threads,
                       tolerance=_results.timing(*ms),
                       notes=f"load average {load:.1f} on a shared 2-core machine at the start")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
