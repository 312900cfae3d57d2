"""The evaluation protocol in code: LDR-OE (t1, t3, t5) and LDR-NE (t2, t4) PSNR/SSIM on test
views, HDR PSNR/SSIM after max-normalisation and μ-law ``T(x) = log(1+μx)/log(1+μ)`` (μ=5000,
HDR-NeRF/HDR-GS), depth RMSE against GT z-depth and the floater fraction."""

from __future__ import annotations

import math
from typing import Any

import torch

Tensor = torch.Tensor


def mu_law(x: Tensor, mu: float = 5000.0) -> Tensor:
    """``log(1 + μx) / log(1 + μ)``: T(0)=0, T(1)=1, monotone."""
    return torch.log1p(mu * x) / math.log1p(mu)


def hdr_tonemap(hdr: Tensor, mu: float = 5000.0, norm: Tensor | float | None = None) -> Tensor:
    """Normalise by the max (its own unless ``norm`` is given), clamp to [0,1], μ-law."""
    m = hdr.max() if norm is None else norm
    return mu_law((hdr / m).clamp(0, 1), mu)


def psnr(a: Tensor, b: Tensor) -> float:
    """PSNR in dB of images in [0, 1]."""
    mse = float(((a - b) ** 2).mean())
    return 10 * math.log10(1.0 / max(mse, 1e-12))


def hdr_psnr(pred: Tensor, gt: Tensor, mu: float = 5000.0, norm: str = "own") -> float:
    """μ-law HDR PSNR (HDR-NeRF/HDR-GS protocol): each linear HDR image divided by its own max
    (``norm="own"``) or both by the GT max (``"gt"``), clamped to [0, 1], μ-law, then PSNR."""
    if norm not in ("own", "gt"):
        raise ValueError(f"norm {norm!r}: use 'own' or 'gt'")
    scale = gt.max() if norm == "gt" else None
    return psnr(hdr_tonemap(pred, mu, scale), hdr_tonemap(gt, mu))


def _blur_matrix(n: int, win: int, sigma: float, dtype: Any, device: Any) -> Tensor:
    """The (n, n) banded matrix of a 1-D Gaussian window with zero padding: ``G @ x`` filters
    the rows of ``x`` exactly as a zero-padded ``conv1d`` with that window would."""
    x = torch.arange(win, dtype=torch.float64) - (win - 1) / 2
    g = torch.exp(-x ** 2 / (2 * sigma ** 2))
    g = g / g.sum()
    i = torch.arange(n)
    d = i[None, :] - i[:, None] + win // 2
    band = (d >= 0) & (d < win)
    return torch.where(band, g[d.clamp(0, win - 1)], torch.zeros((), dtype=torch.float64)
                       ).to(device=device, dtype=dtype)


def ssim(a: Tensor, b: Tensor, win: int = 11, sigma: float = 1.5) -> Tensor:
    """Mean SSIM of (H, W, C) images in [0, 1] (Gaussian window, zero padding as 3DGS).

    The separable Gaussian window is applied as two banded matrix products, ``Gh @ x @ Gwᵀ``
    (the same filter as 3DGS's zero-padded ``conv2d``, equal to float rounding): on CPU the
    backward of ``conv2d`` (oneDNN) gives different bits at 1 and 2 threads, which made the
    default run's numbers depend on the thread count; the matrix products do not."""
    x, y = a.permute(2, 0, 1), b.permute(2, 0, 1)
    gh = _blur_matrix(x.shape[-2], win, sigma, a.dtype, a.device)
    gw = _blur_matrix(x.shape[-1], win, sigma, a.dtype, a.device).T
    f = lambda t: gh @ t @ gw  # noqa: E731
    mx, my = f(x), f(y)
    sxx, syy, sxy = f(x * x) - mx ** 2, f(y * y) - my ** 2, f(x * y) - mx * my
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    m = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx ** 2 + my ** 2 + c1) * (sxx + syy + c2))
    return m.mean()


def depth_rmse(depth: Tensor, gt: Tensor) -> float:
    """RMSE over pixels where the GT ray hits (gt > 0)."""
    m = gt > 0
    if not m.any():
        return math.nan
    return float(((depth[m] - gt[m]) ** 2).mean().sqrt())


