"""Baselines in the same framework: RTN (no transform), SmoothQuant-style per-channel scaling
(closed form from calibration statistics) and QuaRot-style Hadamard rotations."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from icml_fptquant.arch import check_supported
from icml_fptquant.config import FPTQuantConfig
from icml_fptquant.quantize import as_batches


def quarot_config(config: FPTQuantConfig | None = None,
                  dynamic: bool = True) -> FPTQuantConfig:
    """QuaRot-style: fused norms + Hadamard residual rotation (R1), per-head Hadamard on
    values (R2, merged into v/o) with the online mix across heads before o_proj, online
    Hadamard on post-RoPE queries/keys (R3) and before down_proj (R4); nothing learned.
    ``dynamic``: per-token activations and KV cache as in the QuaRot paper (else the static
    ranges of every other arm)."""
    cfg = config or FPTQuantConfig()
    return dataclasses.replace(
        cfg,
        transforms=dataclasses.replace(cfg.transforms, residual_rotation="hadamard",
                                       prerope=False, value=True, value_init="hadamard",
                                       o_head_mix=True, mlp_scale=False, down_hadamard=True,
                                       qk_hadamard=True, dynamic_residual_scaling=False),
        training=dataclasses.replace(cfg.training, local_steps=0, e2e_steps=0),
        quant=dataclasses.replace(cfg.quant, act_dynamic=dynamic))


def apply_quarot(model: Any, config: FPTQuantConfig | None = None, seed: int = 0,
                 dynamic: bool = True) -> Any:
    from icml_fptquant.apply import apply_fpt_transforms, merge_transforms

    apply_fpt_transforms(model, quarot_config(config, dynamic), seed)
    return merge_transforms(model)


@torch.no_grad()
def _input_absmax(model: Any, modules: list[Any], batches: list[torch.Tensor]) -> list:
    stats: list[torch.Tensor | None] = [None] * len(modules)
    handles = []
    for i, mod in enumerate(modules):
        def hook(m: Any, args: tuple, i: int = i) -> None:
            x = args[0].detach().abs().reshape(-1, args[0].shape[-1]).amax(0)
            stats[i] = x if stats[i] is None else torch.maximum(stats[i], x)
        handles.append(mod.register_forward_pre_hook(hook))
    try:
        for b in batches:
            model(b.to(next(model.parameters()).device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return stats


def _smooth(act: torch.Tensor, weights: list[torch.Tensor], alpha: float) -> torch.Tensor:
    w = torch.stack([x.abs().amax(0) for x in weights]).amax(0)
    s = act.clamp_min(1e-5).pow(alpha) / w.clamp_min(1e-5).pow(1 - alpha)
    return s.clamp_min(1e-5)


@torch.no_grad()
def apply_smoothquant(model: Any, calibration_data: Any, alpha: float = 0.5) -> Any:
    """SmoothQuant-style migration ``s_j = max|X_j|^a / max|W_j|^(1-a)`` at every mergeable
    pair: RMSNorm -> q/k/v, RMSNorm -> gate/up, v_proj -> o_proj (per KV-head channel) and
    up_proj -> down_proj. Function-preserving; in place."""
    geo = check_supported(model)
    batches = as_batches(calibration_data)
    lay = list(model.model.layers)
    sites = []
    for layer in lay:
        a, m = layer.self_attn, layer.mlp
        sites += [a.q_proj, m.gate_proj, a.o_proj, m.down_proj]
    stats = _input_absmax(model, sites, batches)
    for i, layer in enumerate(lay):
        a, m = layer.self_attn, layer.mlp
        x_qkv, x_mlp, x_o, x_down = stats[4 * i:4 * i + 4]
        for norm, readers, x in ((layer.input_layernorm, (a.q_proj, a.k_proj, a.v_proj), x_qkv),
                                 (layer.post_attention_layernorm, (m.gate_proj, m.up_proj),
                                  x_mlp)):
            s = _smooth(x, [r.weight for r in readers], alpha)
            norm.weight.div_(s)
            for r in readers:
                r.weight.mul_(s)
        s = _smooth(x_down, [m.down_proj.weight], alpha)
        m.up_proj.weight.div_(s.unsqueeze(1))
        if m.up_proj.bias is not None:
            m.up_proj.bias.div_(s)
        m.down_proj.weight.mul_(s)
        dh = geo.head_dim
        xo = x_o.reshape(geo.kv_heads, geo.n_rep, dh).amax(1)
        wo = a.o_proj.weight.abs().reshape(-1, geo.kv_heads, geo.n_rep, dh).amax((0, 2))
        s = (xo.clamp_min(1e-5).pow(alpha) / wo.clamp_min(1e-5).pow(1 - alpha)).clamp_min(1e-5)
        a.v_proj.weight.div_(s.reshape(-1, 1))
        if a.v_proj.bias is not None:
            a.v_proj.bias.div_(s.reshape(-1))
        s_o = s.unsqueeze(1).expand(geo.kv_heads, geo.n_rep, dh).reshape(-1)
        a.o_proj.weight.mul_(s_o)
    return model
