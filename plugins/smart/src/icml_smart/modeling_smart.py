"""``SMARTModel``: geometry and simulation parameters are encoded into one latent space by a
transformer over supernode tokens; a physics decoder maps each query point to the fields by
cross-attending, layer by layer, to the encoder's intermediate latents (the cross-layer
interaction). Queries never attend to each other, so any subset of queries can be answered
alone, in chunks of any size.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel

from icml_smart.configuration_smart import SMARTConfig
from icml_smart.fourier import FourierFeatures
from icml_smart.supernodes import SupernodePooling
from icml_smart.units import FieldUnits


class Modulation(nn.Linear):
    """AdaLN projection of the parameter embedding to (shift, scale) pairs; zero-initialised so
    every block starts as the unmodulated one."""


class Attention(nn.Module):
    """Multi-head attention; ``context`` None is self-attention."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        B, N, D = x.shape
        ctx = x if context is None else context
        h = self.heads
        q = self.q(x).view(B, N, h, D // h).transpose(1, 2)
        k, v = self.kv(ctx).view(B, ctx.shape[1], 2, h, D // h).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v)
        return self.out(o.transpose(1, 2).reshape(B, N, D))


def _modulate(x: torch.Tensor, shift: torch.Tensor | None, scale: torch.Tensor | None
              ) -> torch.Tensor:
    if shift is None:
        return x
    return x * (1 + scale[:, None]) + shift[:, None]


class Block(nn.Module):
    """Pre-LN transformer block with optional AdaLN modulation. ``cross=True``: the attention
    reads ``context`` (its own LayerNorm) instead of the block's input."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, adaln: bool, cross: bool) -> None:
        super().__init__()
        self.cross = cross
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=not adaln)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=not adaln)
        self.norm_ctx = nn.LayerNorm(dim) if cross else None
        self.attn = Attention(dim, heads)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        self.modulation = Modulation(dim, 4 * dim) if adaln else None

    def forward(self, x: torch.Tensor, cond: torch.Tensor | None,
                context: torch.Tensor | None = None) -> torch.Tensor:
        if self.modulation is not None:
            s1, c1, s2, c2 = self.modulation(cond).chunk(4, -1)
        else:
            s1 = c1 = s2 = c2 = None
        h = _modulate(self.norm1(x), s1, c1)
        x = x + self.attn(h, self.norm_ctx(context) if self.cross else None)
        return x + self.mlp(_modulate(self.norm2(x), s2, c2))


class SMARTPreTrainedModel(PreTrainedModel):
    config_class = SMARTConfig
    base_model_prefix = "smart"
    main_input_name = "queries"

    def _init_weights(self, module: nn.Module) -> None:
        from transformers import initialization as init

        if isinstance(module, Modulation):
            init.zeros_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, nn.Linear):
            # torch's nn.Linear default (fan-in uniform): the 0.02-normal init of large language
            # models starves these narrow MLPs (the query and parameter signals nearly vanish
            # and training plateaus; measured on the ellipse task)
            init.kaiming_uniform_(module.weight, a=math.sqrt(5))
            if module.bias is not None:
                bound = 1 / math.sqrt(module.in_features)
                init.uniform_(module.bias, -bound, bound)
        elif isinstance(module, nn.LayerNorm) and module.weight is not None:
            init.ones_(module.weight)
            init.zeros_(module.bias)


class SMARTModel(FieldUnits, SMARTPreTrainedModel):
    """The SMART surrogate. ``forward(geometry [B, M, D], params [B, P], queries [B, Q, D])``
    returns normalised fields ``[B, Q, C]``; :meth:`predict` answers any number of queries in
    chunks and returns physical units."""

    def __init__(self, config: SMARTConfig) -> None:
        super().__init__(config)
        c = config
        self.fourier = FourierFeatures(c.space_dim, c.fourier_features, c.max_freq, c.coord_scale)
        self.pooling = SupernodePooling(c.space_dim, c.dim, c.num_supernodes, c.num_neighbors,
                                        c.supernode_radius, self.fourier)
        self.param_embed = nn.Sequential(nn.Linear(c.param_dim, c.dim), nn.GELU(),
                                         nn.Linear(c.dim, c.dim))
        self.pos_embed = nn.Linear(self.fourier.out_dim, c.dim)  # supernode positions
        adaln = c.param_conditioning in ("adaln", "both")
        self.encoder = nn.ModuleList([Block(c.dim, c.heads, c.mlp_ratio, adaln, cross=False)
                                      for _ in range(c.depth)])
        self.query_embed = nn.Sequential(nn.Linear(self.fourier.out_dim, c.dim), nn.GELU(),
                                         nn.Linear(c.dim, c.dim))
        self.decoder = nn.ModuleList([Block(c.dim, c.heads, c.mlp_ratio, adaln, cross=True)
                                      for _ in range(c.decoder_depth)])
        self.head_norm = nn.LayerNorm(c.dim)
        self.head = nn.Linear(c.dim, c.out_dim)
        self.post_init()

    # input checks ------------------------------------------------------------------------
    def _cast(self, name: str, t: torch.Tensor) -> torch.Tensor:
        """``t`` in the model's dtype: float64 or integer coordinates are cast (float64 into a
        float32 model raised a raw matmul dtype error; int64 a misleading one)."""
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype == torch.bool or t.is_complex():
            raise ValueError(f"{name} is {t.dtype}: pass real coordinates (float or int)")
        return t if t.dtype == self.dtype else t.to(self.dtype)

    def _check(self, geometry: torch.Tensor, params: torch.Tensor,
               queries: torch.Tensor | None) -> None:
        c = self.config
        if geometry.ndim != 3 or geometry.shape[-1] != c.space_dim:
            raise ValueError(f"geometry must be [batch, points, {c.space_dim}], got "
                             f"{tuple(geometry.shape)}")
        if geometry.shape[1] == 0:
            raise ValueError("geometry is an empty point cloud: pass at least num_supernodes "
                             f"({c.num_supernodes}) surface points")
        if params.ndim != 2 or params.shape != (geometry.shape[0], c.param_dim):
            raise ValueError(f"params must be [batch={geometry.shape[0]}, param_dim="
                             f"{c.param_dim}], got {tuple(params.shape)}")
        if not torch.isfinite(geometry).all() or not torch.isfinite(params).all():
            raise ValueError("geometry or params contain NaN/inf: clean the point cloud")
        if queries is not None:
            if queries.ndim != 3 or queries.shape[-1] != c.space_dim or \
                    queries.shape[0] != geometry.shape[0]:
                raise ValueError(f"queries must be [batch={geometry.shape[0]}, n, "
                                 f"{c.space_dim}], got {tuple(queries.shape)}")
            if not torch.isfinite(queries).all():
                raise ValueError("queries contain NaN/inf coordinates: remove them")
        ext = geometry.detach().amax(1) - geometry.detach().amin(1)
        if (ext.amax(-1) == 0).any():
            raise ValueError("degenerate geometry: every point of a cloud is the same point")

    # encoder -----------------------------------------------------------------------------
    def encode(self, geometry: torch.Tensor, params: torch.Tensor, sampling: str = "fps",
               generator: torch.Generator | None = None) -> dict[str, object]:
        """The shared latent space: ``{"latents": [z^(1), ..., z^(L)], "cond": e_xi}``.
        Inputs of another dtype (float64, int64) are cast to the model's."""
        geometry, params = self._cast("geometry", geometry), self._cast("params", params)
        self._check(geometry, params, None)
        c = self.config
        if c.normalize_params and c.param_mean is not None:
            pm = torch.tensor(c.param_mean, dtype=params.dtype, device=params.device)
            ps = torch.tensor(c.param_std, dtype=params.dtype, device=params.device)
            params = (params - pm) / ps
        tokens, centers = self.pooling(geometry, sampling=sampling, generator=generator)
        x = tokens + self.pos_embed(self.fourier(centers))
        cond = self.param_embed(params)
        use_token = c.param_conditioning in ("token", "both")
        if use_token:
            x = torch.cat([cond[:, None], x], 1)
        adaln_cond = cond if c.param_conditioning in ("adaln", "both") else None
        latents = []
        for blk in self.encoder:
            x = blk(x, adaln_cond)
            latents.append(x)
        return {"latents": latents, "cond": adaln_cond, "xi": cond}

    # decoder -----------------------------------------------------------------------------
    def decode(self, encoded: dict[str, object], queries: torch.Tensor) -> torch.Tensor:
        """Normalised fields ``[B, Q, C]`` at ``queries``; every query is processed alone."""
        latents: list[torch.Tensor] = encoded["latents"]  # type: ignore[assignment]
        cond = encoded["cond"]
        c = self.config
        queries = self._cast("queries", queries)
        if queries.shape[-1] != c.space_dim:
            raise ValueError(f"queries must have {c.space_dim} coordinates, got "
                             f"{queries.shape[-1]}")
        h = self.query_embed(self.fourier(queries))
        if c.query_params:  # the parameter embedding also enters every query directly
            h = h + encoded["xi"][:, None]  # type: ignore[index]
        if c.decoder == "concat":
            allz = torch.cat(latents, 1)
        for i, blk in enumerate(self.decoder):
            if c.decoder == "cross_layer":
                z = latents[i]
            elif c.decoder == "last_layer":
                z = latents[-1]
            else:
                z = allz
            h = blk(h, cond, context=z)
        return self.head(self.head_norm(h))

    def forward(self, geometry: torch.Tensor, params: torch.Tensor, queries: torch.Tensor,
                sampling: str = "fps", generator: torch.Generator | None = None) -> torch.Tensor:
        geometry, params = self._cast("geometry", geometry), self._cast("params", params)
        queries = self._cast("queries", queries)
        self._check(geometry, params, queries)
        return self.decode(self.encode(geometry, params, sampling, generator), queries)

    # units (normalize, denormalize from FieldUnits) -------------------------------------
    def predict(self, geometry: torch.Tensor, params: torch.Tensor, queries: torch.Tensor,
                chunk_size: int = 65536, out: torch.Tensor | None = None) -> torch.Tensor:
        """Physical fields at any number of ``queries [B, Q, D]``, decoded ``chunk_size`` at a
        time after one encoder pass; peak memory is set by the chunk, not by ``Q``. Runs under
        the caller's grad mode (wrap in ``torch.no_grad()`` for inference). ``out`` may be a
        preallocated ``[B, Q, C]`` tensor (e.g. memory-mapped) to write into."""
        if chunk_size < 1:
            raise ValueError(f"chunk_size={chunk_size} must be >= 1")
        geometry, params = self._cast("geometry", geometry), self._cast("params", params)
        queries = self._cast("queries", queries)
        self._check(geometry, params, queries)
        enc = self.encode(geometry, params)
        B, Q, _ = queries.shape
        if out is None:
            out = queries.new_empty(B, Q, self.config.out_dim)
        elif out.shape != (B, Q, self.config.out_dim):
            raise ValueError(f"out must be [{B}, {Q}, {self.config.out_dim}], got "
                             f"{tuple(out.shape)}")
        if torch.is_grad_enabled():
            return torch.cat([self.denormalize(self.decode(enc, queries[:, i:i + chunk_size]))
                              for i in range(0, Q, chunk_size)], 1)
        for i in range(0, Q, chunk_size):
            out[:, i:i + chunk_size] = self.denormalize(self.decode(enc, queries[:,
                                                                    i:i + chunk_size]))
        return out


def load_smart(path: str | Path, **kwargs: object) -> SMARTModel:
    """``SMARTModel.from_pretrained(path)`` with a one-line ``ValueError`` naming the file when
    the folder is missing, or its ``config.json`` or weights file is missing, empty or
    garbled (transformers answers these with "repo id" or ``weights_only`` paragraphs)."""
    p = Path(path)
    hint = "give the folder SMARTModel.save_pretrained wrote (config.json + model.safetensors)"
    if not p.exists():
        raise ValueError(f"{p}: no such folder; {hint}")
    if not p.is_dir():
        raise ValueError(f"{p}: is a file, not a folder; {hint}")
    cfg = p / "config.json"
    if not cfg.is_file():
        raise ValueError(f"{cfg}: missing; {hint}")
    try:
        meta = json.loads(cfg.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        why = "empty file" if not cfg.stat().st_size else str(exc)
        raise ValueError(f"{cfg}: not a JSON config ({why})") from None
    if not isinstance(meta, dict) or meta.get("model_type") != SMARTConfig.model_type:
        got = meta.get("model_type") if isinstance(meta, dict) else type(meta).__name__
        raise ValueError(f"{cfg}: model_type is {got!r}, not 'smart'")
    weights = [p / n for n in ("model.safetensors", "pytorch_model.bin") if (p / n).is_file()]
    if not weights:
        raise ValueError(f"{p}: no model.safetensors (or pytorch_model.bin); {hint}")
    if not weights[0].stat().st_size:
        raise ValueError(f"{weights[0]}: empty file")
    try:
        return SMARTModel.from_pretrained(p, **kwargs)
    except Exception as exc:  # noqa: BLE001 - safetensors/torch/transformers errors vary
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{weights[0]}: cannot be loaded ({first[:200]})") from None