def floater_fraction(means: Tensor, opacity: Tensor, sdf: Any, tau: float = 0.1,
                     min_opacity: float = 0.1) -> float:
    """Fraction of visible Gaussians (opacity > min_opacity) farther than ``tau`` from the GT
    surface."""
    vis = opacity > min_opacity
    if not vis.any():
        return math.nan
    d = sdf(means[vis].detach().float().cpu()).abs()
    return float((d > tau).float().mean())


@torch.no_grad()
def crf_error(tonemapper: Any, gt_crf: Any, *, lo: float = -8.0, hi: float = 5.0,
              n: int = 256, max_shift: float = 3.0, n_shifts: int = 121) -> float:
    """RMSE (LDR units, all channels) between a learned response ``g(x)`` and the GT response
    ``f(exp(x))`` on ``x = ln(E·Δt)`` uniform in ``[lo, hi]``, minimised over a shift ``s`` of
    the log-exposure (``g(x + s)``, ``|s| <= max_shift``): the CRF is recovered only up to the
    exposure scale. The default range covers the synthetic scene's ``E·Δt`` (about 1e-4 to 130)."""
    x = torch.linspace(lo, hi, n, dtype=torch.float64)
    gt = gt_crf(torch.exp(x)).float()
    p = next(iter(tonemapper.parameters()), None)
    dev, dt = (p.device, p.dtype) if p is not None else ("cpu", torch.float32)
    best = math.inf
    for s in torch.linspace(-max_shift, max_shift, n_shifts, dtype=torch.float64):
        xs = (x + s).to(dev, dt)[:, None].expand(n, tonemapper.channels)
        pred = tonemapper(xs).float().cpu()
        best = min(best, float(((pred - gt[:, None]) ** 2).mean().sqrt()))
    return best


@torch.no_grad()
def train_ldr_psnr(model: Any, views: list[Any]) -> float:
    """Mean LDR PSNR over the training views at their (training) exposures: how well the model
    fits what it trains on."""
    vals = [psnr(model.render(v.camera, e)["ldr"].clamp(0, 1).float().cpu(), im)
            for v in views for e, im in zip(v.exposures, v.ldr, strict=True)]
    return sum(vals) / len(vals)


@torch.no_grad()
def evaluate_hdr_nvs(model: Any, views: list[Any], *, mu: float = 5000.0,
                     hdr_norm: str = "own", oe: tuple[int, ...] = (0, 2, 4),
                     ne: tuple[int, ...] = (1, 3)) -> dict[str, float]:
    """Score a trained model (anything with ``render(camera, exposure)`` returning ``ldr``,
    ``hdr``, ``depth``) on test views with five exposures. ``hdr_norm='own'`` normalises each
    HDR image by its own max before the μ-law (HDR-NeRF's evaluation), ``'gt'`` by the GT max."""
    if hdr_norm not in ("own", "gt"):
        raise ValueError(f"hdr_norm {hdr_norm!r}: use 'own' or 'gt'")
    acc: dict[str, list[float]] = {k: [] for k in ("ldr_oe_psnr", "ldr_oe_ssim", "ldr_ne_psnr",
                                                   "ldr_ne_ssim", "hdr_psnr", "hdr_ssim",
                                                   "depth_rmse")}
    for v in views:
        for idx, key in ((oe, "oe"), (ne, "ne")):
            for e in idx:
                if e >= len(v.exposures):
                    continue
                out = model.render(v.camera, v.exposures[e])
                pred = out["ldr"].clamp(0, 1).float().cpu()
                acc[f"ldr_{key}_psnr"].append(psnr(pred, v.ldr[e]))
                acc[f"ldr_{key}_ssim"].append(float(ssim(pred, v.ldr[e])))
        out = model.render(v.camera, v.exposures[0])
        if v.hdr is not None:
            h = out["hdr"].float().cpu()
            norm = v.hdr.max() if hdr_norm == "gt" else None
            a, b = hdr_tonemap(h, mu, norm), hdr_tonemap(v.hdr, mu)
            acc["hdr_psnr"].append(hdr_psnr(h, v.hdr, mu, hdr_norm))
            acc["hdr_ssim"].append(float(ssim(a, b)))
        if v.depth is not None:
            acc["depth_rmse"].append(depth_rmse(out["depth"].float().cpu(), v.depth))
    return {k: (sum(x) / len(x) if x else math.nan) for k, x in acc.items()}
