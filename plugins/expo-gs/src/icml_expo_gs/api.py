"""A gsplat-shaped entry point over this plugin's rasterizer.

``rasterization(means, quats, scales, opacities, colors, viewmats, Ks, width, height, ...)``
takes gsplat's arguments (``gsplat.rendering.rasterization``): real scales (not log),
quaternions ``(w, x, y, z)`` (normalised here), opacities in [0, 1], ``colors`` (N, D) or SH
coefficients (N, K, 3) with ``sh_degree``, world-to-camera ``viewmats`` (C, 4, 4, OpenCV) and
intrinsics ``Ks`` (C, 3, 3). It returns ``(render_colors (C, H, W, D[+1]), render_alphas
(C, H, W, 1), meta)``, with ``render_mode`` ``"RGB"``, ``"D"``, ``"ED"``, ``"RGB+D"`` or
``"RGB+ED"`` (D: accumulated depth ``Σ w z``; ED: expected depth ``Σ w z / α``). SH colours are
evaluated as in gsplat: ``clamp_min(SH(μ - camera centre) + 0.5, 0)``.

``backend="torch"`` (the default on CPU) is the pure-PyTorch tiled rasterizer;
``backend="gsplat"`` calls ``gsplat.rasterization`` (CUDA only; ``pip install gsplat``);
``backend="auto"`` picks gsplat when it imports and the tensors are on CUDA, else torch.
Differences of gsplat's CUDA kernels from ours: gsplat skips fragments with α < 1/255 and
stops a pixel once T < 1e-4; ours composites every fragment within the 3σ box.
"""

from __future__ import annotations

from typing import Any

import torch

from icml_expo_gs.rasterizer import Camera, render_gaussians
from icml_expo_gs.sh import eval_sh, num_sh_bases

Tensor = torch.Tensor
RENDER_MODES = ("RGB", "D", "ED", "RGB+D", "RGB+ED")
BACKENDS = ("torch", "gsplat", "auto")


def gsplat_available() -> bool:
    """True when ``gsplat`` imports and CUDA is available."""
    if not torch.cuda.is_available():
        return False
    try:
        import gsplat  # noqa: F401
    except Exception:
        return False
    return True


def _camera(viewmat: Tensor, K: Tensor, width: int, height: int) -> Camera:
    return Camera(viewmat[:3, :3], viewmat[:3, 3], float(K[0, 0]), float(K[1, 1]),
                  float(K[0, 2]), float(K[1, 2]), width, height)


def rasterization(means: Tensor, quats: Tensor, scales: Tensor, opacities: Tensor,
                  colors: Tensor, viewmats: Tensor, Ks: Tensor, width: int, height: int, *,
                  near_plane: float = 0.01, eps2d: float = 0.3, sh_degree: int | None = None,
                  tile_size: int = 16, backgrounds: Tensor | None = None,
                  render_mode: str = "RGB", backend: str = "torch", **gsplat_kwargs: Any
                  ) -> tuple[Tensor, Tensor, dict[str, Any]]:
    """Render ``C = len(viewmats)`` cameras; see the module docstring. ``gsplat_kwargs`` are
    passed to gsplat only (the torch backend refuses them)."""
    if render_mode not in RENDER_MODES:
        raise ValueError(f"render_mode {render_mode!r}: use one of {RENDER_MODES}")
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: use one of {BACKENDS}")
    if viewmats.ndim != 3 or viewmats.shape[1:] != (4, 4) or Ks.shape != (len(viewmats), 3, 3):
        raise ValueError(f"viewmats must be (C, 4, 4) and Ks (C, 3, 3); got "
                         f"{tuple(viewmats.shape)} and {tuple(Ks.shape)}")
    if sh_degree is not None:
        k = num_sh_bases(sh_degree)
        if colors.ndim != 3 or colors.shape[1] < k:
            raise ValueError(f"sh_degree={sh_degree} needs colors of shape (N, K>={k}, 3); got "
                             f"{tuple(colors.shape)}")
    if backend == "auto":
        backend = "gsplat" if means.is_cuda and gsplat_available() else "torch"
    if backend == "gsplat":
        try:
            from gsplat import rasterization as gs_rasterization
        except ImportError as e:
            raise ImportError("backend='gsplat' needs the gsplat package and CUDA (pip install "
                              "gsplat); use backend='torch' on CPU") from e
        return gs_rasterization(means, quats, scales, opacities, colors, viewmats, Ks, width,
                                height, near_plane=near_plane, eps2d=eps2d, sh_degree=sh_degree,
                                tile_size=tile_size, backgrounds=backgrounds,
                                render_mode=render_mode, **gsplat_kwargs)
    if gsplat_kwargs:
        raise ValueError(f"arguments {sorted(gsplat_kwargs)} are gsplat-only; the torch backend "
                         "takes near_plane, eps2d, sh_degree, tile_size, backgrounds, render_mode")
    log_scales = torch.log(scales)
    imgs, alphas, radii, depths = [], [], [], []
    for c in range(len(viewmats)):
        cam = _camera(viewmats[c], Ks[c], width, height)
        if sh_degree is not None:
            dirs = means - cam.center[None]
            feats = torch.clamp_min(eval_sh(sh_degree, colors, dirs) + 0.5, 0.0)
        else:
            feats = colors[c] if colors.ndim == 3 else colors
        bg = None if backgrounds is None else backgrounds[c]
        r = render_gaussians(means, log_scales, quats, opacities, feats, cam, tile=tile_size,
                             near=near_plane, eps2d=eps2d, background=bg)
        img, alpha, d = r["features"], r["alpha"][..., None], r["depth"][..., None]
        if render_mode in ("ED", "RGB+ED"):
            d = d / alpha.clamp_min(1e-10)
        if render_mode == "RGB":
            out = img
        elif render_mode in ("D", "ED"):
            out = d
        else:
            out = torch.cat([img, d], -1)
        imgs.append(out)
        alphas.append(alpha)
        rad = torch.zeros(means.shape[0], device=means.device, dtype=means.dtype)
        radii.append(rad.index_copy(0, r["proj"].index, r["proj"].radii.to(rad.dtype)))
        depths.append(r["proj"].depths)
    meta = {"radii": torch.stack(radii), "backend": "torch", "width": width, "height": height,
            "tile_size": tile_size, "n_cameras": len(viewmats)}
    return torch.stack(imgs), torch.stack(alphas), meta
