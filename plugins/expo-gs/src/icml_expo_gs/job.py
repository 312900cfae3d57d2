"""The default jobs behind the hooks: make the synthetic HDR scene, train HDR-GS and Expo-GS,
score them with the HDR-NeRF protocol and write renders."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import icml
from icml_expo_gs.config import (
    DifferentiateConfig,
    EvaluateConfig,
    ExpoGSConfig,
    InferConfig,
    TrainConfig,
)

COLUMNS = ["method", "LDR-OE PSNR", "LDR-NE PSNR", "HDR PSNR (mu-law)", "HDR SSIM",
           "depth RMSE", "floater fraction", "Gaussians"]


def _scene(ctx: icml.RunContext, cfg: Any) -> Any:
    from icml_expo_gs.scene import load_hdr_nerf, make_synthetic_hdr_scene

    if cfg.data_dir:
        try:
            return load_hdr_nerf(cfg.data_dir)
        except (FileNotFoundError, ValueError) as e:
            raise icml.ConfigError(f"config key 'data_dir': {e}") from e
    return make_synthetic_hdr_scene(cfg.resolution, cfg.n_views, cfg.n_test, seed=ctx.seed,
                                    n_points=cfg.n_points, plane_extent=cfg.plane_extent,
                                    supersample=cfg.supersample)


def _trainer_cfg(cfg: ExpoGSConfig, method: str) -> ExpoGSConfig:
    """The hook config *is* the trainer's config (an ``ExpoGSConfig``): the same object with
    this arm's method, not a copy of its fields."""
    return dataclasses.replace(cfg, method=method)


def _fit(ctx: icml.RunContext, cfg: Any, scene: Any, method: str, seed: int) -> Any:
    from icml_expo_gs.trainer import ExpoGSTrainer

    def prog(it: Any, total: int, desc: str) -> Any:
        return ctx.progress(it, total=total, desc=f"{method}: {desc}")

    return ExpoGSTrainer(_trainer_cfg(cfg, method), seed=seed, device=ctx.torch_device(),
                         dtype=ctx.torch_dtype()).fit(scene, progress=prog)


def _score(model: Any, scene: Any) -> dict[str, float]:
    from icml_expo_gs.metrics import evaluate_hdr_nvs, floater_fraction

    m = evaluate_hdr_nvs(model, scene.test)
    g = model.gaussians
    m["floater_fraction"] = (floater_fraction(g.means, g.opacity.detach(), scene.sdf)
                             if scene.sdf is not None else math.nan)
    m["n_gaussians"] = float(len(g))
    return m


def _row(name: str, m: dict[str, float]) -> list[Any]:
    return [name, m["ldr_oe_psnr"], m["ldr_ne_psnr"], m["hdr_psnr"], m["hdr_ssim"],
            m["depth_rmse"], m["floater_fraction"], int(m["n_gaussians"])]


