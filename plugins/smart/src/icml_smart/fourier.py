"""Sin-cos (Fourier) positional encoding of coordinates, shared by the geometry tokens, the
query embedding and the baselines."""

from __future__ import annotations

import math

import torch
from torch import nn


class FourierFeatures(nn.Module):
    """``x [..., D] -> [x / s, sin(2 pi f_k x / s), cos(2 pi f_k x / s)]`` with ``num_freqs``
    frequencies ``f_k`` log-spaced in ``[1 / 2, max_freq]`` per coordinate; ``s`` is the domain
    scale (coordinates are expected in about ``[-s, s]``). No parameters and no buffers, so it
    is safe under transformers' meta-device loading."""

    def __init__(self, in_dim: int, num_freqs: int, max_freq: float = 8.0,
                 scale: float = 1.0) -> None:
        super().__init__()
        if num_freqs < 1:
            raise ValueError(f"num_freqs={num_freqs}: use at least one frequency")
        self.in_dim, self.num_freqs, self.max_freq, self.scale = in_dim, num_freqs, max_freq, scale
        self.out_dim = in_dim * (1 + 2 * num_freqs)

    def freqs(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        if self.num_freqs == 1:
            return torch.full((1,), 0.5, device=device, dtype=dtype)
        k = torch.arange(self.num_freqs, device=device, dtype=dtype) / (self.num_freqs - 1)
        return 0.5 * (2 * self.max_freq) ** k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_dim:
            raise ValueError(f"coordinates have {x.shape[-1]} components, the encoding expects "
                             f"{self.in_dim} (config space_dim)")
        dtype = x.dtype
        # phases in at least float32: bfloat16 phases of high frequencies are pure noise
        x = x.to(torch.promote_types(dtype, torch.float32)) / self.scale
        ang = 2 * math.pi * x[..., None] * self.freqs(x.device, x.dtype)  # [..., D, F]
        feats = torch.cat([ang.sin(), ang.cos()], -1).flatten(-2)
        return torch.cat([x, feats], -1).to(dtype)
