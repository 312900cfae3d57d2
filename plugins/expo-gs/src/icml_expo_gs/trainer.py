"""The trainer: HDR-GS (the baseline) and Expo-GS's three stages in one loop.

Stage 1 (irradiance field) is HDR-GS: ``L = L_ldr + λ_hdr L_hdr``, each ``(1-λ)L1 + λ(1-SSIM)``,
the HDR term on max-normalised μ-law images, 3DGS density control. ``method="hdrgs"`` continues
stage 1 for ``iters_joint`` more iterations. ``method="expo-gs"`` then fits the SDF to the frozen
Gaussians with the reliability-weighted geometric loss (stage 2) and trains both jointly
(stage 3): the Gaussians get ``λ_geo L_geo`` on top of the photometric loss, the SDF samples near
the GS depth (within ``2k|s|``), density control uses the current SDF (densify if
``ḡ + ω exp(-s²/2σ²) > τ_g``, prune if ``exp(-s²/2σ²) < τ_p`` or opacity < 0.005), and the
reliability is recomputed every ``reliability_every`` iterations (dynamic).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from icml_expo_gs.config import ExpoGSConfig
from icml_expo_gs.gaussians import GaussianModel, param_groups
from icml_expo_gs.metrics import mu_law, ssim
from icml_expo_gs.reliability import view_reliability
from icml_expo_gs.scene import HDRScene, View
from icml_expo_gs.sdf import SDFNetwork, geometric_loss
from icml_expo_gs.tonemap import ToneMapper

Tensor = torch.Tensor


@dataclass
class TrainedModel:
    """A trained scene: ``render(camera, exposure)`` returns ``ldr``, ``hdr``, ``depth``,
    ``alpha`` and ``normal``."""

    gaussians: GaussianModel
    tonemapper: ToneMapper
    cfg: ExpoGSConfig
    sdf: SDFNetwork | None = None
    history: dict[str, list[float]] = field(default_factory=dict)

    @torch.no_grad()
    def render(self, camera: Any, exposure: float) -> dict[str, Tensor]:
        out = self.gaussians.render(camera, exposure, self.tonemapper, crf=self.cfg.crf,
                                    tile=self.cfg.tile, eps2d=self.cfg.eps2d)
        out.pop("proj")
        return out


def sdf_guided_density(sdf: Any, means: Tensor, grad_score: Tensor, opacity: Tensor, *,
                       omega: float, sigma: float, tau_p: float, prune_opacity: float
                       ) -> tuple[Tensor, Tensor]:
    """Expo-GS density control from the current SDF: the densification score
    ``ḡ + ω exp(-s(μ)²/2σ²)`` and the prune mask ``exp(-s(μ)²/2σ²) < τ_p or opacity < min``."""
    with torch.no_grad():
        near = torch.exp(-sdf(means) ** 2 / (2 * sigma ** 2))
    return grad_score + omega * near, (near < tau_p) | (opacity < prune_opacity)


def _photo(pred: Tensor, gt: Tensor, lam: float) -> Tensor:
    return (1 - lam) * (pred - gt).abs().mean() + lam * (1 - ssim(pred, gt))


class ExpoGSTrainer:
    """``ExpoGSTrainer(cfg).fit(scene)`` trains HDR-GS or Expo-GS and returns a TrainedModel."""

    def __init__(self, cfg: ExpoGSConfig | None = None, *, seed: int = 0,
                 device: Any = "cpu", dtype: Any = torch.float32) -> None:
        self.cfg = cfg or ExpoGSConfig()
        self.seed, self.device, self.dtype = seed, torch.device(device), dtype

    # ------------------------------------------------------------------ helpers
    def _init_model(self, scene: HDRScene) -> GaussianModel:
        g = torch.Generator().manual_seed(self.seed)
        pts = scene.points
        if pts is None:
            raise ValueError("the scene has no init points (scene.points); pass SfM points")
        fl = (torch.rand(self.cfg.n_floaters, 3, generator=g) * 2 - 1) * scene.bounds
        means = torch.cat([pts.float(), fl])
        return GaussianModel(means, scale=self.cfg.init_scale, opacity=self.cfg.init_opacity,
                             seed=self.seed, sh_degree=self.cfg.sh_degree
                             ).to(self.device, self.dtype)

    def _render(self, m: GaussianModel, tm: ToneMapper, view: View, e: float
                ) -> dict[str, Tensor]:
        return m.render(view.camera, e, tm, crf=self.cfg.crf, tile=self.cfg.tile,
                        eps2d=self.cfg.eps2d)

    def _gs_loss(self, out: dict[str, Tensor], view: View, k: int) -> Tensor:
        c = self.cfg
        dev = out["ldr"].device
        loss = _photo(out["ldr"], view.ldr[k].to(dev, out["ldr"].dtype), c.lambda_dssim)
        if c.lambda_hdr > 0 and view.hdr is not None:
            gt = view.hdr.to(dev, out["hdr"].dtype)
            mx = gt.max()
            loss = loss + c.lambda_hdr * _photo(mu_law((out["hdr"] / mx).clamp(0, 1), c.mu),
                                                mu_law(gt / mx, c.mu), c.lambda_dssim)
        return loss

    def _reliability(self, scene: HDRScene, m: GaussianModel | None, tm: ToneMapper | None
                     ) -> list[Tensor]:
        """Per training view, the per-pixel geometric reliability: the max over its exposures
        of the localised (optionally consistency-weighted) well-exposedness."""
        c = self.cfg
        out = []
        for v in scene.train:
            pred = None
            if c.consistency and m is not None and tm is not None:
                with torch.no_grad():
                    hdr = self._render(m, tm, v, v.exposures[0])["hdr"].float().cpu()
                pred = torch.log(hdr.clamp_min(1e-6))
            r, _ = view_reliability(v.ldr, v.exposures, kind=c.reliability, sigma=c.mertens_sigma,
                                    window=c.window, tonemapper=tm if c.consistency else None,
                                    log_irr_pred=pred, tau=c.consistency_tau)
            out.append(r.max(0).values.to(self.device, self.dtype))
        return out

    def _geo(self, m: GaussianModel, tm: ToneMapper, sdf: SDFNetwork, view: View,
             rel: Tensor, gen: torch.Generator, *, detach: bool,
             out: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
        c = self.cfg
        if out is None:
            out = self._render(m, tm, view, view.exposures[0])
        cam = view.camera.to(self.device, self.dtype)
        o, d = cam.rays()
        mask = (out["alpha"] > 0.5).reshape(-1)
        idx = torch.nonzero(mask).squeeze(-1)
        if idx.numel() == 0:
            z = torch.zeros((), device=self.device, dtype=self.dtype)
            return {"loss": z, "surface": z, "normal": z, "eikonal": z}
        perm = torch.randperm(idx.numel(), generator=gen)[:c.rays_per_step].to(idx.device)
        idx = idx[perm]
        depth = out["depth"].reshape(-1)[idx]
        nrm = out["normal"].reshape(-1, 3)[idx]
        if detach:
            depth, nrm = depth.detach(), nrm.detach()
        dirs = d.reshape(-1, 3)[idx]
        pts = o[None] + depth[:, None] * dirs
        with torch.no_grad():
            s = sdf(pts.detach())
        u = (torch.rand(pts.shape[0], generator=gen) * 2 - 1).to(pts)
        dn = dirs / dirs.norm(dim=-1, keepdim=True)
        near = (pts.detach() + (u * 2 * c.near_k * s.abs())[:, None] * dn).requires_grad_(True)
        return geometric_loss(sdf, pts, nrm, rel.reshape(-1)[idx], lambda_normal=c.lambda_normal,
                              lambda_eik=c.lambda_eik, eik_points=near)

    # ------------------------------------------------------------------ training
    def fit(self, scene: HDRScene, progress: Callable[[Iterable[int], int, str], Iterable[int]]
            | None = None, callback: Callable[[int, TrainedModel], None] | None = None
            ) -> TrainedModel:
        """Train on ``scene.train``; ``progress(iterable, total, desc)`` wraps the loops;
        ``callback(it, model)`` is called after every GS iteration ``it`` (0-based, counting
        both GS stages) with the model as it is then (for learning curves)."""
        c = self.cfg
        if not scene.train:
            raise ValueError("the scene has no training views")
        torch.manual_seed(self.seed)
        gen = torch.Generator().manual_seed(self.seed + 1)
        prog = progress or (lambda it, total, desc: it)
        m = self._init_model(scene)
        tm = ToneMapper(c.tonemapper_hidden, monotone=c.monotone_tonemapper).to(self.device,
                                                                                 self.dtype)
        lr = {"means": c.lr_means, "scales": c.lr_scales, "quats": c.lr_quats,
              "opacity": c.lr_opacity, "color": c.lr_color, "tonemapper": c.lr_tonemapper}
        opt = torch.optim.Adam(param_groups(m, tm, lr), eps=1e-15)
        base = {gr["name"]: gr["lr"] for gr in opt.param_groups}
        total = c.iters_irradiance + c.iters_joint
        extent = float(scene.bounds)
        hist: dict[str, list[float]] = {"loss": [], "n_gaussians": [], "geo": []}
        state = {"acc": torch.zeros(len(m), device=self.device),
                 "cnt": torch.zeros(len(m), device=self.device), "it": 0}
        n_train = len(scene.train)
        order = torch.randperm(n_train, generator=gen)

        def schedule(it: int) -> None:
            f = it / max(total - 1, 1)
            for gr in opt.param_groups:
                if gr["name"] == "means":
                    gr["lr"] = c.lr_means * 0.01 ** f
                elif gr["name"] == "tonemapper":
                    gr["lr"] = c.lr_tonemapper * 0.1 ** f
                elif c.lr_decay != 1.0:
                    gr["lr"] = base[gr["name"]] * c.lr_decay ** f

        def density(it: int, sdf: SDFNetwork | None) -> None:
            if not (c.densify_from <= it <= c.densify_until and it % c.densify_every == 0
                    and it > 0):
                return
            score = state["acc"] / state["cnt"].clamp_min(1)
            prune = (m.opacity < c.prune_opacity).detach()
            if sdf is not None:
                score, prune = sdf_guided_density(
                    sdf, m.means.detach(), score, m.opacity.detach(), omega=c.sdf_densify_omega,
                    sigma=c.sdf_sigma, tau_p=c.sdf_prune_tau, prune_opacity=c.prune_opacity)
            m.densify_and_prune(opt, score, grad_threshold=c.grad_threshold,
                                percent_dense=c.percent_dense, extent=extent, prune_mask=prune,
                                max_gaussians=c.max_gaussians, seed=self.seed + it)
            state["acc"] = torch.zeros(len(m), device=self.device)
            state["cnt"] = torch.zeros(len(m), device=self.device)

        def gs_step(it: int, sdf: SDFNetwork | None = None, sdf_opt: Any = None,
                    rel: list[Tensor] | None = None) -> None:
            schedule(it)
            vi = int(order[it % n_train])
            view = scene.train[vi]
            k = int(torch.randint(len(view.exposures), (1,), generator=gen))
            out = self._render(m, tm, view, view.exposures[k])
            proj = out["proj"]
            proj.means2d.retain_grad()
            loss = self._gs_loss(out, view, k)
            geo = None
            if sdf is not None and rel is not None:
                geo = self._geo(m, tm, sdf, view, rel[vi], gen, detach=False, out=out)
                loss = loss + c.lambda_geo * geo["loss"]
                sdf_opt.zero_grad(set_to_none=True)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if proj.means2d.grad is not None:
                # 3DGS convention: the screen-space gradient in NDC units (pixels x W/2, H/2)
                cam = view.camera
                gn = (proj.means2d.grad * proj.means2d.new_tensor(
                    [cam.width / 2, cam.height / 2])).norm(dim=-1)
                state["acc"].index_add_(0, proj.index, gn.detach().float())
                state["cnt"].index_add_(0, proj.index, torch.ones_like(gn).float())
            opt.step()
            if sdf_opt is not None:
                # the SDF gets the full geometric loss (lambda_geo only scales the GS side)
                if geo is not None:
                    for p in sdf.parameters():
                        if p.grad is not None:
                            p.grad.div_(max(c.lambda_geo, 1e-12))
                sdf_opt.step()
            with torch.no_grad():
                m.log_scales.clamp_(max=math.log(extent))
            hist["loss"].append(float(loss.detach()))
            hist["n_gaussians"].append(float(len(m)))
            if geo is not None:
                hist["geo"].append(float(geo["loss"].detach()))
            if c.opacity_reset_every and it > 0 and it % c.opacity_reset_every == 0 and \
                    it < c.densify_until:
                m.reset_opacity(opt)
            density(it, sdf)
            if callback is not None:
                callback(it, TrainedModel(m, tm, c, sdf, hist))

        for it in prog(range(c.iters_irradiance), c.iters_irradiance, "stage 1: irradiance"):
            gs_step(it)
        sdf = None
        if c.method == "expo-gs":
            sdf = SDFNetwork(c.sdf_hidden, c.sdf_layers, c.sdf_radius).to(self.device, self.dtype)
            sdf_opt = torch.optim.Adam(sdf.parameters(), lr=c.lr_sdf)
            rel = self._reliability(scene, m, tm)
            for it in prog(range(c.iters_geometry), c.iters_geometry, "stage 2: Expo-SDF"):
                vi = int(order[it % n_train])
                with torch.no_grad():
                    out = self._render(m, tm, scene.train[vi], scene.train[vi].exposures[0])
                geo = self._geo(m, tm, sdf, scene.train[vi], rel[vi], gen, detach=True, out=out)
                sdf_opt.zero_grad(set_to_none=True)
                if geo["loss"].requires_grad:  # no opaque pixel in this view: nothing to fit
                    geo["loss"].backward()
                    sdf_opt.step()
                hist["geo"].append(float(geo["loss"].detach()))
            for j in prog(range(c.iters_joint), c.iters_joint, "stage 3: joint"):
                it = c.iters_irradiance + j
                if c.reliability_every and j > 0 and j % c.reliability_every == 0:
                    rel = self._reliability(scene, m, tm)
                gs_step(it, sdf, sdf_opt, rel)
        else:
            for j in prog(range(c.iters_joint), c.iters_joint, "HDR-GS: continued"):
                gs_step(c.iters_irradiance + j)
        return TrainedModel(m, tm, c, sdf, hist)
