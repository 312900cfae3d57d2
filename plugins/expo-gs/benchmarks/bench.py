"""Benchmarks for expo-gs (run from the repository root, one thread):

    OMP_NUM_THREADS=1 python plugins/expo-gs/benchmarks/bench.py raster
    OMP_NUM_THREADS=1 python plugins/expo-gs/benchmarks/bench.py method --seeds 3

``raster``: forward + backward time of the tiled rasterizer vs the vectorised dense reference and
the naive per-pixel loop, every arm timed the same way (median of repeats after one warm-up), and
peak RSS of a fresh subprocess per arm (so memory is measured, not estimated).
``method``: HDR-GS vs Expo-GS at equal GS iterations over seeds (scene and init re-seeded),
each (method, seed) one cell of an ``icml sweep`` of the default train job (``--workers``
processes; the same numbers as one process running them in turn, tested).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _scene(n: int, res: int, seed: int = 0):  # noqa: ANN202
    import torch
    from icml_expo_gs.rasterizer import look_at

    g = torch.Generator().manual_seed(seed)
    cam = look_at(torch.tensor([0.0, 0.0, -3.0]), torch.zeros(3), torch.tensor([0.0, -1.0, 0.0]),
                  fov_deg=45, width=res, height=res)
    params = [torch.randn(n, 3, generator=g) * 0.5,
              torch.log(0.02 + 0.05 * torch.rand(n, 3, generator=g)),
              torch.randn(n, 4, generator=g), 0.2 + 0.6 * torch.rand(n, generator=g),
              torch.rand(n, 3, generator=g)]
    return cam, [p.requires_grad_(True) for p in params]


def one_arm(mode: str, n: int, res: int, repeats: int) -> dict[str, float]:
    import torch
    from icml_expo_gs.rasterizer import render_gaussians

    torch.set_num_threads(1)
    cam, params = _scene(n, res)
    times = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        out = render_gaussians(*params, cam, mode=mode, tile=16)
        (out["features"].sum() + out["depth"].sum()).backward()
        dt = time.perf_counter() - t0
        if i:
            times.append(dt)
    return {"ms": 1000 * statistics.median(times),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


GRIDS = {"full": [(64, 256), (64, 1024), (128, 1024), (256, 1024), (256, 4096)],
         "tiny": [(16, 16)]}
RASTER_TOLERANCE = {
    "tiled ms": {"timing": True, "why": "clock reading on a shared machine"},
    "dense ms": {"timing": True, "why": "clock reading on a shared machine"},
    "naive ms": {"timing": True, "why": "clock reading on a shared machine"},
    "tiled / dense time": {"timing": True, "why": "ratio of two clock readings"},
    "tiled peak RSS MB": {"rel": 0.25, "why": "peak RSS of a fresh process, ~250 MB of it "
                                              "torch itself; allocator- and version-dependent"},
    "dense peak RSS MB": {"rel": 0.25, "why": "peak RSS of a fresh process, ~250 MB of it "
                                              "torch itself; allocator- and version-dependent"},
}


def raster(args: argparse.Namespace) -> None:
    from icml import results

    clock = results.Clock()
    rows = []
    for res, n in GRIDS[args.grid]:
        row = {"res": res, "n": n}
        for mode in ("tiled", "dense", "naive"):
            if mode == "naive" and res > 64:
                continue
            if mode == "dense" and res * res * n > 256 * 256 * 1024:
                continue
            reps = 1 if mode == "naive" else args.repeats
            out = subprocess.run([sys.executable, __file__, "_arm", mode, str(n), str(res),
                                  str(reps)], capture_output=True, text=True, check=True)
            row[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(json.dumps(row), flush=True)
    cols = ["image", "Gaussians", "tiled ms", "dense ms", "naive ms", "tiled / dense time",
            "tiled peak RSS MB", "dense peak RSS MB"]
    trows = []
    for r in rows:
        t, d, nv = r["tiled"], r.get("dense"), r.get("naive")
        trows.append([f"{r['res']}²", r["n"], t["ms"], d["ms"] if d else None,
                      nv["ms"] if nv else None, t["ms"] / d["ms"] if d else None,
                      t["peak_rss_mb"], d["peak_rss_mb"] if d else None])
    table = results.make_table(
        "Rasterizer forward + backward, one thread (median of repeats; naive: 1 run)", cols,
        trows, name="raster", formats={"tiled ms": ".0f", "dense ms": ".0f", "naive ms": ".0f",
                                       "tiled / dense time": ".2f", "tiled peak RSS MB": ".0f",
                                       "dense peak RSS MB": ".0f"})
    print(results.render_table(table))
    if args.out_results:
        cmd = ("OMP_NUM_THREADS=1 python plugins/expo-gs/benchmarks/bench.py raster "
               + (f"--grid {args.grid} " if args.grid != "full" else "")
               + f"--repeats {args.repeats} --out-results {args.out_results}")
        # a new file starts with the declared tolerance; an existing one keeps its own
        tol = None if Path(args.out_results).is_file() else RASTER_TOLERANCE
        path = results.write(args.out_results, [table], command=cmd, plugin="expo-gs",
                             quick=False, clock=clock, threads=1, tolerance=tol)
        print(f"results file: {path}")


PROFILE_GRID = [(64, 1024), (128, 4096), (256, 4096), (256, 8192)]


def profile(args: argparse.Namespace) -> None:
    """Where the time of one forward + backward goes: projection, tiled compositing (forward)
    and the backward pass, timed separately (median of ``--repeats`` after a warm-up), with the
    per-tile Gaussian counts that set the compositing cost (``Σ_tiles tile² · M_tile``)."""
    from icml_expo_gs.rasterizer import rasterize

    from icml import results

    clock = results.Clock()
    threads = results.apply_threads(1)
    rows = []
    for res, n in (GRIDS["tiny"] if args.grid == "tiny" else PROFILE_GRID):
        cam, p = _scene(n, res)
        times, proj = _time_passes(p, cam, res, rasterize, args.repeats, tile=16)
        m2, rr = proj.means2d.detach(), proj.radii
        cnt = [int(((m2[:, 0] + rr >= x0) & (m2[:, 0] - rr <= x0 + 16) & (m2[:, 1] + rr >= y0)
                    & (m2[:, 1] - rr <= y0 + 16)).sum())
               for y0 in range(0, res, 16) for x0 in range(0, res, 16)]
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append([f"{res}²", n, med["project"], med["fwd"], med["bwd"],
                     med["fwd"] + med["bwd"], len(cnt), statistics.mean(cnt), max(cnt)])
        print(rows[-1], flush=True)
    cols = ["image", "Gaussians", "project ms", "composite fwd ms", "backward ms",
            "fwd+bwd ms", "tiles", "Gaussians per tile (mean)", "Gaussians per tile (max)"]
    table = results.make_table(
        "Tiled rasterizer: where one forward + backward spends its time (one thread, median)",
        cols, rows, name="profile", formats={c: ".1f" for c in cols[2:6]} | {
            "Gaussians per tile (mean)": ".0f"})
    print(results.render_table(table))
    if args.out_results:
        cmd = ("OMP_NUM_THREADS=1 python plugins/expo-gs/benchmarks/bench.py profile "
               + (f"--grid {args.grid} " if args.grid != "full" else "")
               + f"--repeats {args.repeats} --out-results {args.out_results}")
        tol = {c: {"timing": True, "why": "clock reading on a shared machine"}
               for c in cols[2:6]}
        path = results.write(args.out_results, [table], command=cmd, plugin="expo-gs",
                             quick=None, clock=clock, threads=threads, tolerance=tol)
        print(f"results file: {path}")


SPEED_RES = (64, 128, 256)
SPEED_N = (1000, 10000, 50000)
# bytes of peak memory per Gaussian-pixel pair (above ~250 MB of torch itself), from the
# committed raster.json cells: dense 256² x 1024 (4.1 GB, 67M pairs) and tiled 256² x 4096
# (1.0 GB, 10M pairs); used only to skip cells before running them
BYTES_PER_PAIR = {"dense": 60.0, "tiled": 75.0}


def _pairs(n: int, res: int, tile: int = 16) -> tuple[int, int]:
    """Gaussian-pixel pairs each rasterizer evaluates on the benchmark scene: tiled
    ``Σ_tiles pixels_t · M_t`` (M_t = Gaussians whose 3-sigma box meets tile t), dense
    ``H·W·N_visible``."""
    from icml_expo_gs.rasterizer import project

    cam, p = _scene(n, res)
    proj = project(p[0].detach(), p[1].detach(), p[2].detach(), p[3].detach(), cam)
    m2, rr = proj.means2d, proj.radii
    tiled = 0
    for y0 in range(0, res, tile):
        for x0 in range(0, res, tile):
            m = int(((m2[:, 0] + rr >= x0) & (m2[:, 0] - rr <= x0 + tile) & (m2[:, 1] + rr >= y0)
                     & (m2[:, 1] - rr <= y0 + tile)).sum())
            tiled += m * min(tile, res - y0) * min(tile, res - x0)
    return tiled, res * res * int(m2.shape[0])


def _time_passes(p: list, cam: Any, res: int, raster: Any, repeats: int,
                 **kw: Any) -> tuple[dict[str, list[float]], Any]:
    """``repeats`` timed forward + backward passes after one warm-up (ms each: projection,
    compositing forward, backward), gradients cleared before each; the last projection too."""
    import torch
    from icml_expo_gs.rasterizer import project

    times: dict[str, list[float]] = {"project": [], "fwd": [], "bwd": []}
    for i in range(repeats + 1):
        for q in p:
            q.grad = None
        t0 = time.perf_counter()
        proj = project(p[0], p[1], p[2], p[3], cam)
        t1 = time.perf_counter()
        f = torch.cat([p[4][proj.index], proj.depths[:, None]], -1)
        r = raster(proj, f, res, res, **kw)
        t2 = time.perf_counter()
        r["features"].sum().backward()
        t3 = time.perf_counter()
        if i:
            for k, v in (("project", t1 - t0), ("fwd", t2 - t1), ("bwd", t3 - t2)):
                times[k].append(1000 * v)
    return times, proj


def speed_arm(mode: str, n: int, res: int, repeats: int) -> dict[str, float]:
    """One (mode, N, image) cell in its own process: forward + backward of features (RGB)
    and depth, median of ``repeats`` after a warm-up, split into projection, compositing
    forward and backward; peak RSS of the process."""
    import torch
    from icml_expo_gs.rasterizer import rasterize, rasterize_dense

    torch.set_num_threads(1)
    cam, p = _scene(n, res)
    raster = rasterize if mode == "tiled" else rasterize_dense
    kw = {"tile": 16} if mode == "tiled" else {}
    times, _ = _time_passes(p, cam, res, raster, repeats, **kw)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {**med, "ms": sum(med.values()),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def speed(args: argparse.Namespace) -> None:
    """The issue's speed grid: forward + backward per image at 64²-256² with 1k-50k
    Gaussians, tiled vs dense, each cell a fresh process. A cell whose estimated peak memory
    (pairs x BYTES_PER_PAIR + 0.25 GB) exceeds ``--mem-cap-gb`` is skipped, with the estimate
    as the reason, before it runs."""
    from icml import results

    clock = results.Clock()
    threads = results.apply_threads(1)
    grid = [(16, 100)] if args.grid == "tiny" else [(r, n) for r in SPEED_RES for n in SPEED_N]
    rows = []
    for res, n in grid:
        pt, pd = _pairs(n, res)
        cell: dict[str, Any] = {}
        notes = []
        for mode, pairs in (("tiled", pt), ("dense", pd)):
            est = pairs * BYTES_PER_PAIR[mode] / 2 ** 30 + 0.25
            if est > args.mem_cap_gb:
                notes.append(f"{mode} skipped: est. {est:.1f} GB > {args.mem_cap_gb:g} GB cap")
                continue
            out = subprocess.run([sys.executable, __file__, "_speed", mode, str(n), str(res),
                                  str(args.repeats)], capture_output=True, text=True, check=True)
            cell[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        t, d = cell.get("tiled"), cell.get("dense")
        rows.append([f"{res}²", n, pt / 1e6, pd / 1e6,
                     t["project"] if t else None, t["fwd"] if t else None,
                     t["bwd"] if t else None, t["ms"] if t else None, d["ms"] if d else None,
                     t["ms"] / d["ms"] if t and d else None,
                     1e6 * t["ms"] / pt if t else None, 1e6 * d["ms"] / pd if d else None,
                     t["peak_rss_mb"] if t else None, d["peak_rss_mb"] if d else None,
                     "; ".join(notes) or "-"])
        print(json.dumps(rows[-1]), flush=True)
    cols = ["image", "Gaussians", "tiled pairs M", "dense pairs M", "tiled project ms",
            "tiled composite fwd ms", "tiled backward ms", "tiled fwd+bwd ms", "dense fwd+bwd ms",
            "tiled / dense time", "tiled ns per pair", "dense ns per pair",
            "tiled peak RSS MB", "dense peak RSS MB", "note"]
    ms = {c: ".0f" for c in cols[4:9]}
    table = results.make_table(
        "Forward + backward per image, tiled vs dense, one thread (median of repeats after a "
        "warm-up; pairs = Gaussian-pixel pairs evaluated)", cols, rows, name="speed",
        formats=ms | {"tiled pairs M": ".1f", "dense pairs M": ".1f",
                      "tiled / dense time": ".2f", "tiled ns per pair": ".0f",
                      "dense ns per pair": ".0f", "tiled peak RSS MB": ".0f",
                      "dense peak RSS MB": ".0f"})
    print(results.render_table(table))
    if args.out_results:
        cmd = ("OMP_NUM_THREADS=1 python plugins/expo-gs/benchmarks/bench.py speed "
               + (f"--grid {args.grid} " if args.grid != "full" else "")
               + f"--repeats {args.repeats} --mem-cap-gb {args.mem_cap_gb:g} "
               f"--out-results {args.out_results}")
        tol = {c: {"timing": True, "why": "clock reading on a shared machine"}
               for c in cols[4:12]}
        tol |= {c: {"rel": 0.25, "why": "peak RSS of a fresh process, ~250 MB of it torch "
                                        "itself; allocator- and version-dependent"}
                for c in cols[12:14]}
        path = results.write(args.out_results, [table], command=cmd, plugin="expo-gs",
                             quick=False, clock=clock, threads=threads, tolerance=tol,
                             notes="pairs are counted on the benchmark scene (random Gaussians, "
                                   "scales 0.02-0.07 at distance 3); skipped cells name their "
                                   "memory estimate")
        print(f"results file: {path}")


METHOD_KEYS = (("ldr_oe_psnr", "LDR-OE PSNR"), ("ldr_ne_psnr", "LDR-NE PSNR"),
               ("hdr_psnr", "HDR PSNR (mu-law)"), ("depth_rmse", "depth RMSE"),
               ("floater_fraction", "floater fraction"))


METHODS = ("hdrgs", "expo-gs")


def method_runs(seeds: Sequence[int], overrides: Sequence[str] = (),
                workers: int | None = None, threads: int | None = None,
                ) -> dict[str, list[dict[str, float]]]:
    """Per method, per seed (in order): the scores of ``icml run expo-gs train --set
    methods=[<method>]`` at that seed, run as one ``icml sweep`` (grid: the method; seeds: the
    seeds; ``overrides`` apply to every cell). ``s`` is the cell's wall time (scene, training
    and scoring: a clock reading)."""
    from icml.sweep import sweep

    with tempfile.TemporaryDirectory() as tmp:
        res = sweep("expo-gs", "train", grid={"methods": [[m] for m in METHODS]},
                    seeds=list(seeds), out=Path(tmp), workers=workers, threads=threads,
                    device="cpu",
                    overrides=["save_renders=false", *overrides], plot=False)
    if not res.ok:
        raise SystemExit("method: cells failed: " + "; ".join(
            f"{c.name}: {c.error}" for c in res.cells if c.status != "ok"))
    out: dict[str, list[dict[str, float]]] = {m: [] for m in METHODS}
    for c in sorted(res.cells, key=lambda c: c.seed):
        m = c.params["methods"].strip("[]")
        ev = {k: c.metrics[f"{m}_{k}"] for k, _ in METHOD_KEYS}
        ev["n"] = c.metrics[f"{m}_n_gaussians"]
        ev["s"] = float(c.wall_s or 0.0)
        out[m].append(ev)
        print(json.dumps({"seed": c.seed, "method": m, **ev}), flush=True)
    return out


def method(args: argparse.Namespace) -> None:
    from icml import results, stats

    clock = results.Clock()
    threads = results.apply_threads(1)
    seeds = list(range(args.seeds))
    res = method_runs(seeds, workers=args.workers, threads=threads)
    # per method: mean over seeds [95% bootstrap CI over seeds]
    cols = ["method"] + [c for _, c in METHOD_KEYS] + ["Gaussians", "train s"]
    rows = []
    for m, evs in res.items():
        rows.append([m] + [stats.mean_ci([e[k] for e in evs], seed=0) for k, _ in METHOD_KEYS]
                    + [statistics.mean(e["n"] for e in evs),
                       statistics.mean(e["s"] for e in evs)])
    fmt = {"LDR-OE PSNR": ".2f", "LDR-NE PSNR": ".2f", "HDR PSNR (mu-law)": ".2f",
           "depth RMSE": ".3f", "floater fraction": ".3f", "Gaussians": ".0f", "train s": ".0f"}
    per_method = results.make_table(
        f"HDR-GS vs Expo-GS, mean over seeds {seeds[0]}-{seeds[-1]} [95% bootstrap CI over "
        "seeds]", cols, rows, name="methods", formats=fmt)
    # Expo-GS - HDR-GS, paired by seed: the headline difference, its seed spread and MDE
    drows = []
    for k, c in METHOD_KEYS:
        d = [a[k] - b[k] for a, b in zip(res["expo-gs"], res["hdrgs"], strict=True)]
        drows.append([c, stats.paired_diff_ci([a[k] for a in res["expo-gs"]],
                                              [b[k] for b in res["hdrgs"]], seed=0),
                      ", ".join(f"{x:+.2f}" for x in d), statistics.stdev(d),
                      stats.mde_from_samples(d, seed=0), sum(x > 0 for x in d)])
    diff = results.make_table(
        "Expo-GS - HDR-GS, paired by seed", ["metric", "difference [95% CI]", "per seed",
                                             "SD over seeds", "MDE", "seeds Expo-GS higher"],
        drows, name="difference", formats={"difference [95% CI]": ".2f", "SD over seeds": ".2f",
                                           "MDE": ".2f"})
    for t in (per_method, diff):
        print("\n" + t["title"] + "\n" + results.render_table(t))
    if args.out_results:
        cmd = ("python plugins/expo-gs/benchmarks/bench.py method "
               f"--seeds {args.seeds} --out-results {args.out_results}")
        path = results.write(args.out_results, [per_method, diff], command=cmd,
                             plugin="expo-gs", seeds=seeds, quick=False, clock=clock,
                             threads=threads,
                             notes="train s is a clock reading (shown, never compared); "
                                   "MDE = icml.stats.mde_from_samples of the per-seed "
                                   "differences (alpha 0.05, power 0.8)")
        print(f"results file: {path}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_speed":
        mode, n, res, reps = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        print(json.dumps(speed_arm(mode, n, res, reps)))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_arm":
        mode, n, res, reps = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        print(json.dumps(one_arm(mode, n, res, reps)))
        return
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=("raster", "method", "profile", "speed"))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--workers", type=int, default=None,
                   help="method: sweep worker processes (default: the cores this process may "
                        "use; each cell gets cores // workers torch threads)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--grid", choices=sorted(GRIDS), default="full",
                   help="raster sizes: full (the README's) or tiny (a smoke test)")
    p.add_argument("--mem-cap-gb", type=float, default=4.0,
                   help="speed: skip a cell whose estimated peak memory exceeds this")
    p.add_argument("--out-results", default=None,
                   help="also write a results file (plugins/expo-gs/results/NAME.json)")
    args = p.parse_args()
    {"raster": raster, "method": method, "profile": profile, "speed": speed}[args.what](args)


if __name__ == "__main__":
    main()
