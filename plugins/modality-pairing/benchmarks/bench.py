"""Benchmark: the regime table (unimodal vs fixed vs stochastic pairing over seeds) and the cost
and accuracy of each sharpness measure against PyHessian on the same model and data.

    python plugins/modality-pairing/benchmarks/bench.py --seeds 5 --peers /tmp/mp_peers

``--peers`` is a folder with PyHessian installed by ``pip install --no-deps --target DIR
pyhessian==0.1`` (GPL, never a dependency of the plugin; ``nox -s bench_modality_pairing`` does
this). Without it the PyHessian rows are skipped. Single-threaded, CPU, float32 (float64 for
the eigvalsh reference).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import torch  # noqa: E402
from icml_modality_pairing.experiment import (  # noqa: E402
    Settings,
    make_data,
    run_regimes,
    summarize,
    wins,
)
from icml_modality_pairing.hessian import hessian_trace, lanczos, power_iteration  # noqa: E402
from icml_modality_pairing.objective import Objective  # noqa: E402
from icml_modality_pairing.sharpness import (  # noqa: E402
    epsilon_sharpness,
    gaussian_perturbation_sharpness,
)
from icml_modality_pairing.training import build_arm_model, train_model  # noqa: E402
from torch import nn  # noqa: E402

ARMS = ("unimodal", "fixed", "stochastic")


def regime_table(regimes: list[str], seeds: int, schedule: str) -> tuple[str, dict]:
    s = Settings(schedule=schedule, trace_samples=16, gauss_samples=20)
    t0 = time.perf_counter()
    runs = run_regimes(regimes, list(range(seeds)), s)
    wall = time.perf_counter() - t0
    keys = ("accuracy", "lambda_max", "trace", "gauss_sharpness")
    st = {k: summarize(runs, k) for k in keys}
    lines = [f"schedule={schedule}, {seeds} seeds, mean ± std; sharpness on 1000 held-out "
             f"samples; total {wall:.0f} s",
             "", "| regime | arm | test acc | λ_max | Hutchinson trace | Gauss ΔL (σ=0.05) |",
             "|---|---|---|---|---|---|"]
    for r in regimes:
        for a in ARMS:
            m = [st[k][(r, a)] for k in keys]
            lines.append(f"| {r} | {a} | {m[0][0]:.3f} ± {m[0][1]:.3f} | "
                         f"{m[1][0]:.2f} ± {m[1][1]:.2f} | {m[2][0]:.1f} ± {m[2][1]:.1f} | "
                         f"{m[3][0]:.4f} ± {m[3][1]:.4f} |")
    lines += ["", "| regime | stochastic > fixed (acc) | stochastic flatter (λ_max) | "
              "fixed > unimodal (acc) |", "|---|---|---|---|"]
    for r in regimes:
        wa = wins(runs, "accuracy", "stochastic", "fixed", r)
        wl = wins(runs, "lambda_max", "stochastic", "fixed", r, lower=True)
        wu = wins(runs, "accuracy", "fixed", "unimodal", r)
        lines.append(f"| {r} | {wa[0]}/{wa[1]} | {wl[0]}/{wl[1]} | {wu[0]}/{wu[1]} |")
    raw = [dict(regime=r.regime, arm=r.arm, seed=r.seed, **r.metrics) for r in runs]
    return "\n".join(lines), {"schedule": schedule, "runs": raw}


def p_sweep(regime: str, seeds: int, shared: list[float], ps: list[float]) -> tuple[str, dict]:
    """Mixing probability × instance-level cross-modal correlation (``shared_noise``): where
    fixed pairing has information that stochastic pairing throws away."""
    from icml_modality_pairing.experiment import parse_regime, run_arm

    n, ep = parse_regime(regime)
    lines = [f"regime {regime}, {seeds} seeds, mean ± std of test accuracy (λ_max)", "",
             "| shared_noise | " + " | ".join(f"p={p:g}" for p in ps) + " | unimodal |",
             "|---|" + "---|" * (len(ps) + 1)]
    raw = []
    for sh in shared:
        cells = []
        for p in [*ps, None]:
            s = Settings(shared_noise=sh, p_stochastic=p if p is not None else 0.0,
                         trace_samples=0, gauss_samples=1)
            arm = "unimodal" if p is None else ("fixed" if p == 0 else "stochastic")
            ms = [run_arm(arm, n, ep, seed, s).metrics for seed in range(seeds)]
            acc = [m["accuracy"] for m in ms]
            lam = [m["lambda_max"] for m in ms]
            raw.append({"shared_noise": sh, "p": p, "accuracy": acc, "lambda_max": lam})
            sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
            cells.append(f"{statistics.fmean(acc):.3f} ± {sd:.3f} "
                         f"({statistics.fmean(lam):.2f})")
        lines.append(f"| {sh:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines), {"regime": regime, "runs": raw}


class Concat(nn.Module):
    """The late-fusion model on concatenated inputs (PyHessian calls model(inputs))."""

    def __init__(self, model: nn.Module, dim: int) -> None:
        super().__init__()
        self.model, self.dim = model, dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(a=x[:, :self.dim], b=x[:, self.dim:])


def _timed(fn, repeats: int, seed: int = 0) -> tuple[float, object]:
    """Best wall time of ``repeats`` identical runs (same seed, so the same HVP count)."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn(seed)
        best = min(best, time.perf_counter() - t0)
    return best, out


