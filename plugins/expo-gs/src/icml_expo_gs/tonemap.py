"""The learned camera response (HDR-GS's tone mapper): per colour channel k an MLP
``g_k: 1 → hidden → 1`` with ReLU and a sigmoid output, applied to ``ln E + ln Δt``.

``crf="per_gaussian"`` (HDR-GS) maps each Gaussian's log-irradiance before compositing;
``crf="per_pixel"`` (the physically correct option) maps the composited pixel irradiance.
``kind="exp"`` is the identity response ``g(x) = exp(x)`` (no clamp), used by tests; with the
per-pixel CRF it gives exactly ``LDR = Δt · HDR``. ``monotone=True`` keeps ``g' ≥ 0`` by using
positive weights (softplus) in the MLP.
"""

from __future__ import annotations

import torch
from torch import nn

Tensor = torch.Tensor


class ToneMapper(nn.Module):
    """Per-channel tone-mapping MLPs (``kind="mlp"``) or ``g = exp`` (``kind="exp"``)."""

    def __init__(self, hidden: int = 16, channels: int = 3, *, kind: str = "mlp",
                 monotone: bool = False) -> None:
        super().__init__()
        if kind not in ("mlp", "exp"):
            raise ValueError(f"tone mapper kind {kind!r}: use 'mlp' or 'exp'")
        self.kind, self.monotone, self.channels = kind, monotone, channels
        self.w1 = nn.Parameter(torch.randn(channels, hidden) * 0.5)
        self.b1 = nn.Parameter(torch.linspace(-2, 2, hidden).repeat(channels, 1))
        self.w2 = nn.Parameter(torch.randn(channels, hidden) * 0.3)
        self.b2 = nn.Parameter(torch.zeros(channels))
        if monotone:  # raw weights go through softplus; start near g(-inf)=0.05, g(+inf)=1
            with torch.no_grad():
                self.w1.fill_(-0.43)   # softplus -> 0.5
                self.w2.fill_(-2.0)    # softplus -> 0.13
                self.b2.fill_(-3.0)

    def forward(self, x: Tensor) -> Tensor:
        """``x``: (..., channels) log-exposure ``ln E + ln Δt``; returns LDR values in (0, 1)."""
        if self.kind == "exp":
            return torch.exp(x)
        w1, w2 = self.w1, self.w2
        if self.monotone:
            w1, w2 = nn.functional.softplus(w1), nn.functional.softplus(w2)
        h = torch.relu(x[..., None] * w1 + self.b1)
        return torch.sigmoid((h * w2).sum(-1) + self.b2)

    @torch.no_grad()
    def inverse(self, ldr: Tensor, lo: float = -12.0, hi: float = 12.0, n: int = 2048) -> Tensor:
        """Numerical ``g⁻¹`` per channel by tabulating g on ``[lo, hi]`` and interpolating its
        monotone envelope (a non-monotone learned g is made monotone by a running maximum)."""
        if self.kind == "exp":
            return torch.log(ldr.clamp_min(1e-12))
        x = torch.linspace(lo, hi, n, device=ldr.device, dtype=ldr.dtype)
        y = self.forward(x[:, None].expand(n, self.channels)).cummax(0).values  # (n, C)
        out = torch.empty_like(ldr)
        for k in range(self.channels):
            yk = y[:, k].contiguous()
            v = ldr[..., k].contiguous()
            i = torch.searchsorted(yk, v).clamp(1, n - 1)
            y0, y1 = yk[i - 1], yk[i]
            t = ((v - y0) / (y1 - y0).clamp_min(1e-12)).clamp(0, 1)
            out[..., k] = x[i - 1] + t * (x[i] - x[i - 1])
        return out


def camera_response(x: Tensor, a: float = 0.2, gamma: float = 0.8) -> Tensor:
    """The synthetic scenes' ground-truth CRF on exposure ``x = E·Δt``: ``(x/(x+a))^γ``."""
    x = x.clamp_min(0)
    return (x / (x + a)) ** gamma
