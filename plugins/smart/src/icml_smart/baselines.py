"""Baselines with SMART's interface (``forward(geometry, params, queries)`` -> normalised fields,
``predict`` in physical units):

- :class:`PointNetMLP`: a max-pooled PointNet code of the point cloud, concatenated with the
  parameter embedding and the Fourier-encoded query, through an MLP (the point-cloud baseline).
- :class:`TransolverLite`: a Transolver-style peer (Wu et al., ICML 2024), our implementation of
  Physics-Attention: geometry and query points are soft-assigned to ``slices`` learned states,
  the slice tokens attend to each other and are broadcast back. Queries interact through the
  slices, so its answers depend on the other queries in the batch (no chunk independence).

The last-layer-only decoder ablation is ``SMARTConfig(decoder="last_layer")``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from icml_smart.fourier import FourierFeatures
from icml_smart.units import FieldUnits


@dataclass
class BaselineConfig:
    space_dim: int = 2
    param_dim: int = 4
    out_dim: int = 3
    dim: int = 128
    depth: int = 3
    heads: int = 4
    slices: int = 16
    fourier_features: int = 16
    max_freq: float = 8.0
    coord_scale: float = 1.5
    target_mean: list[float] | None = None
    target_std: list[float] | None = None


class _Units(FieldUnits):
    config: BaselineConfig
    query_independent = True

    def predict(self, geometry: torch.Tensor, params: torch.Tensor, queries: torch.Tensor,
                chunk_size: int = 65536) -> torch.Tensor:
        """Physical fields in chunks of ``chunk_size`` queries (TransolverLite: each chunk is a
        separate forward pass, so its answers depend on the chunking)."""
        outs = [self.denormalize(self(geometry, params, queries[:, i:i + chunk_size]))
                for i in range(0, queries.shape[1], chunk_size)]
        return torch.cat(outs, 1)


def _mlp(dims: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(nn.GELU())
    return nn.Sequential(*layers)


class PointNetMLP(_Units, nn.Module):
    """PointNet (shared point MLP, max pool) + parameter MLP + query MLP of ``depth`` layers."""

    def __init__(self, config: BaselineConfig) -> None:
        super().__init__()
        c = self.config = config
        self.fourier = FourierFeatures(c.space_dim, c.fourier_features, c.max_freq, c.coord_scale)
        f = self.fourier.out_dim
        self.point_mlp = _mlp([f, c.dim, c.dim, c.dim])
        self.param_mlp = _mlp([c.param_dim, c.dim, c.dim])
        self.query_mlp = _mlp([f + 2 * c.dim] + [c.dim] * c.depth + [c.out_dim])

    def forward(self, geometry: torch.Tensor, params: torch.Tensor,
                queries: torch.Tensor) -> torch.Tensor:
        code = self.point_mlp(self.fourier(geometry)).amax(1)
        glob = torch.cat([code, self.param_mlp(params)], -1)
        Q = queries.shape[1]
        return self.query_mlp(torch.cat([self.fourier(queries),
                                         glob[:, None].expand(-1, Q, -1)], -1))


class PhysicsAttention(nn.Module):
    """Transolver's slice attention: soft-assign points to slices, attend among slice tokens,
    broadcast back."""

    def __init__(self, dim: int, heads: int, slices: int) -> None:
        super().__init__()
        self.assign = nn.Linear(dim, slices)
        self.temperature = nn.Parameter(torch.full((1,), 0.5))
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.value = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = torch.softmax(self.assign(x) / self.temperature.clamp_min(0.05), -1)  # [B, N, G]
        v = self.value(x)
        s = torch.einsum("bng,bnd->bgd", w, v) / (w.sum(1)[..., None] + 1e-5)
        s = self.attn(s, s, s, need_weights=False)[0]
        return self.out(torch.einsum("bng,bgd->bnd", w, s))


class TransolverLite(_Units, nn.Module):
    """Transolver-style surrogate over the union of geometry and query points."""

    query_independent = False

    def __init__(self, config: BaselineConfig) -> None:
        super().__init__()
        c = self.config = config
        self.fourier = FourierFeatures(c.space_dim, c.fourier_features, c.max_freq, c.coord_scale)
        self.embed = _mlp([self.fourier.out_dim, c.dim, c.dim])
        self.kind = nn.Embedding(2, c.dim)  # 0 = surface point, 1 = query point
        self.param_mlp = _mlp([c.param_dim, c.dim, c.dim])
        self.blocks = nn.ModuleList()
        for _ in range(c.depth):
            self.blocks.append(nn.ModuleDict({
                "norm1": nn.LayerNorm(c.dim), "attn": PhysicsAttention(c.dim, c.heads, c.slices),
                "norm2": nn.LayerNorm(c.dim), "mlp": _mlp([c.dim, 2 * c.dim, c.dim])}))
        self.head = nn.Sequential(nn.LayerNorm(c.dim), nn.Linear(c.dim, c.out_dim))

    def forward(self, geometry: torch.Tensor, params: torch.Tensor,
                queries: torch.Tensor) -> torch.Tensor:
        M = geometry.shape[1]
        pts = torch.cat([geometry, queries], 1)
        kind = torch.cat([torch.zeros(M, dtype=torch.long, device=pts.device),
                          torch.ones(queries.shape[1], dtype=torch.long, device=pts.device)])
        x = self.embed(self.fourier(pts)) + self.kind(kind) + self.param_mlp(params)[:, None]
        for b in self.blocks:
            x = x + b["attn"](b["norm1"](x))
            x = x + b["mlp"](b["norm2"](x))
        return self.head(x[:, M:])


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def width_for(cls: type, target: int, **kw: object) -> int:
    """The width ``dim`` (a multiple of 8) whose ``cls(BaselineConfig(dim=..., **kw))`` comes
    closest to ``target`` parameters: baselines at matched parameter counts."""
    best, best_gap = 8, None
    for dim in range(8, 1025, 8):
        n = num_params(cls(BaselineConfig(dim=dim, **kw)))
        gap = abs(n - target)
        if best_gap is None or gap < best_gap:
            best, best_gap = dim, gap
        if n > target:
            break
    return best
