"""Benchmarks for expo-gs (run from the repository root, one thread):

    OMP_NUM_THREADS=1 python plugins/expo-gs/benchmarks/bench.py raster
    OMP_NUM_THREADS=1 python plugins/expo-gs/benchmarks/bench.py method --seeds 3

``raster``: forward + backward time of the tiled rasterizer vs the vectorised dense reference and
the naive per-pixel loop, every arm timed the same way (median of repeats after one warm-up), and
peak RSS of a fresh subprocess per arm (so memory is measured, not estimated).
``method``: HDR-GS vs Expo-GS at equal GS iterations over seeds (scene and init re-seeded).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time


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


def raster(args: argparse.Namespace) -> None:
    grid = [(64, 256), (64, 1024), (128, 1024), (256, 1024), (256, 4096)]
    rows = []
    for res, n in grid:
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
    print("\n| image | Gaussians | tiled ms | dense ms | naive ms | tiled / dense | "
          "tiled peak RSS MB | dense peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        t, d, nv = r["tiled"], r.get("dense"), r.get("naive")
        print(f"| {r['res']}² | {r['n']} | {t['ms']:.0f} | {d['ms'] if d else math.nan:.0f} | "
              f"{nv['ms'] if nv else math.nan:.0f} | "
              f"{t['ms'] / d['ms'] if d else math.nan:.2f} | {t['peak_rss_mb']:.0f} | "
              f"{d['peak_rss_mb'] if d else math.nan:.0f} |")


def method(args: argparse.Namespace) -> None:
    import torch
    from icml_expo_gs.config import ExpoGSConfig
    from icml_expo_gs.metrics import evaluate_hdr_nvs, floater_fraction
    from icml_expo_gs.scene import make_synthetic_hdr_scene
    from icml_expo_gs.trainer import ExpoGSTrainer

    torch.set_num_threads(1)
    keys = ("ldr_oe_psnr", "ldr_ne_psnr", "hdr_psnr", "depth_rmse", "floater_fraction")
    res: dict[str, list[dict[str, float]]] = {"hdrgs": [], "expo-gs": []}
    for s in range(args.seeds):
        scene = make_synthetic_hdr_scene(32, 12, 3, seed=s)
        for m in res:
            t0 = time.perf_counter()
            model = ExpoGSTrainer(ExpoGSConfig(method=m), seed=s).fit(scene)
            ev = evaluate_hdr_nvs(model, scene.test)
            g = model.gaussians
            ev["floater_fraction"] = floater_fraction(g.means, g.opacity.detach(), scene.sdf)
            ev["n"] = len(g)
            ev["s"] = time.perf_counter() - t0
            res[m].append(ev)
            print(json.dumps({"seed": s, "method": m, **ev}), flush=True)
    print("\n| method | " + " | ".join(keys) + " | Gaussians | train s |")
    print("|---" * (len(keys) + 3) + "|")
    for m, evs in res.items():
        cells = [f"{statistics.mean(e[k] for e in evs):.3f} ± "
                 f"{statistics.pstdev(e[k] for e in evs):.3f}" for k in keys]
        print(f"| {m} | " + " | ".join(cells) + f" | {statistics.mean(e['n'] for e in evs):.0f}"
              f" | {statistics.mean(e['s'] for e in evs):.0f} |")
    for k in keys:
        d = [a[k] - b[k] for a, b in zip(res["expo-gs"], res["hdrgs"], strict=True)]
        print(f"expo-gs - hdrgs {k}: mean {statistics.mean(d):+.3f}, per seed "
              + ", ".join(f"{x:+.2f}" for x in d))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_arm":
        mode, n, res, reps = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        print(json.dumps(one_arm(mode, n, res, reps)))
        return
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=("raster", "method"))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    raster(args) if args.what == "raster" else method(args)


if __name__ == "__main__":
    main()
