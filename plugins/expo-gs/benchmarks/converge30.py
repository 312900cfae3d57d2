"""HDR-GS vs Expo-GS where HDR-GS fits its training exposures to >= 30 dB, at equal GS
iterations and at equal wall time (run from the repository root):

    python plugins/expo-gs/benchmarks/converge30.py --seeds 5 \
        --out-results plugins/expo-gs/results/converge30.json

The settings are ``PRESET`` below, committed before the table run (pre-registration). What
changed from ``converge.py``'s bounded-slab regime (25 dB on the training views), each from a
one-seed pilot: anti-aliased ground truth (``supersample=4``: each pixel is the mean of 4 x 4
rays, so an edge is the same smooth function of the scene in every view; one ray per pixel put
aliased edges in the images that no 3D model fits in all views), a 1200-Gaussian cap (was 800),
a wider tone mapper (64 hidden units, HDR-GS uses 128), every learning rate decayed over
training (``lr_decay=0.1``), 1000 GS iterations per arm (was 600) and 8-px tiles (speed only).
One-seed pilots of HDR-GS (seed 0, training-view LDR PSNR): 25.2 dB without anti-aliasing
(converge.json), 29.1 with it (600 iterations, 800 Gaussians), 29.8 with 1600 Gaussians, 30.1
at 1000 iterations with 1200, 29.9 at 800 iterations with the lr decay and the wider tone
mapper; a per-pixel CRF or 24² images did not fit better. The bar is therefore expected to be
met narrowly, if at all: the run reports it per seed.

Per seed (scene and init re-seeded) three arms, each trained by ``ExpoGSTrainer`` and timed the
same way (the process's CPU time around ``fit`` only, same process, one thread, in turn, after
one short untimed warm-up fit per process). CPU time, not the wall clock: on this shared
2-core machine (load 2-4) the wall time of one fit moved by up to 75% with other sessions'
jobs (a first, discarded run used it: seed 0's HDR-GS took as long as its Expo-GS), while a
single-threaded process's CPU time is the wall time it takes on a free core. Arms:

1. HDR-GS, ``iters_irradiance + iters_joint`` GS iterations;
2. Expo-GS, the same GS iterations (plus its SDF-only stage 2);
3. HDR-GS at Expo-GS's time: ``round(N · t_expo / t_hdrgs)`` GS iterations, N the
   iteration count of arm 1 and both (CPU) times measured on this seed in this run; the extra
   iterations continue HDR-GS (``iters_joint`` grows; the lr decays over the new total).

``--first-seed A --seeds K --cells-out F`` runs seeds A..A+K-1 only and writes their raw arms;
``--from-cells F1 F2 --out-results R`` merges such shards (seeds 0..n-1) into the results file
that the single command above would write (up to the clock-set equal-time iterations).

Scores per arm: LDR PSNR on the training views at their exposures (the convergence bar),
LDR-OE / LDR-NE / HDR (μ-law) PSNR on the test views, the CRF error (learned vs GT response, up
to exposure scale), depth RMSE, the floater fraction (no planted floaters in any arm).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import statistics
from pathlib import Path
from typing import Any

PRESET: dict[str, Any] = {
    # scene: the bounded slab of converge.py, anti-aliased ground truth
    "resolution": 32, "n_views": 12, "n_test": 3, "n_points": 256, "plane_extent": 1.2,
    "supersample": 4,
    # trainer (ExpoGSConfig keys): no planted floaters; 1000 GS iterations per arm (500 + 500;
    # Expo-GS adds 100 SDF-only iterations); 8-px tiles (25% faster than 16 at 32², pilot)
    "n_floaters": 0, "iters_irradiance": 500, "iters_geometry": 100, "iters_joint": 500,
    "densify_until": 700, "max_gaussians": 1200, "grad_threshold": 1e-3,
    "lr_means": 8e-3, "lr_color": 8e-2, "lr_opacity": 8e-2, "lr_scales": 2e-2,
    "lr_decay": 0.1, "tonemapper_hidden": 64, "tile": 8,
}
BAR_DB = 30.0  # issue 52: HDR-GS must reach this LDR PSNR on its training exposures
ARMS = (("hdrgs", "HDR-GS"), ("expo-gs", "Expo-GS"),
        ("hdrgs-time", "HDR-GS at Expo-GS's time"))


@functools.lru_cache(maxsize=1)
def _base() -> Any:
    """converge.py (its ``run_cell``, ``KEYS``, ``FMT``) under a plugin-qualified name."""
    spec = importlib.util.spec_from_file_location(
        "expo_gs_converge_base", Path(__file__).resolve().with_name("converge.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


WARMUP = {"iters_irradiance": 10, "iters_geometry": 5, "iters_joint": 10}


@functools.lru_cache(maxsize=1)
def _warm_up(settings_json: str) -> None:
    """One short untimed fit of each method per process, so that one-time costs (first calls,
    allocator growth) do not land in the first timed arm."""
    base = _base()
    for meth in ("hdrgs", "expo-gs"):
        base.run_cell({**json.loads(settings_json), **WARMUP}, meth, 0)


def run_seed(settings: dict[str, Any], seed: int) -> dict[str, dict[str, float]]:
    """The three arms of one seed; each arm's dict has the scores, ``n`` (Gaussians), ``s``
    (fit wall seconds), ``cpu_s`` (fit CPU seconds, the time that sets the equal-time arm) and
    ``iters`` (GS iterations)."""
    base = _base()
    _warm_up(json.dumps(settings, sort_keys=True))
    n_iter = settings["iters_irradiance"] + settings["iters_joint"]
    out = {}
    for meth in ("hdrgs", "expo-gs"):
        out[meth] = base.run_cell(settings, meth, seed)
        out[meth]["iters"] = float(n_iter)
    n_time = max(1, round(n_iter * out["expo-gs"]["cpu_s"] / out["hdrgs"]["cpu_s"]))
    longer = {**settings, "iters_joint": n_time - settings["iters_irradiance"]}
    out["hdrgs-time"] = base.run_cell(longer, "hdrgs", seed)
    out["hdrgs-time"]["iters"] = float(n_time)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--cells-out", default=None,
                   help="shard: write the per-seed arms (raw) here instead of a results file")
    p.add_argument("--from-cells", nargs="+", default=None,
                   help="merge shards written by --cells-out (no training) into --out-results")
    p.add_argument("--out-results", default=None)
    args = p.parse_args()
    from icml import results, stats

    base = _base()
    clock: Any = results.Clock()
    threads = results.apply_threads(1)
    settings = dict(PRESET)
    res: dict[str, list[dict[str, float]]] = {a: [] for a, _ in ARMS}
    shards = []
    if args.from_cells:
        parts = sorted((json.loads(Path(f).read_text()) for f in args.from_cells),
                       key=lambda d: d["seeds"][0])
        for d in parts:
            if d["settings"] != settings:
                raise SystemExit(f"shard {d['seeds']}: its settings differ from PRESET")
            for a, _ in ARMS:
                res[a].extend(d["res"][a])
            shards.append({"seeds": d["seeds"], "wall_s": d["wall_s"], "load": d["load"]})
        seeds = [x for d in parts for x in d["seeds"]]
        if seeds != list(range(len(seeds))):
            raise SystemExit(f"shards cover seeds {seeds}, not 0-{len(seeds) - 1}")
        clock = None  # the shards' clocks are in metrics["shards"]
    else:
        seeds = list(range(args.first_seed, args.first_seed + args.seeds))
        for seed in seeds:
            for arm, ev in run_seed(settings, seed).items():
                res[arm].append(ev)
                print(json.dumps({"seed": seed, "arm": arm,
                                  **{k: round(v, 4) for k, v in ev.items()}}), flush=True)
        if args.cells_out:
            Path(args.cells_out).write_text(json.dumps(
                {"settings": settings, "seeds": seeds, "res": res, "wall_s": clock.wall(),
                 "load": [clock.load0, results.load_average()]}))
            return
    if not args.out_results:
        return
    keys, fmt = base.KEYS, base.FMT
    metric_cols = [c for _, c in keys]
    cols = ["arm"] + metric_cols + ["Gaussians", "GS iterations", "train CPU s", "train s"]
    rows = [[label] + [stats.mean_ci([e[k] for e in res[a]], seed=0) for k, _ in keys]
            + [statistics.mean(e["n"] for e in res[a]), statistics.mean(e["iters"] for e in res[a]),
               statistics.mean(e["cpu_s"] for e in res[a]), statistics.mean(e["s"] for e in res[a])]
            for a, label in ARMS]
    per_arm = results.make_table(
        f"HDR-GS vs Expo-GS where HDR-GS fits its training views, mean over seeds {seeds[0]}-"
        f"{seeds[-1]} [95% bootstrap CI over seeds]", cols, rows, name="arms",
        formats=fmt | {"GS iterations": ".0f", "train CPU s": ".0f"})
    drows: list[list[Any]] = []
    per_seed: dict[str, dict[str, list[float]]] = {}
    for ref, label in (("hdrgs", "equal GS iterations"), ("hdrgs-time", "equal time")):
        diffs = {k: [a[k] - b[k] for a, b in zip(res["expo-gs"], res[ref], strict=True)]
                 for k, _ in keys}
        per_seed[label] = diffs
        drows.append([f"Expo-GS - HDR-GS, {label} [95% CI]"] + [
            stats.paired_diff_ci([e[k] for e in res["expo-gs"]], [e[k] for e in res[ref]],
                                 seed=0) for k, _ in keys])
        drows.append([f"  SD over seeds ({label})"] + [statistics.stdev(diffs[k])
                                                       for k, _ in keys])
        drows.append([f"  MDE ({label})"] + [stats.mde_from_samples(diffs[k], seed=0)
                                             for k, _ in keys])
    diff = results.make_table(
        "Expo-GS - HDR-GS, paired by seed (MDE: alpha 0.05, power 0.8)", ["comparison"]
        + metric_cols, drows, name="difference",
        formats={c: ".4f" if c == "CRF error" else ".3f" for c in metric_cols})
    bar = [e["train_ldr_psnr"] for e in res["hdrgs"]]
    for t in (per_arm, diff):
        print("\n" + t["title"] + "\n" + results.render_table(t))
    cmd = ("python plugins/expo-gs/benchmarks/converge30.py "
           f"--seeds {len(seeds)} --out-results {args.out_results}")
    # a rerun measures its own time ratio, so the equal-time arm's iteration count (and its
    # scores) can move: each metric column gets two seed SDs of the equal-iteration difference
    sd = {k: statistics.stdev(per_seed["equal GS iterations"][k]) for k, _ in keys}
    tol: dict[str, Any] = {c: {"abs": 2 * sd[k], "why": "the equal-time arm's iteration "
                               "count comes from a clock reading (the time ratio of each seed); "
                               "two SDs over seeds of the equal-iteration difference, this run"}
                           for k, c in keys}
    tol |= {c: {"timing": True, "why": "clock reading (or set by one) on a shared machine"}
            for c in ("GS iterations", "train CPU s", "train s")}
    path = results.write(
        args.out_results, [per_arm, diff], command=cmd, plugin="expo-gs", seeds=seeds,
        quick=False, clock=clock, threads=threads, tolerance=tol,
        metrics={"preset": settings, "bar_db": BAR_DB,
                 "hdrgs_train_ldr_psnr_per_seed": bar,
                 "hdrgs_reaches_bar_on_seeds": sum(x >= BAR_DB for x in bar),
                 "per_seed_differences": per_seed,
                 "iters_equal_time_per_seed": [e["iters"] for e in res["hdrgs-time"]],
                 "fit_s_per_seed": {a: [e["s"] for e in res[a]] for a, _ in ARMS},
                 "fit_cpu_s_per_seed": {a: [e["cpu_s"] for e in res[a]] for a, _ in ARMS},
                 **({"shards": shards} if shards else {})},
        notes="settings: PRESET in benchmarks/converge30.py (committed before the run); no "
              "planted floaters; the equal-time arm is HDR-GS with round(N t_expo / "
              "t_hdrgs) GS iterations, both fit CPU times (one thread) measured per seed in "
              "this run; MDE = "
              "icml.stats.mde_from_samples of the per-seed differences"
              + ("; made by shards run side by side in two queue slots (seeds in "
                 "metrics.shards, each --cells-out) merged by --from-cells; the command reruns "
                 "every seed in one process" if shards else ""))
    print(f"results file: {path}")


if __name__ == "__main__":
    main()
