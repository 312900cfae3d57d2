"""`icml sweep` backends on one plugin job: the sequential loop every plugin benchmark runs
today, the local process pool, and Ray -- wall time, speed-up, Ray's overhead per cell, and
whether all three give the same aggregate.

    python benchmarks/sweep_bench.py                      # 2 x 5 sweep of the default job
    python benchmarks/sweep_bench.py --quick              # seconds: checks the script works
    python benchmarks/sweep_bench.py --plugin dxpp --capability differentiate \\
        --grid linear_solver=dense,sparse --set problems=5 --seeds 0-4 --workers 2 \\
        --backends sequential,local,ray

* ``sequential``: one process runs the cells one after another through ``icml.runner.run``
  (what each plugin's own seed loop does), with the same torch threads per cell as the sweep.
* ``local``: ``icml.sweep.sweep(..., backend="local", workers=N)`` -- a spawn process pool;
  worker start-up (interpreter, imports, plugin load) is part of its wall time.
* ``ray``: the same with ``backend="ray"`` on a local Ray started by this script first
  (``ray_init_s``, reported apart, is paid once per session, not per sweep). Overhead per
  cell = ``(wall_ray - wall_local) * workers / cells``: the extra time each cell costs a worker
  slot.

Each backend writes its own folder under ``--out``; the aggregates (``sweep.json`` points) are
compared bit for bit (the sequential loop's cells are aggregated by rerunning ``sweep`` over
its folder, which reuses every finished cell). Writes a results file (``icml.results``): wall
and CPU columns are clock readings (``timing``), never compared by ``icml reproduce``.
Run it on an otherwise idle machine; the speed-up goal on 2 cores is >= 1.7x.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

# The default job: expo-gs's default training run (about 19 CPU s at one thread), Expo-GS
# against its HDR-GS baseline -- the comparison expo-gs/benchmarks/bench.py loops over by hand.
DEFAULT = {"plugin": "expo-gs", "capability": "train", "grid": ["method=hdrgs,expo-gs"],
           "set": [], "seeds": "0-4"}
# --quick: the same at the plugin's smoke scale (seconds per cell), to check the script.
QUICK = {"plugin": "expo-gs", "capability": "train", "grid": ["method=hdrgs,expo-gs"],
         "set": ["resolution=8", "n_views=2", "n_test=1", "n_points=16", "n_floaters=4",
                 "iters_irradiance=2", "iters_geometry=2", "iters_joint=2",
                 "rays_per_step=16", "densify_from=1", "densify_until=2", "densify_every=1"],
         "seeds": "0-1"}


def sequential(args: argparse.Namespace, out: Path, threads: int) -> None:
    """The loop a plugin benchmark runs today, in the sweep's folder layout."""
    from icml.loader import load_plugins
    from icml.runner import RunFailed, run
    from icml.sweep import expand, finished_run, parse_grid, parse_seeds

    host = load_plugins(only=[args.plugin])
    for cell in expand(parse_grid(args.grid), parse_seeds(args.seeds)):
        if finished_run(out / cell.name) is not None:
            continue
        try:
            run(args.plugin, args.capability, overrides=args.set + cell.overrides(),
                out=out / cell.name, seed=cell.seed, host=host, show_progress=False,
                threads=threads, device=args.device)
        except RunFailed as exc:
            print(f"  {cell.name}: failed: {exc}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plugin")
    parser.add_argument("--capability")
    parser.add_argument("--grid", action="append", help="key=v1,v2 (repeatable)")
    parser.add_argument("--set", action="append", help="key=value for every cell")
    parser.add_argument("--seeds")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads per cell (default: max(1, cores // workers))")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backends", default="sequential,local,ray")
    parser.add_argument("--out", type=Path, default=Path("runs/sweep_bench"))
    parser.add_argument("--results", type=Path,
                        default=Path("benchmarks/results/sweep_bench.json"))
    parser.add_argument("--quick", action="store_true", help="a tiny job (seconds per cell)")
    parser.add_argument("--keep", action="store_true", help="keep --out's earlier folders "
                        "(resumes them: the timings then mean nothing)")
    args = parser.parse_args()
    base = QUICK if args.quick else DEFAULT
    for key in ("plugin", "capability", "grid", "set", "seeds"):
        if getattr(args, key) is None:
            setattr(args, key, base[key])

    from icml import jsonio
    from icml.results import Clock, make_table, write
    from icml.sweep import cores, parse_grid, parse_seeds, sweep

    n_cells = len(parse_seeds(args.seeds)) * \
        max(1, __import__("math").prod(len(v) for v in parse_grid(args.grid).values()))
    threads = args.threads or max(1, cores() // args.workers)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not args.keep and args.out.exists():
        shutil.rmtree(args.out)
    clock = Clock()
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    points: dict[str, list] = {}
    notes = []
    ray_init = None
    common = dict(grid=args.grid, seeds=args.seeds, threads=threads, device=args.device,
                  overrides=args.set, plot=False)
    print(f"{args.plugin} {args.capability}: {n_cells} cells, grid {args.grid}, seeds "
          f"{args.seeds}, --set {args.set}; {cores()} cores, {args.workers} workers x "
          f"{threads} threads", file=sys.stderr)
    for backend in backends:
        out = args.out / backend
        c = Clock()
        if backend == "sequential":
            sequential(args, out, threads)
        elif backend == "local":
            sweep(args.plugin, args.capability, out=out, backend="local",
                  workers=args.workers, **common)
        elif backend == "ray":
            try:
                import ray
            except ImportError:
                notes.append("ray not installed: skipped")
                continue
            if not ray.is_initialized():
                import warnings

                warnings.filterwarnings("ignore", category=FutureWarning,
                                        message=".*accelerator visible devices")
                t = time.perf_counter()
                ray.init(num_cpus=args.workers * threads, include_dashboard=False,
                         log_to_driver=False, logging_level="WARNING")
                ray_init = time.perf_counter() - t
            c = Clock()
            sweep(args.plugin, args.capability, out=out, backend="ray",
                  workers=args.workers, **common)
        else:
            parser.error(f"unknown backend {backend!r}")
        wall[backend], cpu[backend] = c.wall(), c.cpu()
        if backend == "sequential":  # aggregate its cells (all reused: nothing reruns)
            sweep(args.plugin, args.capability, out=out, backend="local", workers=1, **common)
        points[backend] = jsonio.loads((out / "sweep.json").read_text())["points"]
        print(f"  {backend}: {wall[backend]:.1f} s", file=sys.stderr)
    ref = wall.get("sequential")
    differ = sorted({m for pts in points.values() for p in pts for m in p["metrics"]
                     if len({jsonio.dumps([q["metrics"].get(m) for q in other
                                          if q["name"] == p["name"]])
                             for other in points.values()}) > 1})
    same = not differ
    rows = []
    for backend in wall:
        slots = 1 if backend == "sequential" else args.workers
        rows.append([backend, slots, threads, round(wall[backend], 2),
                     round(ref / wall[backend], 2) if ref else None,
                     round(wall[backend] * slots / n_cells, 2)])
    overhead = None
    if "ray" in wall and "local" in wall:
        overhead = (wall["ray"] - wall["local"]) * args.workers / n_cells
    table = make_table(
        f"{n_cells}-cell sweep of {args.plugin} {args.capability} ({', '.join(args.grid)}; "
        f"seeds {args.seeds}; --set {' '.join(args.set)})",
        ["backend", "workers", "threads", "wall s", "speed-up vs sequential",
         "slot s per cell"], rows, name="backends",
        formats={"wall s": ".1f", "speed-up vs sequential": ".2f", "slot s per cell": ".1f"})
    metrics = {"cells": n_cells, "same_aggregate": same}
    if differ:
        notes.append("metrics whose aggregate differs between backends (clock readings are "
                     f"expected to): {', '.join(differ)}")
    if ref and "local" in wall:
        metrics["speedup_local"] = round(ref / wall["local"], 3)
    if overhead is not None:
        metrics["ray_overhead_per_cell_s"] = round(overhead, 3)
    if ray_init is not None:
        metrics["ray_init_s"] = round(ray_init, 2)
    timing = {"timing": True, "why": "a clock reading: machine- and load-dependent"}
    command = "python benchmarks/sweep_bench.py " + shlex.join(sys.argv[1:])
    path = write(args.results, [table], command=command.strip(), plugin=args.plugin,
                 seeds=parse_seeds(args.seeds), threads=threads, clock=clock, metrics=metrics,
                 tolerance={"wall s": timing, "speed-up vs sequential": timing,
                            "slot s per cell": timing},
                 notes="; ".join(notes + [f"{os.cpu_count()} CPUs seen by the OS"]))
    print("| " + " | ".join(table["columns"]) + " |")
    print("|" + "---|" * len(table["columns"]))
    for r in rows:
        print("| " + " | ".join("-" if v is None else str(v) for v in r) + " |")
    print("same aggregate on every backend: " + ("yes, bit for bit" if same else
          f"no: {', '.join(differ)} differ (clock readings do; anything else is a bug)"))
    if overhead is not None:
        print(f"ray: overhead {overhead:.2f} s per cell; ray.init {ray_init or 0:.1f} s once")
    print(f"results file: {path}")


if __name__ == "__main__":
    main()
