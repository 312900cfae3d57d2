"""Online parts and fake-quantized execution, kept on the transformers modules themselves.

* :class:`FPTLinear` (an ``nn.Linear`` subclass swapped in place, so state-dict keys and
  ``isinstance`` checks are unchanged): optional per-token input scale (dynamic residual
  scaling), online grouped Hadamard, static activation quantizer, weight fake quantization.
* KV-cache quantization: a registered transformers attention function that fake-quantizes
  post-RoPE keys and values per KV head before the model's own sdpa/eager attention.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from icml_fptquant.hadamard import apply_grouped
from icml_fptquant.quantizers import ActQuantizer, quantize_weight_rtn

KV_PREFIX = "fptq_"


class FPTLinear(nn.Linear):
    """``nn.Linear`` with FPTQuant's online input ops and fake quantization."""

    fpt_input_scale: torch.Tensor | None
    fpt_hadamard: torch.Tensor | None
    fpt_head_mix: torch.Tensor | None
    act_quant: ActQuantizer | None
    w_bits: int
    fpt_qweight: torch.Tensor | None

    def online_input(self, x: torch.Tensor) -> torch.Tensor:
        """The online (not mergeable) ops on the input, before quantization."""
        if self.fpt_input_scale is not None:
            x = x * self.fpt_input_scale.to(x.dtype)
        if self.fpt_hadamard is not None:
            x = apply_grouped(x, self.fpt_hadamard)
        if getattr(self, "fpt_head_mix", None) is not None:
            x = apply_head_mix(x, self.fpt_head_mix)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.online_input(x)
        if self.act_quant is not None:
            x = self.act_quant(x)
        if self.fpt_qweight is not None:
            w = self.fpt_qweight
        elif self.w_bits < 16:
            w = quantize_weight_rtn(self.weight, self.w_bits)
        else:
            w = self.weight
        return F.linear(x, w.to(x.dtype), self.bias)


def apply_head_mix(x: torch.Tensor, mix: torch.Tensor) -> torch.Tensor:
    """``(mix kron I_head_dim) x`` on the last dimension (heads * head_dim): mixes heads."""
    h = mix.shape[0]
    shape = x.shape
    y = torch.einsum("...hd,gh->...gd", x.reshape(*shape[:-1], h, shape[-1] // h),
                     mix.to(device=x.device, dtype=x.dtype))
    return y.reshape(shape)


def as_fpt_linear(lin: nn.Linear) -> FPTLinear:
    """Turn ``lin`` into an :class:`FPTLinear` in place (no-op if it already is one)."""
    if isinstance(lin, FPTLinear):
        return lin
    if type(lin) is not nn.Linear:
        raise ValueError(f"expected a plain nn.Linear, got {type(lin).__name__}: quantized or "
                         "parametrized checkpoints are not supported, load the FP model")
    lin.__class__ = FPTLinear
    lin.fpt_input_scale = None
    lin.fpt_hadamard = None
    lin.fpt_head_mix = None
    lin.act_quant = None
    lin.w_bits = 16
    lin.fpt_qweight = None
    return lin


def decoder_linears(model: Any) -> dict[str, nn.Linear]:
    """Every linear of the decoder layers, by qualified name."""
    out = {}
    for i, layer in enumerate(model.model.layers):
        for part, names in (("self_attn", ("q_proj", "k_proj", "v_proj", "o_proj")),
                            ("mlp", ("gate_proj", "up_proj", "down_proj"))):
            for n in names:
                out[f"layers.{i}.{part}.{n}"] = getattr(getattr(layer, part), n)
    return out


def wrap_all(model: Any) -> None:
    for lin in decoder_linears(model).values():
        as_fpt_linear(lin)
    as_fpt_linear(model.lm_head)


_REGISTERED = False


def _make_attention(base: str):  # noqa: ANN202
    def attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                  value: torch.Tensor, attention_mask: Any, **kwargs: Any) -> Any:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        had = getattr(module, "fpt_qk_hadamard", None)
        if had is not None:  # QuaRot R3: scores unchanged, keys rotated before quantization
            query, key = apply_grouped(query, had), apply_grouped(key, had)
        kq = getattr(module, "fpt_k_quant", None)
        vq = getattr(module, "fpt_v_quant", None)
        if kq is not None:
            key = kq(key)
        if vq is not None:
            value = vq(value)
        if base == "eager":
            from transformers.models.llama.modeling_llama import eager_attention_forward

            fn = eager_attention_forward
        else:
            fn = ALL_ATTENTION_FUNCTIONS[base]
        return fn(module, query, key, value, attention_mask, **kwargs)

    return attention


def register_kv_attention() -> None:
    """Register ``fptq_sdpa`` and ``fptq_eager`` with transformers (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

    for base, mask in (("sdpa", sdpa_mask), ("eager", eager_mask)):
        AttentionInterface.register(KV_PREFIX + base, _make_attention(base))
        AttentionMaskInterface.register(KV_PREFIX + base, mask)
    _REGISTERED = True


def use_kv_attention(model: Any) -> None:
    """Route the model's attention through the KV-quantizing function."""
    register_kv_attention()
    impl = model.config._attn_implementation or "sdpa"
    if not impl.startswith(KV_PREFIX):
        base = "eager" if impl == "eager" else "sdpa"
        model.config._attn_implementation = KV_PREFIX + base
