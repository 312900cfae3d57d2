"""Hadamard matrices: normalised Sylvester Hadamard, grouped (block-diagonal) Hadamard for sizes
that are not powers of two, and random orthogonal matrices."""

from __future__ import annotations

import math
from typing import Any

import torch


def largest_pow2_divisor(n: int, cap: int = 4096) -> int:
    """The largest power of two that divides ``n`` (at most ``cap``)."""
    if n < 1:
        raise ValueError(f"size must be positive, got {n}")
    g = 1
    while n % (2 * g) == 0 and 2 * g <= cap:
        g *= 2
    return g


def hadamard(n: int, dtype: Any = torch.float32, device: Any = None) -> torch.Tensor:
    """The normalised ``n x n`` Sylvester Hadamard matrix (orthogonal, symmetric); ``n`` must be
    a power of two."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"hadamard size {n} is not a power of two: use grouped_hadamard")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h / math.sqrt(n)).to(dtype=dtype, device=device)


def grouped_hadamard(n: int, dtype: Any = torch.float32, device: Any = None) -> torch.Tensor:
    """Block-diagonal orthogonal matrix of normalised Hadamard blocks of the largest power-of-two
    size dividing ``n`` (a full Hadamard when ``n`` is a power of two)."""
    g = largest_pow2_divisor(n)
    return torch.block_diag(*[hadamard(g, torch.float64)] * (n // g)).to(dtype=dtype,
                                                                        device=device)


def random_orthogonal(n: int, seed: int = 0, dtype: Any = torch.float32,
                      device: Any = None) -> torch.Tensor:
    """A Haar-random orthogonal matrix from a seeded generator."""
    gen = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)
    return q.to(dtype=dtype, device=device)


def apply_grouped(x: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
    """``x @ blockdiag(block, ..., block).T`` on the last dimension, without the dense matrix."""
    g = block.shape[0]
    shape = x.shape
    y = x.reshape(*shape[:-1], shape[-1] // g, g) @ block.to(device=x.device, dtype=x.dtype).T
    return y.reshape(shape)