def explicit_hessian(obj: Objective) -> torch.Tensor:
    """Row by row from cached HVPs (memory-light for a few thousand parameters)."""
    eye = torch.eye(obj.dim, dtype=obj.theta0.dtype)
    return torch.stack([obj.hvp(e) for e in eye])


def sharpness_costs(width: int, peers: str | None, repeats: int, probes: int,
                    check: bool) -> tuple[str, dict]:
    s = Settings()
    train, test = make_data(2000, s, 0)
    torch.manual_seed(0)
    model = build_arm_model("stochastic", train, width=width, hidden=width)
    train_model(model, train, epochs=15, seed=0)
    net = Concat(model.eval(), s.dim)
    x = torch.cat([test.modalities["a"], test.modalities["b"]], 1)
    y = test.labels
    crit = nn.CrossEntropyLoss()
    full = [(x, y)]
    chunks = [(x[i:i + 100], y[i:i + 100]) for i in range(0, len(y), 100)]
    res, lines = {}, []
    ref = None
    if check:
        obj64 = Objective(Concat(model, s.dim).double(), crit, [(x.double(), y)])
        t0 = time.perf_counter()
        ev = torch.linalg.eigvalsh(explicit_hessian(obj64))
        ref = {"dominant": float(ev[ev.abs().argmax()]), "max": float(ev[-1]),
               "trace": float(ev.sum()), "seconds": time.perf_counter() - t0}
        model.float()
    n_params = sum(p.numel() for p in net.parameters())
    pyh = None
    calls = {"hvp": 0}
    if peers:
        sys.path.insert(0, peers)
        try:  # the module (its package re-exports the class under the same name)
            pyh_mod = importlib.import_module("pyhessian.hessian")
        except ImportError:
            pyh_mod = None
        if pyh_mod is not None:  # count PyHessian's HVPs (both of its code paths)
            pyh = pyh_mod.hessian
            single, loader = pyh_mod.hessian_vector_product, pyh.dataloader_hv_product

            def counted_single(*a, **k):
                calls["hvp"] += 1
                return single(*a, **k)

            def counted_loader(self, v):
                calls["hvp"] += 1
                return loader(self, v)

            pyh_mod.hessian_vector_product = counted_single
            pyh.dataloader_hv_product = counted_loader
    for label, batches in (("1 batch × 1000", full), ("10 batches × 100", chunks)):
        arms = {}
        for tol in (1e-3, 1e-4):
            for backend in ("autograd", "func"):
                obj = Objective(net, crit, batches, backend=backend)
                t, r = _timed(lambda k, obj=obj, tol=tol: power_iteration(
                    obj, iters=200, tol=tol, seed=k), repeats)
                arms[f"ours power ({backend}), tol {tol:g}"] = (t, r.eigenvalue, r.iterations)
            obj = Objective(net, crit, batches)
            t, r = _timed(lambda k, obj=obj, tol=tol: lanczos(obj, iters=200, tol=tol, seed=k),
                          repeats)
            arms[f"ours Lanczos, tol {tol:g}"] = (t, r.eigenvalue, r.iterations)
            if pyh is not None:
                def run_pyh(k, tol=tol, batches=batches):
                    torch.manual_seed(k)
                    calls["hvp"] = 0
                    if len(batches) == 1:
                        h = pyh(net, crit, data=batches[0], cuda=False)
                    else:
                        h = pyh(net, crit, dataloader=batches, cuda=False)
                    return h.eigenvalues(maxIter=200, tol=tol)[0][0], calls["hvp"]
                t, (lam, count) = _timed(run_pyh, repeats)
                arms[f"PyHessian power, tol {tol:g}"] = (t, lam, count)
        obj = Objective(net, crit, batches)
        t, tr = _timed(lambda k, obj=obj: hessian_trace(obj, n_samples=probes, seed=k), repeats)
        arms[f"ours Hutchinson ({probes} probes)"] = (t, tr.trace, probes)
        if pyh is not None:
            def run_pyh_trace(k, batches=batches):
                torch.manual_seed(k)
                h = pyh(net, crit, data=batches[0], cuda=False) if len(batches) == 1 else \
                    pyh(net, crit, dataloader=batches, cuda=False)
                return float(sum(h.trace(maxIter=probes, tol=0.0)) / probes)
            t, trp = _timed(run_pyh_trace, repeats)
            arms[f"PyHessian trace ({probes} probes)"] = (t, trp, probes)
        t, e = _timed(lambda k, obj=obj: epsilon_sharpness(obj, rho=0.05), repeats)
        arms["ours ε-sharpness (ρ=0.05)"] = (t, e, None)
        t, gm = _timed(lambda k, obj=obj: gaussian_perturbation_sharpness(
            obj, sigma=0.05, n=20, seed=k), repeats)
        arms["ours Gaussian ΔL (20 draws)"] = (t, gm[0], None)
        res[label] = arms
        lines += ["", f"**{label}** ({n_params} parameters, width {width}; best of {repeats} "
                  "identical runs; same start vector seed for every arm of ours)", "",
                  "| measure | time (ms) | PyHessian time / ours | value | HVPs | ms / HVP | "
                  "\\|err\\| vs eigvalsh |", "|---|---|---|---|---|---|---|"]
        for name, (t, val, it) in arms.items():
            peer = None
            if pyh is not None and "tol" in name and not name.startswith("PyHessian"):
                peer = arms.get(f"PyHessian power, tol {name.split('tol ')[-1]}")
            if pyh is not None and "Hutchinson" in name:
                peer = arms.get(f"PyHessian trace ({probes} probes)")
            ratio = f"{peer[0] / t:.2f}" if peer else ""
            per = f"{1e3 * t / it:.2f}" if it else ""
            err = ""
            if ref is not None and ("power" in name or "Lanczos" in name):
                target = ref["max"] if "Lanczos" in name else ref["dominant"]
                err = f"{abs(val - target):.1e}"
            lines.append(f"| {name} | {1e3 * t:.1f} | {ratio} | {val:.5g} | {it or ''} | {per} "
                         f"| {err} |")
    if ref is not None:
        lines += ["", f"eigvalsh reference (float64, explicit {n_params}² Hessian): dominant "
                  f"λ = {ref['dominant']:.6f}, max λ = {ref['max']:.6f}, trace = "
                  f"{ref['trace']:.3f} ({ref['seconds']:.1f} s)"]
    return "\n".join(lines), {"width": width, "n_params": n_params, "reference": ref,
                              "arms": {k: {n: list(v) for n, v in a.items()}
                                       for k, a in res.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("all", "regimes", "sweep", "sharpness"), default="all")
    ap.add_argument("--sweep-regime", default="2000x15")
    ap.add_argument("--sweep-shared", type=float, nargs="+", default=[0.0, 0.8])
    ap.add_argument("--sweep-p", type=float, nargs="+", default=[0.0, 0.5, 1.0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--regimes", nargs="+", default=["2000x15", "1000x10", "400x150"])
    ap.add_argument("--constant-lr-regimes", nargs="*", default=["400x150"],
                    help="regimes rerun with a constant learning rate")
    ap.add_argument("--widths", type=int, nargs="+", default=[32, 64])
    ap.add_argument("--check-widths", type=int, nargs="*", default=[32],
                    help="widths whose explicit Hessian is diagonalised (eigvalsh reference)")
    ap.add_argument("--probes", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peers", default=None, help="folder with pyhessian installed")
    ap.add_argument("--json", default=None, help="write raw results here")
    ap.add_argument("--out-results", default=None,
                    help="also write the printed tables as a results file "
                         "(plugins/modality-pairing/results/*.json)")
    ap.add_argument("--from-raw", default=None,
                    help="tabulate the printed output of an earlier run (benchmarks/results.md) "
                         "for --part instead of running it")
    args = ap.parse_args()
    from icml import results

    clock = results.Clock()
    threads = results.apply_threads(1)
    tables: list[dict] = []
    out = {}
    if args.from_raw:
        tables = _from_raw(Path(args.from_raw).read_text(encoding="utf-8"), args.part)
        _write(args, tables, clock, threads)
        return
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"{os.cpu_count()} CPUs visible")
    if args.part in ("all", "regimes"):
        text, raw = regime_table(args.regimes, args.seeds, "cosine")
        print("\n## Regimes (cosine schedule)\n\n" + text)
        tables += _md_tables(text, "regimes (cosine schedule)", "cosine")
        out["regimes_cosine"] = raw
        if args.constant_lr_regimes:
            text, raw = regime_table(args.constant_lr_regimes, args.seeds, "constant")
            print("\n## Regimes (constant learning rate)\n\n" + text)
            tables += _md_tables(text, "regimes (constant learning rate)", "constant")
            out["regimes_constant"] = raw
    if args.part in ("all", "sweep"):
        text, raw = p_sweep(args.sweep_regime, args.seeds, args.sweep_shared, args.sweep_p)
        print("\n## Mixing probability × shared noise\n\n" + text)
        tables += _md_tables(text, "mixing probability x shared noise", "sweep")
        out["sweep"] = raw
    if args.part in ("all", "sharpness"):
        for w in args.widths:
            text, raw = sharpness_costs(w, args.peers, args.repeats, args.probes,
                                        w in args.check_widths)
            print(f"\n## Sharpness measures, width {w}\n" + text)
            tables += _md_tables(text, f"sharpness measures, width {w}", f"sharpness-w{w}")
            out[f"sharpness_w{w}"] = raw
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=float))
    _write(args, tables, clock, threads)


#: Headings of the printed output, per --part: (heading, title, table name).
_SECTIONS = {"regimes": [("Regimes (cosine schedule)", "regimes (cosine schedule)", "cosine"),
                         ("Regimes (constant learning rate)", "regimes (constant learning rate)",
                          "constant")],
             "sweep": [("Mixing probability × shared noise", "mixing probability x shared noise",
                        "sweep")],
             "sharpness": [(f"Sharpness measures, width {w}", f"sharpness measures, width {w}",
                            f"sharpness-w{w}") for w in (32, 64)]}


def _from_raw(text: str, part: str) -> list[dict]:
    """The tables of the printed output ``text`` (``## heading`` sections) for ``part``."""
    sections = {}
    for chunk in ("\n" + text).split("\n## ")[1:]:
        head, _, body = chunk.partition("\n")
        sections[head.strip()] = body
    wanted = [x for k, v in _SECTIONS.items() if part in ("all", k) for x in v]
    tables = []
    for head, title, name in wanted:
        if head in sections:
            tables += _md_tables(sections[head], title, name)
    return tables


def _write(args: argparse.Namespace, tables: list[dict], clock: object, threads: int) -> None:
    from icml import results

    if args.out_results and tables:
        import shlex
        import sys

        why = ("clock reading on a shared CPU (best of --repeats in one run): shown, never "
               "compared; speed ratios are from the same run")
        timing = {c: {"timing": True, "why": why} for t in tables for c in t["columns"]
                  if any(k in c for k in ("ms", " s", "time", "speed", "×", "x faster"))}
        results.write(args.out_results, tables, plugin="modality-pairing",
                      seeds=list(range(args.seeds)), clock=clock, threads=threads,
                      command="python " + shlex.join(
                          ["plugins/modality-pairing/benchmarks/bench.py", *sys.argv[1:]]),
                      tolerance=timing or None, quick=bool(args.from_raw),
                      notes=f"tabulated from {args.from_raw}" if args.from_raw else "")


def _md_tables(text: str, title: str, name: str) -> list[dict]:
    """The Markdown tables in ``text`` as icml.results tables (cells as printed: numbers where
    a cell is one number, else the text, e.g. ``0.570 ± 0.037``)."""
    from icml import results

    blocks, cur = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            blocks.append(cur)
            cur = []
    out = []
    for i, block in enumerate(blocks):
        cols = _cells(block[0])
        texts = [_cells(line) for line in block[2:]]
        rows = [[_num(c) for c in cells] for cells in texts]
        formats = {}
        for j, c in enumerate(cols):
            dec = {_decimals(t[j]) for t in texts}
            if all(isinstance(r[j], float) for r in rows) and len(dec) == 1 and None not in dec:
                formats[c] = f".{dec.pop()}f"  # one fixed-point format: numbers, as printed
            else:  # blanks, mixed or exponent forms: keep the text exactly as printed
                for r, t in zip(rows, texts):
                    r[j] = t[j]
        out.append(results.make_table(title if i == 0 else f"{title}, table {i + 1}", cols,
                                      rows, name=name if i == 0 else f"{name}-{i + 1}",
                                      formats=formats))
    return out


def _cells(line: str) -> list[str]:
    """A Markdown table row's cells (an escaped ``\\|`` stays inside its cell)."""
    import re

    inner = line.strip()[1:-1] if line.strip().endswith("|") else line.strip()[1:]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


def _num(cell: str) -> float | str:
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return cell


def _decimals(text: str) -> int | None:
    """Decimals of a fixed-point number as printed (None for exponent or grouped forms)."""
    if "e" in text.lower() or "," in text:
        return None
    return len(text.split(".")[1]) if "." in text else 0


if __name__ == "__main__":
    main()
