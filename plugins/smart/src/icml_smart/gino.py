"""GINO (Li et al., NeurIPS 2023) from ``neuraloperator`` 2.0.0 as a published peer, behind
SMART's interface (``forward(geometry, params, queries)`` -> normalised fields, ``predict`` in
physical units).

``neuraloperator`` is not a dependency of this plugin (its pins pull wandb, h5py, ...); the
peer benchmark installs it beside the dev environment with ``pip install --no-deps --target``
(see ``benchmarks/bench_peers.py``), and this module imports it only when a model is built.

What is GINO's and what is ours: the network is ``neuralop.models.GINO`` unchanged (input GNO
from the point cloud onto a latent grid, FNO blocks on the grid, output GNO from the grid to
the query points, pointwise projection). GINO batches only cases that share one geometry, and
every case here has its own cloud and queries, so :class:`GINOPeer` calls GINO's own
submodules in GINO's order with a loop over the cases for the two GNOs (the FNO runs batched);
for one case it is exactly ``GINO.forward`` (tested). GINO has no parameter input: the
simulation parameters ``xi`` enter as constant latent feature channels on the grid (GINO's
``latent_features``), with the unsigned distance from each grid node to the nearest cloud point
(a signed distance needs the body's inside, which a point cloud does not give; GINO's paper
feeds an SDF there). Coordinates are mapped from ``[-box, box]^2`` to ``[0, 1]^2``.

Speed: without ``torch_scatter`` (no build for this CPU torch) GINO's GNOs reduce neighbourhoods
with a Python loop over output points (``neuralop.layers.segment_csr``'s fallback), which made a
training step about 10x slower than SMART's. :func:`segment_csr` is a vectorised drop-in (an
``index_add``, the same sums and means as the loop and as ``torch_scatter``; tested against the
loop) that :class:`GINOPeer` installs into ``neuralop.layers.integral_transform``; the network and
its arithmetic are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from icml_smart.units import FieldUnits


@dataclass
class GINOPeerConfig:
    space_dim: int = 2
    param_dim: int = 4
    out_dim: int = 3
    width: int = 32                  # fno_hidden_channels
    grid: int = 16                   # latent grid nodes per side
    modes: int = 8                   # Fourier modes per side
    fno_layers: int = 3
    radius: float = 0.1              # GNO radius in [0, 1] coordinates (grid spacing 1/15)
    embed_channels: int = 16         # GNO positional embedding channels
    gno_hidden: list[int] = field(default_factory=lambda: [64, 64])
    box: float = 1.5
    target_mean: list[float] | None = None
    target_std: list[float] | None = None


def segment_csr(src: torch.Tensor, indptr: torch.Tensor, reduction: str,
                use_scatter: bool = True) -> torch.Tensor:
    """Sum or mean of ``src`` rows over the CSR segments ``indptr`` (``[n_out + 1]``, or
    ``[b, n_out + 1]`` with a shared first row for batched ``src [b, n_reps, C]``), as
    ``neuralop.layers.segment_csr.segment_csr``; empty segments give zero."""
    if reduction not in ("mean", "sum"):
        raise ValueError("reduce must be one of 'mean', 'sum'")
    batched = src.ndim == 3
    ptr = (indptr[0] if indptr.ndim == 2 else indptr).long()
    counts = ptr[1:] - ptr[:-1]
    n_out = counts.shape[0]
    seg = torch.repeat_interleave(torch.arange(n_out, device=src.device), counts)
    dim = 1 if batched else 0
    shape = list(src.shape)
    shape[dim] = n_out
    src = src.narrow(dim, int(ptr[0]), seg.shape[0])
    out = torch.zeros(shape, device=src.device, dtype=src.dtype).index_add(dim, seg, src)
    if reduction == "mean":
        c = counts.clamp_min(1).to(src.dtype)
        out = out / (c[None, :, None] if batched else c[:, None])
    return out


def _check_installed() -> None:
    try:
        import neuralop  # noqa: F401
    except ImportError as exc:
        raise ImportError("the GINO peer needs neuraloperator 2.0.0: pip install --no-deps "
                          "--target .peers/gino neuraloperator==2.0.0 tensorly "
                          "tensorly-torch opt-einsum zencfg configmypy ruamel-yaml, then pass "
                          "--gino-path .peers/gino") from exc


class GINOPeer(FieldUnits, nn.Module):
    """``neuralop.models.GINO`` over per-case point clouds, conditioned on ``xi`` through
    latent feature channels."""

    query_independent = True  # the output GNO reads only the latent grid near each query

    def __init__(self, config: GINOPeerConfig) -> None:
        super().__init__()
        _check_installed()
        import neuralop.layers.integral_transform as it
        import torch.nn.functional as F
        from neuralop.models import GINO

        it.segment_csr = segment_csr  # vectorised drop-in for the per-point Python loop

        c = self.config = config
        if c.space_dim != 2:
            raise ValueError(f"the GINO peer is wired for 2-D cases, got space_dim={c.space_dim}")
        self.gino = GINO(
            in_channels=1, out_channels=c.out_dim, latent_feature_channels=c.param_dim + 1,
            gno_coord_dim=2, in_gno_radius=c.radius, out_gno_radius=c.radius,
            fno_in_channels=c.width, fno_n_modes=(c.modes, c.modes), fno_hidden_channels=c.width,
            fno_n_layers=c.fno_layers, gno_embed_channels=c.embed_channels,
            in_gno_channel_mlp_hidden_layers=list(c.gno_hidden),
            out_gno_channel_mlp_hidden_layers=list(c.gno_hidden),
            gno_channel_mlp_non_linearity=F.gelu, gno_use_open3d=False,
            gno_use_torch_scatter=False, projection_channel_ratio=2)
        t = torch.linspace(0, 1, c.grid)
        grid = torch.stack(torch.meshgrid(t, t, indexing="ij"), -1)  # [n, n, 2]
        self.register_buffer("grid", grid, persistent=False)

    def _unit(self, x: torch.Tensor) -> torch.Tensor:
        return (x + self.config.box) / (2 * self.config.box)

    def latent_features(self, geometry: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        """``[B, n, n, P + 1]``: the parameters broadcast on the grid and the unsigned distance
        of every grid node to the nearest cloud point."""
        B = geometry.shape[0]
        n = self.config.grid
        flat = self.grid.reshape(-1, 2)
        dist = torch.cdist(flat[None].expand(B, -1, -1), self._unit(geometry)).amin(-1)
        par = params[:, None, None, :].expand(B, n, n, params.shape[-1])
        return torch.cat([par, dist.reshape(B, n, n, 1)], -1)

    def forward(self, geometry: torch.Tensor, params: torch.Tensor,
                queries: torch.Tensor) -> torch.Tensor:
        g = self.gino
        B = geometry.shape[0]
        flat = self.grid.reshape(-1, 2)
        n = self.config.grid
        # input GNO per case (each case has its own cloud), as in GINO.forward with x=None
        in_p = torch.stack([g.gno_in(y=self._unit(geometry[b]), x=flat, f_y=None)
                            for b in range(B)]).view(B, n, n, -1)
        in_p = torch.cat([in_p, self.latent_features(geometry, params)], -1)
        lat = g.latent_embedding(in_p=in_p)                      # [B, C, n, n], batched FNO
        lat = lat.permute(0, 2, 3, 1).reshape(B, -1, g.fno_hidden_channels)
        outs = []
        for b in range(B):   # output GNO per case (its own queries), then GINO's projection
            o = g.gno_out(y=flat, x=self._unit(queries[b]), f_y=lat[b:b + 1])  # [1, Q, C]
            outs.append(g.projection(o.permute(0, 2, 1)).permute(0, 2, 1))
        return torch.cat(outs, 0)

    def predict(self, geometry: torch.Tensor, params: torch.Tensor, queries: torch.Tensor,
                chunk_size: int = 65536) -> torch.Tensor:
        outs = [self.denormalize(self(geometry, params, queries[:, i:i + chunk_size]))
                for i in range(0, queries.shape[1], chunk_size)]
        return torch.cat(outs, 1)


def gino_for_params(target: int, **kw: object) -> GINOPeer:
    """The GINO peer whose width (an even number) comes closest to ``target`` parameters."""
    from icml_smart.baselines import num_params

    best, gap = None, None
    for w in range(8, 257, 2):
        m = GINOPeer(GINOPeerConfig(width=w, **kw))  # type: ignore[arg-type]
        d = abs(num_params(m) - target)
        if gap is None or d < gap:
            best, gap = w, d
        if num_params(m) > target:
            break
    return GINOPeer(GINOPeerConfig(width=best, **kw))  # type: ignore[arg-type]
