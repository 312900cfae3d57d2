"""Dynamic residual scaling S_n (reconstructed, see README).

Inside a decoder layer the residual stream x is carried as z = x / c with a per-token running
scale c. Each residual branch computes s = rms(z), r = z / s and c <- c * s; its RMSNorm output
is ``gamma * r / sqrt(1 + eps / c^2)`` (exactly RMSNorm(x) for any eps), and the branch output
is divided by c *at the input* of o_proj / down_proj (at their output if they have a bias), so
z <- r + f(r) / c. The layer returns ``c * z`` = x: between layers (``output_hidden_states``,
the final norm) the stream is the model's own, so the logits are unchanged and readers of
intermediate layers need no state; ``(z, c)`` ride on the returned tensor so that the next
layer and the final norm (``eps / c^2``) continue exactly as S_n computes. The worst-outlier
activations (o_proj / down_proj inputs) are seen divided by the token's scale.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn


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


def _scaled_call(lin: nn.Module, c: torch.Tensor, call: Any) -> Any:
    """Run a branch with 1/c at the input of its output projection (bias-free), or at the
    branch output when that projection has a bias."""
    if lin.bias is None:
        lin.fpt_input_scale = 1.0 / c
        try:
            return call()
        finally:
            lin.fpt_input_scale = None
    out = call()
    if isinstance(out, tuple):
        return (out[0] / c.to(out[0].dtype), *out[1:])
    return out / c.to(out.dtype)


def _carried(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(z, c)`` of a stream ``x`` that a previous S_n layer returned, untouched since (same
    tensor object, no in-place change); ``None`` for any other tensor (a slice, a mapped or
    steered state, an input of another shape)."""
    got = getattr(x, "_fpt_drs", None)
    if got is None:
        return None
    if got[2] is None:  # an inference tensor: no version counter; unchanged = the same values
        if not torch.equal(x, got[0] * got[1].to(got[0].dtype)):
            return None
    elif got[2] != x._version:
        return None
    return got[0], got[1]


def _carry(z: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    x = z * c.to(z.dtype)
    # the next layer continues from (z, c) exactly when x is unchanged: checked by the version
    # counter, or for an inference tensor (torch.inference_mode: it has none) by recomputing
    # x = z * c, the same deterministic product
    x._fpt_drs = (z, c, None if x.is_inference() else x._version)
    return x


def _layer_forward(self: nn.Module, hidden_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> torch.Tensor:
    """One decoder layer with S_n. It takes and returns the residual stream in the model's own
    scale (``x = c * z``), so ``output_hidden_states``, a reader of any layer, the final norm
    and any input shape (a 7-token read-out after a 38-token forward) see the plain stream.
    The per-token scale travels with the returned tensor itself: the next layer continues from
    ``(z, c)`` when it gets that very tensor unchanged, else it starts from ``x``."""
    x = hidden_states
    attn, mlp = self.self_attn, self.mlp
    carried = _carried(x)
    if carried is None:
        c = torch.ones(*x.shape[:-1], 1, dtype=torch.promote_types(x.dtype, torch.float32),
                       device=x.device)
        r, c = _branch_scale(x, c)
    else:
        r, c = _branch_scale(*carried)
    normed = _norm(self.input_layernorm, r, c)
    out, _ = _scaled_call(attn.o_proj, c, lambda: attn(normed, *args, **kwargs))
    z = r + out
    r, c = _branch_scale(z, c)
    normed = _norm(self.post_attention_layernorm, r, c)
    z = r + _scaled_call(mlp.down_proj, c, lambda: mlp(normed))
    return _carry(z, c)


class _FinalNorm(nn.Module):
    """The final RMSNorm (same ``weight``): exact on a carried ``(z, c)``, the plain norm on
    any other tensor."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.weight = norm.weight
        self.variance_epsilon = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
        self.fpt_plain_norm = [norm]  # a list: not a registered child (state-dict keys)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        carried = _carried(x)
        if carried is None:
            return self.fpt_plain_norm[0](x)
        return _norm(self, carried[0], carried[1])


def apply_dynamic_residual_scaling(model: Any) -> None:
    """Install S_n on every decoder layer (idempotent, function-preserving). 1/c goes to the
    input of o_proj / down_proj when they are bias-free, else to their output (then those
    inputs are not rescaled)."""
    from icml_fptquant.qlinear import as_fpt_linear

    if getattr(model, "fpt_drs", False):
        return
    layers = model.model.layers
    for i, layer in enumerate(layers):
        as_fpt_linear(layer.self_attn, "o_proj")
        as_fpt_linear(layer.mlp, "down_proj")
        layers[i] = _drs_layer(layer)
    model.model.norm = _FinalNorm(model.model.norm)
    model.fpt_drs = True


_DRS_CLASSES: dict[type, type] = {}


def _drs_layer(layer: nn.Module) -> nn.Module:
    """A new module in place of ``layer``: the same submodules, parameters and attributes, a
    subclass of ``layer``'s class (transformers records ``output_hidden_states`` by the decoder
    layer's class) whose forward is S_n. ``layer`` itself is left as it was
    (``fpt_base_layer``), so :func:`remove_dynamic_residual_scaling` puts it back."""
    cls = type(layer)
    drs = _DRS_CLASSES.get(cls)
    if drs is None:
        drs = _DRS_CLASSES[cls] = type("DRS" + cls.__name__, (cls,), {"forward": _layer_forward})
    new = drs.__new__(drs)
    for key, value in layer.__dict__.items():  # same entries; own (ordered) dicts of them
        new.__dict__[key] = copy.copy(value) if isinstance(value, dict) else value
    new.__dict__["fpt_base_layer"] = [layer]  # a list: not a registered child
    return new


def remove_dynamic_residual_scaling(model: Any) -> None:
    """Undo :func:`apply_dynamic_residual_scaling`: the original decoder layers (with the
    current submodules) and final norm back in place; 1/c scales cleared."""
    if not getattr(model, "fpt_drs", False):
        return
    layers = model.model.layers
    for i, layer in enumerate(layers):
        base = layer.__dict__.get("fpt_base_layer")
        if base:
            orig = base[0]
            orig._modules.update(layer._modules)  # submodules replaced since (FPTLinear ...)
            layers[i] = orig
    if isinstance(model.model.norm, _FinalNorm):
        model.model.norm = model.model.norm.fpt_plain_norm[0]
    model.fpt_drs = False
