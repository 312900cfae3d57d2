"""The Gaussian model (HDR-GS irradiance field): positions, log-scales, quaternions, opacity
logits and per-Gaussian log-irradiance (the DC term of HDR-GS's SH colour, ``c = SH(d) + 0.5``
read as ``ln E``), plus the densify / clone / split / prune bookkeeping that keeps Adam's state
aligned with the parameters."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from icml_expo_gs.rasterizer import Camera, gaussian_normals, quat_to_rot, render_gaussians
from icml_expo_gs.sh import num_sh_bases, sh_view_offset
from icml_expo_gs.tonemap import ToneMapper

Tensor = torch.Tensor
PARAMS = ("means", "log_scales", "quats", "opacity_logit", "log_irr")


class GaussianModel(nn.Module):
    """3D Gaussians carrying log-irradiance; ``render`` gives HDR, LDR, depth, normal, alpha."""

    def __init__(self, means: Tensor, *, scale: float = 0.05, log_irr: Tensor | None = None,
                 opacity: float = 0.1, seed: int = 0, sh_degree: int = 0) -> None:
        super().__init__()
        k = num_sh_bases(sh_degree)
        n = means.shape[0]
        if n == 0:
            raise ValueError("GaussianModel needs at least one Gaussian")
        g = torch.Generator().manual_seed(seed)
        self.means = nn.Parameter(means.clone().float())
        self.log_scales = nn.Parameter(torch.full((n, 3), math.log(scale)))
        q = torch.zeros(n, 4)
        q[:, 0] = 1
        self.quats = nn.Parameter(q + 0.01 * torch.randn(n, 4, generator=g))
        self.opacity_logit = nn.Parameter(torch.full((n,), math.log(opacity / (1 - opacity))))
        self.log_irr = nn.Parameter(torch.zeros(n, 3) if log_irr is None else log_irr.clone())
        self.bg_log_irr = nn.Parameter(torch.full((3,), -3.0))
        # SH colours (degree > 0): log_irr is the DC term; sh_rest (N, K-1, 3) the higher bands,
        # a view-dependent offset of the log-irradiance (zero at init)
        self.sh_degree = sh_degree
        self.param_names = PARAMS + (("sh_rest",) if sh_degree > 0 else ())
        if sh_degree > 0:
            self.sh_rest = nn.Parameter(torch.zeros(n, k - 1, 3))

    def __len__(self) -> int:
        return self.means.shape[0]

    @property
    def opacity(self) -> Tensor:
        return torch.sigmoid(self.opacity_logit)

    def render(self, cam: Camera, exposure: float, tonemapper: ToneMapper, *,
               crf: str = "per_gaussian", tile: int = 16, eps2d: float = 0.3,
               near: float = 0.05, mode: str = "tiled") -> dict[str, Tensor]:
        """Render one view at exposure time ``exposure`` (> 0). Returns ``hdr``, ``ldr``
        (H, W, 3), ``depth`` (expected z / alpha), ``alpha``, ``normal`` (H, W, 3, unit where
        alpha > 0) and ``proj`` (the projected Gaussians, for densification statistics)."""
        if not exposure > 0 or not math.isfinite(exposure):
            raise ValueError(f"exposure {exposure!r}: exposure times must be finite and > 0")
        cam = cam.to(self.means.device, self.means.dtype)
        ln_dt = math.log(exposure)
        log_irr = self.view_log_irr(cam)
        hdr_c = torch.exp(log_irr)
        normals = gaussian_normals(self.log_scales, self.quats, self.means, cam)
        feats = [hdr_c, normals]
        bg_hdr = torch.exp(self.bg_log_irr)
        bg = [bg_hdr, torch.zeros(3, device=bg_hdr.device, dtype=bg_hdr.dtype)]
        if crf == "per_gaussian":
            feats.append(tonemapper(log_irr + ln_dt))
            bg.append(tonemapper(self.bg_log_irr + ln_dt))
        elif crf != "per_pixel":
            raise ValueError(f"crf {crf!r}: use 'per_gaussian' (HDR-GS) or 'per_pixel'")
        r = render_gaussians(self.means, self.log_scales, self.quats, self.opacity,
                             torch.cat(feats, -1), cam, tile=tile, near=near, eps2d=eps2d,
                             mode=mode, background=torch.cat(bg) if mode == "tiled" else None)
        f = r["features"]
        hdr = f[..., 0:3]
        if crf == "per_gaussian":
            ldr = f[..., 6:9]
        else:
            ldr = tonemapper(torch.log(hdr.clamp_min(1e-12)) + ln_dt)
        alpha = r["alpha"]
        depth = r["depth"] / alpha.clamp_min(1e-6)
        nrm = f[..., 3:6]
        nrm = nrm / nrm.norm(dim=-1, keepdim=True).clamp_min(1e-8)
        return {"hdr": hdr, "ldr": ldr, "depth": depth, "alpha": alpha, "normal": nrm,
                "proj": r["proj"]}

    def view_log_irr(self, cam: Camera) -> Tensor:
        """Per-Gaussian log-irradiance seen from ``cam``: the DC term ``log_irr`` (degree 0,
        exactly) plus the SH bands of degree 1..3 at the direction camera -> Gaussian."""
        if self.sh_degree == 0:
            return self.log_irr
        dirs = self.means - cam.center.to(self.means)[None]
        return self.log_irr + sh_view_offset(self.sh_degree, self.sh_rest, dirs)

    # ---------------------------------------------------------------- density control
    def extent_scales(self) -> Tensor:
        return torch.exp(self.log_scales).max(-1).values

    @torch.no_grad()
    def densify_and_prune(self, optimizer: torch.optim.Optimizer, grad_score: Tensor, *,
                          grad_threshold: float, percent_dense: float, extent: float,
                          prune_mask: Tensor, max_gaussians: int = 100000,
                          seed: int = 0) -> dict[str, int]:
        """Clone small / split large Gaussians whose ``grad_score`` exceeds ``grad_threshold``
        (the 3DGS rule), then remove ``prune_mask`` (computed on the pre-densification set)
        and the split parents. Adam's ``exp_avg``/``exp_avg_sq`` are extended with zeros for new
        Gaussians and indexed for kept ones. Raises if nothing would remain."""
        n0 = len(self)
        sel = grad_score >= grad_threshold
        room = max(max_gaussians - n0, 0)
        if int(sel.sum()) > room:
            keep_idx = torch.argsort(grad_score, descending=True)[:room]
            sel = torch.zeros_like(sel)
            sel[keep_idx] = True
        big = self.extent_scales() > percent_dense * extent
        clone, split = sel & ~big, sel & big
        g = torch.Generator(device=self.means.device).manual_seed(seed)
        new: dict[str, list[Tensor]] = {k: [] for k in self.param_names}
        if clone.any():
            for k in self.param_names:
                new[k].append(getattr(self, k)[clone])
        if split.any():
            idx = torch.nonzero(split).squeeze(-1).repeat(2)
            std = torch.exp(self.log_scales[idx])
            off = torch.randn(std.shape, generator=g, device=std.device) * std
            R = quat_to_rot(self.quats[idx])
            new["means"].append(self.means[idx] + (R @ off[..., None]).squeeze(-1))
            new["log_scales"].append(self.log_scales[idx] - math.log(1.6))
            for k in ("quats", "opacity_logit", "log_irr", *self.param_names[len(PARAMS):]):
                new[k].append(getattr(self, k)[idx])
        n_new = sum(x.shape[0] for x in new["means"])
        keep = torch.ones(n0 + n_new, dtype=torch.bool, device=self.means.device)
        keep[:n0] = ~(prune_mask | split)
        if not keep.any():
            raise RuntimeError("pruning would remove every Gaussian (empty scene); lower the "
                               "prune thresholds (prune_opacity, sdf_prune_tau) or prune later")
        for k in self.param_names:
            old = getattr(self, k)
            cat = torch.cat([old.data, *new[k]]) if new[k] else old.data
            self._replace(optimizer, k, cat[keep], n_new, keep)
        return {"cloned": int(clone.sum()), "split": int(split.sum()),
                "pruned": int(prune_mask.sum()), "total": len(self)}

    def _replace(self, opt: torch.optim.Optimizer, name: str, value: Tensor, n_new: int,
                 keep: Tensor) -> None:
        old = getattr(self, name)
        newp = nn.Parameter(value.contiguous())
        for group in opt.param_groups:
            for i, p in enumerate(group["params"]):
                if p is old:
                    st = opt.state.pop(old, None)
                    group["params"][i] = newp
                    if st:
                        for key in ("exp_avg", "exp_avg_sq"):
                            if key in st:
                                z = torch.zeros((n_new, *st[key].shape[1:]), dtype=st[key].dtype,
                                                device=st[key].device)
                                st[key] = torch.cat([st[key], z])[keep]
                        opt.state[newp] = st
        setattr(self, name, newp)

    @torch.no_grad()
    def reset_opacity(self, optimizer: torch.optim.Optimizer, value: float = 0.01) -> None:
        """3DGS opacity reset: clamp opacity to ``value`` and zero its Adam state."""
        v = math.log(value / (1 - value))
        self.opacity_logit.data.clamp_(max=v)
        st = optimizer.state.get(self.opacity_logit)
        if st:
            st["exp_avg"].zero_()
            st["exp_avg_sq"].zero_()


def param_groups(model: GaussianModel, tonemapper: ToneMapper, lr: dict[str, float]
                 ) -> list[dict[str, Any]]:
    """Adam parameter groups with HDR-GS-style per-parameter learning rates."""
    return [{"params": [model.means], "lr": lr["means"], "name": "means"},
            {"params": [model.log_scales], "lr": lr["scales"], "name": "log_scales"},
            {"params": [model.quats], "lr": lr["quats"], "name": "quats"},
            {"params": [model.opacity_logit], "lr": lr["opacity"], "name": "opacity_logit"},
            {"params": [model.log_irr, model.bg_log_irr], "lr": lr["color"], "name": "log_irr"},
            *([{"params": [model.sh_rest], "lr": lr["color"] / 20, "name": "sh_rest"}]
              if model.sh_degree > 0 else []),
            {"params": list(tonemapper.parameters()), "lr": lr["tonemapper"],
             "name": "tonemapper"}]