def _save_renders(ctx: icml.RunContext, models: dict[str, Any], view: Any) -> dict[str, str]:
    import numpy as np
    from PIL import Image

    from icml_expo_gs.metrics import hdr_tonemap

    rows = []
    for e in (0, 2, 4):
        row = [view.ldr[e]]
        for m in models.values():
            row.append(m.render(view.camera, view.exposures[e])["ldr"].clamp(0, 1).float().cpu())
        rows.append(row)
    hdr_row = [hdr_tonemap(view.hdr)] if view.hdr is not None else [rows[0][0] * 0]
    for m in models.values():
        hdr_row.append(hdr_tonemap(m.render(view.camera, 1.0)["hdr"].float().cpu()))
    rows.append(hdr_row)
    import torch

    grid = torch.cat([torch.cat(r, 1) for r in rows], 0)
    img = (grid.numpy() * 255).round().astype(np.uint8)
    scale = max(1, 256 // view.camera.height)
    Image.fromarray(img).resize((img.shape[1] * scale, img.shape[0] * scale),
                                Image.NEAREST).save(ctx.path("renders.png"))
    return {"renders (columns: GT, " + ", ".join(models) + "; rows: t1, t3, t5 LDR, "
            "mu-law HDR)": "renders.png"}


def train_job(ctx: icml.RunContext, cfg: TrainConfig) -> icml.RunResult:
    import torch

    with ctx.step("rendering the synthetic HDR scene"):
        scene = _scene(ctx, cfg)
    rows, metrics, models = [], {}, {}
    title = (f"HDR-GS vs Expo-GS, {cfg.resolution}x{cfg.resolution}, "
             f"{cfg.iters_irradiance + cfg.iters_joint} GS iterations each")
    for method in cfg.methods:
        model = _fit(ctx, cfg, scene, method, ctx.seed)
        m = _score(model, scene)
        models[method] = model
        rows.append(_row(method, m))
        ctx.record_row(title, COLUMNS, rows[-1])
        metrics.update({f"{method}_{k}": v for k, v in m.items()})
        torch.save({"gaussians": model.gaussians.state_dict(),
                    "tonemapper": model.tonemapper.state_dict()}, ctx.path(f"{method}.pt"))
    if "hdrgs" in models and "expo-gs" in models:
        for k in ("hdr_psnr", "ldr_oe_psnr", "ldr_ne_psnr"):
            metrics[f"gain_{k}"] = metrics[f"expo-gs_{k}"] - metrics[f"hdrgs_{k}"]
    artifacts = {f"{k} model": f"{k}.pt" for k in models}
    if cfg.save_renders and scene.test:
        artifacts.update(_save_renders(ctx, models, scene.test[0]))
    notes = ("One seed at CPU scale; gains between arms at this size are noisy (see the README's "
             "multi-seed benchmark). HDR metrics: max-normalised mu-law (mu=5000).")
    return icml.RunResult(metrics=metrics, tables=[icml.Table(title, COLUMNS, rows)],
                          artifacts=artifacts, notes=notes)


def evaluate_job(ctx: icml.RunContext, cfg: EvaluateConfig) -> icml.RunResult:
    rows, metrics = [], {}
    per: dict[str, list[dict[str, float]]] = {m: [] for m in cfg.methods}
    for s in range(cfg.seeds):
        scene = _scene(dataclasses.replace(ctx, seed=ctx.seed + s), cfg)
        for method in cfg.methods:
            per[method].append(_score(_fit(ctx, cfg, scene, method, ctx.seed + s), scene))
    for method, ms in per.items():
        mean = {k: sum(x[k] for x in ms) / len(ms) for k in ms[0]}
        rows.append(_row(method, mean))
        metrics.update({f"{method}_{k}": v for k, v in mean.items()})
    if "hdrgs" in per and "expo-gs" in per:
        for k in ("hdr_psnr", "ldr_oe_psnr", "ldr_ne_psnr"):
            d = [a[k] - b[k] for a, b in zip(per["expo-gs"], per["hdrgs"], strict=True)]
            metrics[f"gain_{k}"] = sum(d) / len(d)
            metrics[f"wins_{k}"] = float(sum(x > 0 for x in d))
    return icml.RunResult(metrics=metrics, tables=[icml.Table(
        f"Mean over {cfg.seeds} seeds (scene and init re-seeded)", COLUMNS, rows)])


def infer_job(ctx: icml.RunContext, cfg: InferConfig) -> icml.RunResult:
    import numpy as np
    from PIL import Image

    from icml_expo_gs.metrics import hdr_tonemap, psnr

    scene = _scene(ctx, cfg)
    if cfg.view >= len(scene.test):
        raise icml.ConfigError(f"config key 'view': {cfg.view} but the scene has "
                               f"{len(scene.test)} test views")
    model = _fit(ctx, cfg, scene, cfg.method, ctx.seed)
    v = scene.test[cfg.view]
    out = model.render(v.camera, cfg.exposure)
    ldr = out["ldr"].clamp(0, 1).float().cpu()
    Image.fromarray((ldr.numpy() * 255).round().astype(np.uint8)).save(ctx.path("ldr.png"))
    Image.fromarray((hdr_tonemap(out["hdr"].float().cpu()).numpy() * 255).round()
                    .astype(np.uint8)).save(ctx.path("hdr_mulaw.png"))
    metrics = {"alpha_mean": float(out["alpha"].mean())}
    if cfg.exposure in v.exposures:
        metrics["ldr_psnr"] = psnr(ldr, v.ldr[v.exposures.index(cfg.exposure)])
    return icml.RunResult(metrics=metrics, artifacts={"LDR render": "ldr.png",
                                                      "mu-law HDR render": "hdr_mulaw.png"})


def differentiate_job(ctx: icml.RunContext, cfg: DifferentiateConfig) -> icml.RunResult:
    from icml_expo_gs.rasterizer import gradcheck_rasterizer

    res = gradcheck_rasterizer(cfg.n_gaussians, cfg.size, ctx.seed, mode=cfg.mode, tile=cfg.tile)
    rows = [[k, "pass" if v else "FAIL"] for k, v in res.items()]
    return icml.RunResult(metrics={f"gradcheck_{k}": float(v) for k, v in res.items()},
                          tables=[icml.Table("float64 gradients vs finite differences",
                                             ["parameter", "gradcheck"], rows)])
