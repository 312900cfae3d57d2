"""Dynamic residual scaling S_n (reconstructed, see README).

The residual stream x_n is carried as z_n = x_n / c_n with a per-token running scale c. Each
residual branch computes s = rms(z), r = z / s and c <- c * s; its RMSNorm output is
``gamma * r / sqrt(1 + eps / c^2)`` (exactly RMSNorm(x) for any eps), and the branch output is
divided by c *at the input* of o_proj / down_proj (no bias there), so z <- r + f(r) / c. The
final norm uses ``eps / c^2`` as well, so the logits are unchanged. The worst-outlier activations
(o_proj / down_proj inputs) are seen divided by the token's scale.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class _State:
    def __init__(self) -> None:
        self.c: torch.Tensor | None = None


def _norm(norm: nn.Module, z: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
    up = torch.promote_types(z.dtype, torch.float32)
    zf = z.to(up)
    out = zf * torch.rsqrt(zf.pow(2).mean(-1, keepdim=True) + eps / c.to(up).pow(2))
    return norm.weight * out.to(z.dtype)


def _branch_scale(z: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    s = z.to(torch.promote_types(z.dtype, torch.float32)).pow(2).mean(-1, keepdim=True)
    s = s.sqrt().clamp_min(1e-30)
    return (z / s.to(z.dtype)), c * s


def _layer_forward(self: nn.Module, hidden_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> torch.Tensor:
    state: _State = self.fpt_drs_state
    z = hidden_states
    c = torch.ones(*z.shape[:-1], 1, dtype=torch.promote_types(z.dtype, torch.float32),
                   device=z.device) \
        if self.fpt_drs_first else state.c
    attn, mlp = self.self_attn, self.mlp
    r, c = _branch_scale(z, c)
    normed = _norm(self.input_layernorm, r, c)
    attn.o_proj.fpt_input_scale = 1.0 / c
    out, _ = attn(normed, *args, **kwargs)
    attn.o_proj.fpt_input_scale = None
    z = r + out
    r, c = _branch_scale(z, c)
    normed = _norm(self.post_attention_layernorm, r, c)
    mlp.down_proj.fpt_input_scale = 1.0 / c
    z = r + mlp(normed)
    mlp.down_proj.fpt_input_scale = None
    state.c = c
    return z


class _FinalNorm(nn.Module):
    def __init__(self, norm: nn.Module, state: _State) -> None:
        super().__init__()
        self.weight = norm.weight
        self.variance_epsilon = getattr(norm, "variance_epsilon", 1e-6)
        self.fpt_drs_state = state

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return _norm(self, z, self.fpt_drs_state.c)


def apply_dynamic_residual_scaling(model: Any) -> None:
    """Install S_n on every decoder layer and the final norm (idempotent, function-preserving).
    o_proj and down_proj must be bias-free: 1/c is applied at their input."""
    from icml_fptquant.qlinear import as_fpt_linear

    if getattr(model, "fpt_drs", False):
        return
    state = _State()
    for i, layer in enumerate(model.model.layers):
        for lin in (layer.self_attn.o_proj, layer.mlp.down_proj):
            if lin.bias is not None:
                raise ValueError("dynamic residual scaling puts 1/c at the input of o_proj and "
                                 "down_proj, which needs them bias-free; this model has a bias "
                                 "there: set dynamic_residual_scaling=False")
            as_fpt_linear(lin)
        cls = type(layer)
        layer.__class__ = type("DRS" + cls.__name__, (cls,), {"forward": _layer_forward})
        layer.fpt_drs_state = state
        layer.fpt_drs_first = i == 0
    model.model.norm = _FinalNorm(model.model.norm, state)
    model.__dict__["fpt_drs"] = True
