"""A differentiable 3D Gaussian rasterizer in pure PyTorch.

Projection (EWA: ``Σ' = J W Σ Wᵀ Jᵀ + ε I``), covariance from scale and quaternion, global depth
sort, then per-tile alpha compositing in log space: ``T_i = exp(Σ_{j<i} log(1-α_j))`` and
``w_i = α_i T_i``. Every feature (HDR, LDR, depth, normal, ...) is composited with the same
weights in one matrix product. Tiles keep memory bounded (a tile sees only the Gaussians whose
3-sigma box overlaps it), so the largest tensor is ``tile² × (Gaussians on the tile)``.

``rasterize_dense`` (all pixels × all Gaussians at once) and ``rasterize_naive`` (a Python loop
over pixels) are the references the benchmark and tests compare against; ``gradcheck_rasterizer``
checks float64 gradients against finite differences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

Tensor = torch.Tensor


@dataclass
class Camera:
    """A pinhole camera. ``R``/``t`` map world to camera (``x_c = R x_w + t``; +z looks forward,
    +y down, OpenCV convention); intrinsics in pixels."""

    R: Tensor
    t: Tensor
    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int

    @property
    def center(self) -> Tensor:
        """Camera centre in world coordinates."""
        return -self.R.T @ self.t

    def to(self, device: Any = None, dtype: Any = None) -> Camera:
        return Camera(self.R.to(device=device, dtype=dtype), self.t.to(device=device, dtype=dtype),
                      self.fx, self.fy, self.cx, self.cy, self.width, self.height)

    def rays(self) -> tuple[Tensor, Tensor]:
        """Per-pixel ray origin (3,) and world direction with camera-z component 1, (H, W, 3):
        a point at z-depth ``D`` is ``o + D * d``."""
        dev, dt = self.R.device, self.R.dtype
        v, u = torch.meshgrid(torch.arange(self.height, device=dev, dtype=dt) + 0.5,
                              torch.arange(self.width, device=dev, dtype=dt) + 0.5, indexing="ij")
        dc = torch.stack([(u - self.cx) / self.fx, (v - self.cy) / self.fy, torch.ones_like(u)], -1)
        return self.center, dc @ self.R  # R^T d_c, row form


def look_at(eye: Tensor, target: Tensor, up: Tensor, *, fov_deg: float, width: int,
            height: int) -> Camera:
    """A camera at ``eye`` looking at ``target`` (``up`` is world up)."""
    eye, target, up = (torch.as_tensor(x, dtype=torch.float32) for x in (eye, target, up))
    z = target - eye
    z = z / z.norm()
    x = torch.linalg.cross(z, up)
    if x.norm() < 1e-8:
        raise ValueError("look_at: 'up' is parallel to the viewing direction; pass another up")
    x = x / x.norm()
    y = torch.linalg.cross(z, x)
    R = torch.stack([x, y, z])
    f = 0.5 * width / math.tan(math.radians(fov_deg) / 2)
    return Camera(R, -R @ eye, f, f, width / 2, height / 2, width, height)


def quat_to_rot(q: Tensor) -> Tensor:
    """Unit-normalised quaternions (w, x, y, z), (N, 4) -> rotation matrices (N, 3, 3)."""
    q = q / q.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    w, x, y, z = q.unbind(-1)
    return torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1).reshape(-1, 3, 3)


def covariance_3d(log_scales: Tensor, quats: Tensor) -> Tensor:
    """``Σ = R S Sᵀ Rᵀ`` from log-scales (N, 3) and quaternions (N, 4)."""
    if not torch.isfinite(log_scales).all():
        raise ValueError("degenerate covariance: a Gaussian has a non-finite log-scale (scale 0 "
                         "or inf); clamp the scales or prune those Gaussians")
    M = quat_to_rot(quats) * torch.exp(log_scales)[:, None, :]
    return M @ M.transpose(1, 2)


def gaussian_normals(log_scales: Tensor, quats: Tensor, means: Tensor, cam: Camera) -> Tensor:
    """Normal of each Gaussian: the axis of its smallest scale, flipped to face the camera."""
    R = quat_to_rot(quats)
    idx = log_scales.argmin(-1)
    n = R.gather(2, idx[:, None, None].expand(-1, 3, 1)).squeeze(-1)
    flip = ((cam.center[None] - means) * n).sum(-1, keepdim=True) < 0
    return torch.where(flip, -n, n)


@dataclass
class Projected:
    """Screen-space Gaussians, sorted front to back, only those in front of the camera."""

    means2d: Tensor   # (M, 2) pixel coordinates
    conics: Tensor    # (M, 3) inverse 2D covariance (a, b, c) for [[a, b], [b, c]]
    radii: Tensor     # (M,) 3-sigma radius in pixels
    depths: Tensor    # (M,) camera z
    opacity: Tensor   # (M,)
    index: Tensor     # (M,) index into the input Gaussians


def project(means: Tensor, log_scales: Tensor, quats: Tensor, opacity: Tensor, cam: Camera, *,
            near: float = 0.05, eps2d: float = 0.3, cull_sigma: float = 3.0) -> Projected:
    """EWA projection of 3D Gaussians; drops those behind ``near`` and sorts by depth.
    ``cull_sigma`` sets the screen radius (in standard deviations) tiles use to cull: 3 as in
    3DGS (drops ≤ exp(-4.5) of a Gaussian's peak), larger for an exact match to the dense
    reference."""
    pc = means @ cam.R.T + cam.t
    z = pc[:, 2]
    keep = torch.nonzero(z > near).squeeze(-1)
    keep = keep[torch.argsort(z[keep].detach(), stable=True)]
    pc, z = pc[keep], z[keep]
    cov = covariance_3d(log_scales[keep], quats[keep])
    x, y = pc[:, 0], pc[:, 1]
    zero = torch.zeros_like(z)
    J = torch.stack([cam.fx / z, zero, -cam.fx * x / z ** 2,
                     zero, cam.fy / z, -cam.fy * y / z ** 2], -1).reshape(-1, 2, 3)
    T = J @ cam.R
    c2 = T @ cov @ T.transpose(1, 2)
    a = c2[:, 0, 0] + eps2d
    b = c2[:, 0, 1]
    c = c2[:, 1, 1] + eps2d
    det = a * c - b * b
    if (det <= 0).any():
        raise ValueError("degenerate covariance: a projected 2D covariance is not positive "
                         "definite; use eps2d > 0 (the default 0.3 px² dilation)")
    conics = torch.stack([c / det, -b / det, a / det], -1)
    mid = 0.5 * (a + c)
    lam = mid + torch.sqrt((mid * mid - det).clamp_min(0.0))
    radii = cull_sigma * torch.sqrt(lam)
    m2 = torch.stack([cam.fx * x / z + cam.cx, cam.fy * y / z + cam.cy], -1)
    return Projected(m2, conics, radii.detach(), z, opacity[keep], keep)


def _composite(pix: Tensor, proj: Projected, feats: Tensor, alpha_max: float
               ) -> tuple[Tensor, Tensor, Tensor]:
    """Composite ``feats`` (M, C) at pixel centres ``pix`` (P, 2). Returns (P, C), T_final (P,),
    weights (P, M)."""
    d = pix[:, None, :] - proj.means2d[None]
    a, b, c = proj.conics.unbind(-1)
    power = -0.5 * (a * d[..., 0] ** 2 + 2 * b * d[..., 0] * d[..., 1] + c * d[..., 1] ** 2)
    alpha = (proj.opacity[None] * torch.exp(power.clamp_max(0.0))).clamp_max(alpha_max)
    log1m = torch.log1p(-alpha)
    csum = torch.cumsum(log1m, dim=1)
    w = alpha * torch.exp(csum - log1m)
    return w @ feats, torch.exp(csum[:, -1]), w


def pixel_grid(width: int, height: int, device: Any = None, dtype: Any = None) -> Tensor:
    """Pixel centres (H*W, 2) as (u, v)."""
    v, u = torch.meshgrid(torch.arange(height, device=device, dtype=dtype) + 0.5,
                          torch.arange(width, device=device, dtype=dtype) + 0.5, indexing="ij")
    return torch.stack([u, v], -1).reshape(-1, 2)


def rasterize(proj: Projected, feats: Tensor, width: int, height: int, *, tile: int = 16,
              alpha_max: float = 0.99, background: Tensor | None = None) -> dict[str, Tensor]:
    """Tiled compositing of the projected Gaussians. ``feats`` (M, C) is aligned with ``proj``
    (already gathered by ``proj.index``). Returns ``{"features": (H, W, C), "alpha": (H, W)}``;
    ``background`` (C,) is added with the final transmittance. A camera that sees no Gaussian
    renders the background with alpha 0."""
    dev, dt = feats.device, feats.dtype
    C = feats.shape[1]
    out = torch.zeros(height * width, C, device=dev, dtype=dt)
    tfin = torch.ones(height * width, device=dev, dtype=dt)
    pix = pixel_grid(width, height, dev, dt)
    if proj.means2d.shape[0]:
        m2, r = proj.means2d.detach(), proj.radii
        lo, hi = m2 - r[:, None], m2 + r[:, None]
        for y0 in range(0, height, tile):
            for x0 in range(0, width, tile):
                y1, x1 = min(y0 + tile, height), min(x0 + tile, width)
                sel = torch.nonzero((hi[:, 0] >= x0) & (lo[:, 0] <= x1) & (hi[:, 1] >= y0) &
                                    (lo[:, 1] <= y1)).squeeze(-1)
                if sel.numel() == 0:
                    continue
                rows = (torch.arange(y0, y1, device=dev)[:, None] * width +
                        torch.arange(x0, x1, device=dev)[None]).reshape(-1)
                sub = Projected(proj.means2d[sel], proj.conics[sel], r[sel], proj.depths[sel],
                                proj.opacity[sel], proj.index[sel])
                f, t, _ = _composite(pix[rows], sub, feats[sel], alpha_max)
                out = out.index_copy(0, rows, f)
                tfin = tfin.index_copy(0, rows, t)
    if background is not None:
        out = out + tfin[:, None] * background[None]
    return {"features": out.reshape(height, width, C), "alpha": (1 - tfin).reshape(height, width)}


def rasterize_dense(proj: Projected, feats: Tensor, width: int, height: int, *,
                    alpha_max: float = 0.99) -> dict[str, Tensor]:
    """Reference: every pixel against every Gaussian in one tensor (memory ``H·W·M``)."""
    pix = pixel_grid(width, height, feats.device, feats.dtype)
    f, t, _ = _composite(pix, proj, feats, alpha_max)
    return {"features": f.reshape(height, width, -1), "alpha": (1 - t).reshape(height, width)}


def rasterize_naive(proj: Projected, feats: Tensor, width: int, height: int, *,
                    alpha_max: float = 0.99) -> dict[str, Tensor]:
    """Reference: a Python loop over pixels, each compositing front to back with a plain product
    of transmittances (``cumprod``, no log space, no tiles); slow, used for checking and as the
    benchmark's naive per-pixel arm."""
    out = torch.zeros(height, width, feats.shape[1], dtype=feats.dtype, device=feats.device)
    alpha_img = torch.zeros(height, width, dtype=feats.dtype, device=feats.device)
    a, b, c = proj.conics.unbind(-1)
    for py in range(height):
        for px in range(width):
            d = torch.tensor([px + 0.5, py + 0.5], dtype=feats.dtype,
                             device=feats.device) - proj.means2d
            power = -0.5 * (a * d[:, 0] ** 2 + 2 * b * d[:, 0] * d[:, 1] + c * d[:, 1] ** 2)
            al = (proj.opacity * torch.exp(power.clamp_max(0.0))).clamp_max(alpha_max)
            T = torch.cumprod(torch.cat([al.new_ones(1), 1 - al]), 0)
            out[py, px] = (al * T[:-1]) @ feats
            alpha_img[py, px] = 1 - T[-1]
    return {"features": out, "alpha": alpha_img}


def render_gaussians(means: Tensor, log_scales: Tensor, quats: Tensor, opacity: Tensor,
                     feats: Tensor, cam: Camera, *, tile: int = 16, near: float = 0.05,
                     eps2d: float = 0.3, alpha_max: float = 0.99, mode: str = "tiled",
                     background: Tensor | None = None, cull_sigma: float = 3.0
                     ) -> dict[str, Tensor]:
    """Project and composite per-Gaussian features ``feats`` (N, C). Also returns the z-depth
    (``depth``: expected depth ``Σ w z``) and the projection (for densification statistics)."""
    proj = project(means, log_scales, quats, opacity, cam, near=near, eps2d=eps2d,
                   cull_sigma=cull_sigma)
    f = torch.cat([feats[proj.index], proj.depths[:, None]], -1)
    bg = None if background is None else torch.cat([background, background.new_zeros(1)])
    if mode == "tiled":
        r = rasterize(proj, f, cam.width, cam.height, tile=tile, alpha_max=alpha_max,
                      background=bg)
    elif mode == "dense":
        r = rasterize_dense(proj, f, cam.width, cam.height, alpha_max=alpha_max)
    elif mode == "naive":
        r = rasterize_naive(proj, f, cam.width, cam.height, alpha_max=alpha_max)
    else:
        raise ValueError(f"mode {mode!r}: use 'tiled', 'dense' or 'naive'")
    return {"features": r["features"][..., :-1], "depth": r["features"][..., -1],
            "alpha": r["alpha"], "proj": proj}


def gradcheck_rasterizer(n: int = 3, size: int = 6, seed: int = 0, *, mode: str = "tiled",
                         tile: int = 4, eps: float = 1e-6, atol: float = 1e-5) -> dict[str, bool]:
    """float64 gradients of the rasterizer w.r.t. means, log-scales, quaternions, opacity and
    colours against central finite differences (``torch.autograd.gradcheck``), one check per
    parameter. Returns ``{parameter: passed}``."""
    g = torch.Generator().manual_seed(seed)
    dt = torch.float64
    cam = look_at(torch.tensor([0.0, 0.0, -3.0]), torch.zeros(3), torch.tensor([0.0, -1.0, 0.0]),
                  fov_deg=40, width=size, height=size).to(dtype=dt)
    params = {"means": torch.randn(n, 3, generator=g, dtype=dt) * 0.25,
              "log_scales": torch.log(0.2 + 0.2 * torch.rand(n, 3, generator=g, dtype=dt)),
              "quats": torch.randn(n, 4, generator=g, dtype=dt),
              "opacity": 0.3 + 0.5 * torch.rand(n, generator=g, dtype=dt),
              "colors": torch.rand(n, 3, generator=g, dtype=dt)}
    out = {}
    for name in params:
        def fn(x: Tensor, name: str = name) -> Tensor:
            p = dict(params)
            p[name] = x
            r = render_gaussians(p["means"], p["log_scales"], p["quats"], p["opacity"],
                                 p["colors"], cam, tile=tile, mode=mode, cull_sigma=8.0)
            return torch.cat([r["features"].reshape(-1), r["depth"].reshape(-1),
                              r["alpha"].reshape(-1)])
        x = params[name].clone().requires_grad_(True)
        out[name] = bool(torch.autograd.gradcheck(fn, (x,), eps=eps, atol=atol, rtol=1e-4,
                                                  raise_exception=False))
    return out
