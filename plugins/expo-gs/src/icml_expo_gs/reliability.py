"""Exposure reliability (reconstructed from the abstract): how much a pixel of an LDR image can
be trusted for geometry. ``w(I)`` is Mertens' well-exposedness ``exp(-(I-0.5)²/(2σ²))`` or the
triangle ``1-|2I-1|``, averaged over a ``window × window`` neighbourhood (localised), optionally
multiplied by a cross-exposure consistency ``exp(-(g⁻¹(I) - ln Δt - ln Ê)²/τ)`` with the current
tone mapper ``g`` and rendered irradiance ``Ê`` ("dynamic": recomputed as g and Ê evolve), and
normalised over the exposures of one view."""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def well_exposedness(ldr: Tensor, kind: str = "mertens", sigma: float = 0.2) -> Tensor:
    """Per-pixel weight in [0, 1] of an LDR image (..., 3): mean over channels."""
    if kind == "mertens":
        w = torch.exp(-(ldr - 0.5) ** 2 / (2 * sigma ** 2))
    elif kind == "triangle":
        w = 1 - (2 * ldr - 1).abs()
    elif kind == "uniform":
        w = torch.ones_like(ldr)
    else:
        raise ValueError(f"reliability {kind!r}: use 'mertens', 'triangle' or 'uniform'")
    return w.clamp(0, 1).mean(-1)


def local_mean(w: Tensor, window: int) -> Tensor:
    """Mean over a ``window × window`` neighbourhood (H, W), edges averaged over valid pixels."""
    if window <= 1:
        return w
    if window % 2 == 0:
        raise ValueError(f"window {window}: use an odd window size")
    x = w[None, None]
    return torch.nn.functional.avg_pool2d(x, window, 1, window // 2,
                                          count_include_pad=False)[0, 0]


def consistency(ldr: Tensor, exposure: float, log_irr_pred: Tensor, tonemapper: object,
                tau: float = 0.5) -> Tensor:
    """Cross-exposure consistency ``exp(-(g⁻¹(I) - ln Δt - ln Ê)²/τ)``, mean over channels."""
    import math

    inv = tonemapper.inverse(ldr)  # type: ignore[attr-defined]
    r = inv - math.log(exposure) - log_irr_pred
    return torch.exp(-(r ** 2) / tau).mean(-1)


def view_reliability(ldrs: list[Tensor], exposures: list[float], *, kind: str = "mertens",
                     sigma: float = 0.2, window: int = 5, tonemapper: object | None = None,
                     log_irr_pred: Tensor | None = None, tau: float = 0.5,
                     eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """Reliability of one view. Returns ``(r, r_norm)``: ``r`` (E, H, W) in [0, 1] per exposure
    and ``r_norm`` normalised to sum to 1 over the exposures at each pixel."""
    rs = []
    for im, e in zip(ldrs, exposures, strict=True):
        r = local_mean(well_exposedness(im, kind, sigma), window)
        if tonemapper is not None and log_irr_pred is not None:
            r = r * consistency(im, e, log_irr_pred, tonemapper, tau)
        rs.append(r)
    r = torch.stack(rs)
    return r, r / r.sum(0, keepdim=True).clamp_min(eps)
