"""Supernode geometry tokens (UPT / AB-UPT family): pick ``S`` supernodes from the geometry
point cloud and pool the messages of each supernode's neighbours into one token,
``t_s = mean_{k in N(s)} MLP([g_k - g_s, PE(g_k)])``."""

from __future__ import annotations

import torch
from torch import nn

from icml_smart.fourier import FourierFeatures


def farthest_point_sampling(points: torch.Tensor, num_samples: int) -> torch.Tensor:
    """Indices ``[B, S]`` of ``S`` farthest points of ``points [B, M, D]``.

    The first point is the one farthest from the cloud's centroid, so the result depends only on
    the set of points, not on their order (permutation invariant up to exact ties)."""
    B, M, _ = points.shape
    if num_samples > M:
        raise ValueError(f"cannot pick {num_samples} supernodes from {M} geometry points: lower "
                         f"num_supernodes to <= {M} or sample more surface points")
    pts = points.detach().to(torch.promote_types(points.dtype, torch.float32))
    centroid = pts.mean(1, keepdim=True)
    first = ((pts - centroid) ** 2).sum(-1).argmax(-1)  # [B]
    idx = torch.empty(B, num_samples, dtype=torch.long, device=pts.device)
    idx[:, 0] = first
    dist = ((pts - pts[torch.arange(B), first][:, None]) ** 2).sum(-1)
    for i in range(1, num_samples):
        nxt = dist.argmax(-1)
        idx[:, i] = nxt
        dist = torch.minimum(dist, ((pts - pts[torch.arange(B), nxt][:, None]) ** 2).sum(-1))
    return idx


class SupernodePooling(nn.Module):
    """Geometry ``[B, M, D]`` -> supernode tokens ``[B, S, dim]`` and supernode positions.

    Neighbourhoods are the ``num_neighbors`` nearest points of each supernode, optionally
    restricted to a ``radius`` (a supernode is always its own neighbour, so no neighbourhood is
    empty). ``sampling="fps"`` (default; deterministic, permutation invariant) or ``"random"``
    (UPT's training-time choice; uses ``generator``)."""

    def __init__(self, space_dim: int, dim: int, num_supernodes: int, num_neighbors: int,
                 radius: float | None, fourier: FourierFeatures) -> None:
        super().__init__()
        self.num_supernodes, self.num_neighbors, self.radius = num_supernodes, num_neighbors, radius
        self.fourier = fourier
        self.message = nn.Sequential(nn.Linear(space_dim + fourier.out_dim, dim), nn.GELU(),
                                     nn.Linear(dim, dim))

    def forward(self, geometry: torch.Tensor, sampling: str = "fps",
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        B, M, _ = geometry.shape
        S = self.num_supernodes
        if sampling == "fps":
            idx = farthest_point_sampling(geometry, S)
        elif sampling == "random":
            if S > M:
                farthest_point_sampling(geometry, S)  # raises the same clear error
            idx = torch.stack([torch.randperm(M, generator=generator, device="cpu")[:S]
                               for _ in range(B)]).to(geometry.device)
        else:
            raise ValueError(f"sampling={sampling!r}: use 'fps' or 'random'")
        batch = torch.arange(B, device=geometry.device)[:, None]
        centers = geometry[batch, idx]                                  # [B, S, D]
        k = min(self.num_neighbors, M)
        hi = torch.promote_types(geometry.dtype, torch.float32)
        d2 = torch.cdist(centers.to(hi), geometry.to(hi))               # [B, S, M]
        dist, nb = d2.topk(k, dim=-1, largest=False)                    # [B, S, k]
        neigh = geometry[batch[..., None], nb]                          # [B, S, k, D]
        msg = self.message(torch.cat([neigh - centers[:, :, None], self.fourier(neigh)], -1))
        if self.radius is not None:
            w = (dist <= self.radius).to(msg.dtype)  # noqa: SIM300
            w[..., 0] = 1.0  # the supernode itself
            tokens = (msg * w[..., None]).sum(2) / w.sum(-1, keepdim=True)
        else:
            tokens = msg.mean(2)
        return tokens, centers
