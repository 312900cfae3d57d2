"""Benchmark: dXPP against the KKT backwards and the pip peers (qpth, cvxpylayers), in one run.

    python plugins/dxpp/benchmarks/bench.py                    # our arms only
    python plugins/dxpp/benchmarks/bench.py --peers /tmp/dxpp-peers   # + qpth, cvxpylayers
    ... --out-results plugins/dxpp/results/bench.json   # also write the tables (icml.results)

qpth and cvxpylayers are never dependencies of the plugin: installing them into the shared
environment downgrades numpy/cvxpy. Install them beside it, without dependencies, and pass the
folder with --peers (see the README for the exact command).

Every arm gets the same problem and the same upstream gradient ḡ ~ N(0, I) on x*, and every arm
goes through torch the same way: tensors in (all inputs requiring grad; torch.sparse for the
sparse families), its own forward, ``(x * ḡ).sum().backward()``, gradients out. Times are the
fastest of --repeats runs (one run for a peer call over 2 s, or n > 20 000), with BLAS limited
to --blas-threads threads. The error column is ‖grads − ref‖ / ‖ref‖ over every gradient the arm
returns — all six (Q, q, G, h, A, b) for our arms and qpth, (q, h, b) for cvxpylayers (Q, G, A
are constants in its DPP problem) — where ref is our reduced-KKT arm, i.e. the KKT backward
at the same --solver's forward as our other arms (default auto; clarabel at 1e-12 only
with --numpy-backward or --solver clarabel); sparse references are compared on their
pattern. A peer's error
also contains its own forward accuracy. ``--numpy-backward`` restores 0.1.0's protocol (our
backwards as bare NumPy on one shared forward).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Any

import _results
import numpy as np
import scipy.sparse as sp

from icml import results


def _ints(s: str) -> list[int]:
    return [int(v) for v in s.split(",") if v.strip()]


def _err(grads: dict[str, Any], ref: dict[str, Any]) -> float:
    """‖grads − ref‖/‖ref‖ over every gradient both have (all six for our arms and qpth);
    a sparse reference is compared on its pattern (a dense peer's gradient also has entries
    for the structural zeros of G, A, Q, which a sparse input has no gradient for)."""
    num = den = 0.0
    for k in ("Q", "q", "G", "h", "A", "b"):
        if k not in grads or k not in ref or grads[k] is None or ref[k] is None:
            continue
        r, gk = ref[k], grads[k]
        if sp.issparse(r):
            rc = sp.coo_matrix(r)
            rv = rc.data
            gv = (np.asarray(sp.csr_matrix(gk)[rc.row, rc.col]).reshape(-1) if sp.issparse(gk)
                  else np.asarray(gk)[rc.row, rc.col])
        else:
            rv = np.asarray(r).reshape(-1)
            gv = np.asarray(gk.toarray() if sp.issparse(gk) else gk).reshape(-1)
        num += float(np.sum((gv - rv) ** 2))
        den += float(np.sum(rv ** 2))
    return float(np.sqrt(num) / max(np.sqrt(den), 1e-300))


def _best(fn: Any, repeats: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def ours(prob: Any, g: np.ndarray, repeats: int, beta: float) -> dict[str, dict[str, Any]]:
    from icml_dxpp.forward import solve_qp
    from icml_dxpp.kkt import kkt_backward
    from icml_dxpp.penalty import PenaltyOptions, dxpp_backward

    fwd, sol = _best(lambda: solve_qp(prob, "clarabel"), 1 if prob.n > 20000 else repeats)
    args = (prob, sol.x, sol.ineq_dual, sol.eq_dual, g)
    arms = {"dXPP": lambda: dxpp_backward(*args, opts=PenaltyOptions(beta=beta))[0],
            "KKT-reduced": lambda: kkt_backward(*args, mode="reduced")[0],
            "KKT-full": lambda: kkt_backward(*args, mode="full")[0]}
    out = {}
    for name, fn in arms.items():
        bwd, grads = _best(fn, repeats)
        out[name] = {"fwd": fwd, "bwd": bwd, "grads": grads}
    return out


_SIX = ("Q", "q", "G", "h", "A", "b")


def _torch_inputs(prob: Any) -> list[Any]:
    """Leaf tensors for Q, q, G, h, A, b (torch.sparse COO for sparse blocks), requiring grad."""
    import torch

    out = []
    for name in _SIX:
        M = getattr(prob, name)
        if sp.issparse(M):
            c = sp.coo_matrix(M)
            t = torch.sparse_coo_tensor(np.vstack([c.row, c.col]), c.data, c.shape,
                                        dtype=torch.float64, check_invariants=False).coalesce()
        else:
            t = torch.tensor(np.asarray(M), dtype=torch.float64)
        out.append(t.requires_grad_())
    return out


def _to_np(t: Any) -> Any:
    if t is None:
        return None
    if t.layout != __import__("torch").strided:
        t = t.coalesce()
        idx = t.indices().numpy()
        return sp.csr_matrix((t.values().numpy(), (idx[0], idx[1])), shape=tuple(t.shape))
    return t.detach().numpy()


def ours_torch(prob: Any, g: np.ndarray, repeats: int, beta: float, solver: str = "auto"
               ) -> dict[str, dict[str, Any]]:
    """Our three arms through torch, like the peers: tensors in (all six requiring grad),
    ``dxpp_solve`` forward, ``(x * g).sum().backward()``, gradients out."""
    import torch
    from icml_dxpp import dxpp_solve

    gt = torch.tensor(g)
    reps = 1 if prob.n > 20000 else repeats
    arms = {"dXPP": {"beta": beta, "solver": solver},
            "KKT-reduced": {"backward": "kkt", "solver": solver},
            "KKT-full": {"backward": "kkt", "kkt_mode": "full", "solver": solver}}
    out = {}
    if prob.n <= 20000:  # one untimed call: first-call costs (imports, caches) are not the arm's
        warm = _torch_inputs(prob)
        dxpp_solve(*[None if (prob.m == 0 and k in "Gh") or (prob.p == 0 and k in "Ab") else t
                     for k, t in zip(_SIX, warm, strict=True)]).x.sum().backward()
    for name, kw in arms.items():
        best_f = best_b = float("inf")
        grads = None
        for _ in range(reps):
            ts = _torch_inputs(prob)
            args = [None if prob.m == 0 and k in "Gh" else
                    None if prob.p == 0 and k in "Ab" else t
                    for k, t in zip(_SIX, ts, strict=True)]
            t0 = time.perf_counter()
            x = dxpp_solve(*args, **kw).x
            t1 = time.perf_counter()
            (x * gt).sum().backward()
            t2 = time.perf_counter()
            best_f, best_b = min(best_f, t1 - t0), min(best_b, t2 - t1)
            grads = {k: _to_np(t.grad) for k, t in zip(_SIX, ts, strict=True)
                     if t.grad is not None}
        out[name] = {"fwd": best_f, "bwd": best_b, "grads": grads}
    return out


def _dense(M: Any) -> np.ndarray:
    return M.toarray() if sp.issparse(M) else np.asarray(M)


def qpth_arm(prob: Any, g: np.ndarray, repeats: int) -> dict[str, Any]:
    import torch
    from qpth.qp import QPFunction

    T = lambda a: torch.tensor(_dense(a), dtype=torch.float64).unsqueeze(0)  # noqa: E731
    e = torch.empty(0, dtype=torch.float64)
    gt = torch.tensor(g).unsqueeze(0)
    best_f, best_b, grads = float("inf"), float("inf"), None
    for _ in range(repeats):
        if grads is not None and best_f + best_b > 2.0:  # slow arm: one run is enough
            break
        Q, q, G, h, A, b = (T(getattr(prob, k)).requires_grad_() for k in _SIX)
        t = time.perf_counter()
        x = QPFunction(verbose=-1, eps=1e-12, maxIter=50)(
            Q, q, G if prob.m else e, h if prob.m else e, A if prob.p else e,
            b if prob.p else e)
        t1 = time.perf_counter()
        (x * gt).sum().backward()
        t2 = time.perf_counter()
        best_f, best_b = min(best_f, t1 - t), min(best_b, t2 - t1)
        grads = {k: v.grad[0].numpy() for k, v in zip(_SIX, (Q, q, G, h, A, b), strict=True)
                 if v.grad is not None}
    return {"fwd": best_f, "bwd": best_b, "grads": grads}


def cvxpylayers_arm(prob: Any, g: np.ndarray, repeats: int) -> dict[str, Any]:
    import cvxpy as cp
    import torch
    from cvxpylayers.torch import CvxpyLayer

    n, m, p = prob.n, prob.m, prob.p
    x = cp.Variable(n)
    qp, hp = cp.Parameter(n), cp.Parameter(m)
    Q = prob.Q if sp.issparse(prob.Q) else np.asarray(prob.Q)
    cons = [prob.G @ x <= hp]
    params = [qp, hp]
    if p:
        bp = cp.Parameter(p)
        cons.append(prob.A @ x == bp)
        params.append(bp)
    problem = cp.Problem(cp.Minimize(0.5 * cp.quad_form(x, cp.psd_wrap(Q)) + qp @ x), cons)
    layer = CvxpyLayer(problem, parameters=params, variables=[x])
    gt = torch.tensor(g)
    best_f, best_b, grads = float("inf"), float("inf"), None
    for _ in range(repeats):
        if grads is not None and best_f + best_b > 2.0:  # slow arm: one run is enough
            break
        vals = [torch.tensor(v).requires_grad_() for v in (prob.q, prob.h, prob.b)[:len(params)]]
        t = time.perf_counter()
        (xs,) = layer(*vals, solver_args={"solve_method": "Clarabel"})
        t1 = time.perf_counter()
        (xs * gt).sum().backward()
        t2 = time.perf_counter()
        best_f, best_b = min(best_f, t1 - t), min(best_b, t2 - t1)
        grads = {"q": vals[0].grad.numpy(), "h": vals[1].grad.numpy(),
                 "b": vals[2].grad.numpy() if p else np.zeros(0)}
    return {"fwd": best_f, "bwd": best_b, "grads": grads}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--random-sizes", type=_ints, default=[20, 100, 300])
    ap.add_argument("--simplex-sizes", type=_ints, default=[1000, 10000, 100000])
    ap.add_argument("--chain-dims", type=_ints, default=[2, 10, 50])
    ap.add_argument("--portfolio-steps", type=int, default=30)
    ap.add_argument("--peers", default="", help="folder holding qpth and cvxpylayers")
    ap.add_argument("--peer-max-n", type=int, default=1000,
                    help="largest n given to qpth (it densifies: n = 10 000 needs GBs)")
    ap.add_argument("--cvxpylayers-max-n", type=int, default=100000,
                    help="largest n given to cvxpylayers (it keeps sparse data)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--beta", type=float, default=1e-6)
    ap.add_argument("--blas-threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--solver", default="auto",
                    help="forward of our arms (through torch): auto (the default: piqp + "
                         "verified polish where Q is known PSD, else clarabel), clarabel "
                         "(0.2's default), or any installed qpsolvers backend")
    ap.add_argument("--numpy-backward", action="store_true",
                    help="0.1.0's protocol: our backwards as bare NumPy on one shared forward "
                         "(default: every arm through torch with its own forward)")
    _results.add_option(ap)
    args = ap.parse_args(argv)
    clock = results.Clock()
    if args.peers:
        sys.path.insert(0, args.peers)
    from icml_dxpp.problems import chain_projection, random_qp, simplex_projection

    peers = {}
    for name, fn, mod in (("qpth", qpth_arm, "qpth"), ("cvxpylayers", cvxpylayers_arm,
                                                        "cvxpylayers")):
        try:
            __import__(mod)
            peers[name] = fn
        except ImportError as exc:
            if args.peers:  # asked for: a table without the peer would be a different table
                print(f"error: {name} not importable from --peers {args.peers}: {exc}",
                      file=sys.stderr)
                return 2
            print(f"# {name} not available ({exc}); pass --peers DIR", file=sys.stderr)
    threads = results.apply_threads(max(args.blas_threads, 1))  # ICML_THREADS wins
    limit = contextlib.nullcontext()
    if args.blas_threads > 0:
        from threadpoolctl import threadpool_limits

        limit = threadpool_limits(limits=threads, user_api="blas")
    jobs = ([("random", n, lambda n=n: random_qp(n, seed=args.seed).problem)
             for n in args.random_sizes] +
            [("simplex", n, lambda n=n: simplex_projection(n, seed=args.seed))
             for n in args.simplex_sizes] +
            [("chain", d, lambda d=d: chain_projection(d, seed=args.seed))
             for d in args.chain_dims])
    print("| family | size | n | m | p | arm | fwd ms | bwd ms | total ms | bwd / dXPP | "
          "total / dXPP | grad err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    main_rows: list[list[Any]] = []
    port_rows: list[list[Any]] = []
    with limit:
        for family, size, make in jobs:
            prob = make()
            g = np.random.default_rng(args.seed).standard_normal(prob.n)
            res = (ours(prob, g, args.repeats, args.beta) if args.numpy_backward
                   else ours_torch(prob, g, args.repeats, args.beta, args.solver))
            ref = res["KKT-reduced"]["grads"]
            for name, fn in peers.items():
                cap = args.cvxpylayers_max_n if name == "cvxpylayers" else args.peer_max_n
                if prob.n > cap:
                    flag = "--cvxpylayers-max-n" if name == "cvxpylayers" else "--peer-max-n"
                    res[name] = {"skip": f"n > {flag} {cap}"}
                    continue
                try:
                    res[name] = fn(prob, g, args.repeats)
                except Exception as exc:  # noqa: BLE001 - report a peer failure, keep going
                    res[name] = {"skip": f"failed: {type(exc).__name__}: {str(exc)[:60]}"}
            base = res["dXPP"]
            for name, r in res.items():
                head = f"| {family} | {size} | {prob.n} | {prob.m} | {prob.p} | {name} |"
                if "skip" in r:
                    print(f"{head} – | – | – | – | – | {r['skip']} |")
                    main_rows.append([family, size, prob.n, prob.m, prob.p, name,
                                      None, None, None, None, None, r["skip"]])
                    continue
                tot, btot = r["fwd"] + r["bwd"], base["fwd"] + base["bwd"]
                err = _err(r["grads"], ref) if name != "KKT-reduced" else 0.0
                print(f"{head} {1e3 * r['fwd']:.2f} | {1e3 * r['bwd']:.2f} | {1e3 * tot:.2f} | "
                      f"{r['bwd'] / base['bwd']:.2f} | {tot / btot:.2f} | {err:.2e} |",
                      flush=True)
                main_rows.append([family, size, prob.n, prob.m, prob.p, name, 1e3 * r["fwd"],
                                  1e3 * r["bwd"], 1e3 * tot, r["bwd"] / base["bwd"],
                                  tot / btot, err])
        if args.portfolio_steps:
            from icml_dxpp.benchmark import portfolio_training

            print("\n| portfolio (T=5, k=10, n=50, batch 8) | initial loss | final loss | "
                  "s / step |\n|---|---|---|---|")
            curves = {}
            for method in ("dxpp", "kkt"):
                portfolio_training(method, steps=1, seed=args.seed)  # warm-up
                t = time.perf_counter()
                curves[method] = portfolio_training(method, steps=args.portfolio_steps,
                                                    seed=args.seed, beta=args.beta)["losses"]
                dt = (time.perf_counter() - t) / args.portfolio_steps
                c = curves[method]
                print(f"| {method} gradients | {c[0]:.5f} | {c[-1]:.5f} | {dt:.3f} |")
                port_rows.append([f"{method} gradients", c[0], c[-1], dt])
            gap = max(abs(a - b) for a, b in zip(curves["dxpp"], curves["kkt"], strict=True))
            print(f"\nmax |loss_dXPP - loss_KKT| over {args.portfolio_steps} steps: {gap:.2e}")
            for row in port_rows:
                row.insert(3, gap)
    if args.out_results:
        ms = ("fwd ms", "bwd ms", "total ms", "bwd / dXPP", "total / dXPP")
        tables = [results.make_table(
            "dXPP vs KKT backwards and peers: time and gradient error vs reduced KKT",
            ["family", "size", "n", "m", "p", "arm", *ms, "grad err"], main_rows, name="main",
            formats={**dict.fromkeys(ms, ".2f"), "grad err": ".2e"})]
        if port_rows:
            tables.append(results.make_table(
                f"portfolio (T=5, k=10, n=50, batch 8), {args.portfolio_steps} Adam steps",
                ["arm", "initial loss", "final loss",
                 "max abs loss gap dXPP vs KKT", "s / step"], port_rows, name="portfolio",
                formats={"initial loss": ".5f", "final loss": ".5f",
                         "max abs loss gap dXPP vs KKT": ".2e", "s / step": ".3f"}))
        _results.write(args.out_results, __file__, tables, clock=clock, threads=threads,
                       seeds=[args.seed], tolerance=_results.timing(*ms, "s / step"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
