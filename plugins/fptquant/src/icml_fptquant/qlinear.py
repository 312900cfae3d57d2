"""Online parts and fake-quantized execution, kept on the transformers modules themselves.

* :class:`FPTLinear` (an ``nn.Linear`` subclass put in place of the model's ``nn.Linear``,
  holding the same parameters, so state-dict keys and ``isinstance`` checks are unchanged;
  the original module object is not modified): optional per-token input scale (dynamic
  residual scaling), online grouped Hadamard, static activation quantizer, weight fake
  quantization.
* KV-cache quantization: a registered transformers attention function that fake-quantizes
  post-RoPE keys and values per KV head before the model's own sdpa/eager attention (named
  by the attention modules' own config copy; the model's config is not written).
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
    fpt_int_exact: bool

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
        if getattr(self, "fpt_int_exact", False) and _int_exact_applies(self, x):
            return int_exact_linear(self, x)
        if self.act_quant is not None:
            x = self.act_quant(x)
        if self.fpt_qweight is not None:
            w = self.fpt_qweight
        elif self.w_bits < 16:
            w = quantize_weight_rtn(self.weight, self.w_bits)
        else:
            w = self.weight
        return F.linear(x, w.to(x.dtype), self.bias)


def int_weight_codes(lin: Any, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer codes (float64) and per-row scales (float64) of ``lin.fpt_qweight`` on the
    symmetric per-output-channel ``bits`` grid (RTN or GPTQ), the scale recomputed from
    ``lin.weight`` as the rounding computed it; raises if the rounded weights are not on it."""
    qw = getattr(lin, "fpt_qweight", None)
    if qw is None:
        raise ValueError("this linear has no rounded weight: run merge_and_quantize with "
                         f"w_bits={bits} first")
    qmax = 2 ** (bits - 1) - 1
    w = lin.weight.detach().double()
    scale = (w.abs().amax(1) / qmax).clamp_min(1e-12)
    q = torch.round(qw.double() / scale[:, None])
    if q.min() < -qmax - 1 or q.max() > qmax or not torch.allclose(
            q * scale[:, None], qw.double(), rtol=1e-5, atol=1e-7 * float(scale.max())):
        raise ValueError(f"the rounded weights are not on a {bits}-bit per-channel grid: "
                         f"quantize with w_bits={bits} and weight_quantizer rtn or gptq")
    return q, scale


def _int_exact_applies(lin: Any, x: torch.Tensor) -> bool:
    aq = lin.act_quant
    return (aq is not None and not aq.dynamic and aq.group_dim is None and aq.state == "quant"
            and aq.bits < 16 and lin.fpt_qweight is not None
            and not (torch.is_grad_enabled() and (x.requires_grad or lin.weight.requires_grad
                                                  and lin.fpt_qweight.requires_grad)))


def _cached_codes(lin: Any) -> tuple[torch.Tensor, torch.Tensor, float]:
    qw = lin.fpt_qweight
    key = (id(qw), qw._version, qw.data_ptr())
    hit = getattr(lin, "_fpt_codes", None)
    if hit is None or hit[0] != key:
        q, scale = int_weight_codes(lin, lin.w_bits)
        hit = (key, q, scale.float(), float(q.abs().sum(1).max()))
        lin._fpt_codes = hit
    return hit[1], hit[2], hit[3]


def int_exact_linear(lin: Any, x: torch.Tensor) -> torch.Tensor:
    """The linear as an integer kernel computes it (:class:`~icml_fptquant.kernels.Int8Linear`
    bit for bit): the activation codes ``clamp(round(x / s + z), 0, 2^b - 1) - z`` of the static
    per-tensor quantizer (the same float ops as :func:`fake_quant_asym`) times the weight's
    integer codes, summed exactly (float32 when every partial sum stays below 2^24, else
    float64; int32 in the kernel), then one rounding to ``x.dtype`` and one multiplication by
    ``s * s_w`` (the kernel's float32 per-row weight scale). The dequantize-then-float-matmul
    path rounds every product and partial sum instead, in the BLAS's order."""
    aq = lin.act_quant
    dt = x.dtype
    levels = 2 ** aq.bits - 1
    lo, hi = aq.lo.reshape(()).to(dt), aq.hi.reshape(()).to(dt)
    s = ((hi - lo) / levels).clamp_min(1e-12)
    z = torch.round(-lo / s)
    q = torch.clamp(torch.round(x / s + z), 0, levels) - z  # exact integers
    codes, w_scale, row_abs = _cached_codes(lin)
    exact32 = float(q.abs().max()) * row_abs < 2 ** 24 if q.numel() else True
    acc_dt = torch.float32 if exact32 else torch.float64
    acc = F.linear(q.to(acc_dt), codes.to(device=x.device, dtype=acc_dt))
    y = acc.to(dt) * (s * w_scale.to(device=x.device, dtype=dt))
    if lin.bias is not None:
        y = y + lin.bias
    return y


def set_int_exact(model: nn.Module, on: bool = True) -> nn.Module:
    """Switch every quantized :class:`FPTLinear` of ``model`` to (or off) the integer-exact
    evaluation of :func:`int_exact_linear` (``QuantOptions.int_exact``); in place."""
    for m in model.modules():
        if isinstance(m, FPTLinear):
            m.fpt_int_exact = bool(on)
            m._fpt_codes = None
    return model


def apply_head_mix(x: torch.Tensor, mix: torch.Tensor) -> torch.Tensor:
    """``(mix kron I_head_dim) x`` on the last dimension (heads * head_dim): mixes heads."""
    h = mix.shape[0]
    shape = x.shape
    y = torch.einsum("...hd,gh->...gd", x.reshape(*shape[:-1], h, shape[-1] // h),
                     mix.to(device=x.device, dtype=x.dtype))
    return y.reshape(shape)


def as_fpt_linear(parent: nn.Module, name: str) -> FPTLinear:
    """The :class:`FPTLinear` at ``parent.<name>``: a plain ``nn.Linear`` there is replaced by a
    new :class:`FPTLinear` holding the *same* weight and bias parameters (so state-dict keys,
    optimizers and tied parameters are unchanged, and the original module object is left as
    it was); an :class:`FPTLinear` is returned as is. :func:`plain_linears` reverses it."""
    lin = getattr(parent, name)
    if isinstance(lin, FPTLinear):
        return lin
    if type(lin) is not nn.Linear:
        raise ValueError(f"expected a plain nn.Linear, got {type(lin).__name__}: quantized or "
                         "parametrized checkpoints are not supported, load the FP model")
    new = FPTLinear.__new__(FPTLinear)
    nn.Module.__init__(new)
    new.in_features, new.out_features = lin.in_features, lin.out_features
    new.weight = lin.weight
    new.bias = lin.bias
    new.train(lin.training)
    for hooks in ("_forward_pre_hooks", "_forward_hooks"):  # a user's hooks keep working
        getattr(new, hooks).update(getattr(lin, hooks))
    new.fpt_input_scale = None
    new.fpt_hadamard = None
    new.fpt_head_mix = None
    new.act_quant = None
    new.w_bits = 16
    new.fpt_qweight = None
    new.fpt_int_exact = False
    setattr(parent, name, new)
    return new


def linear_at(model: nn.Module, qualified: str) -> FPTLinear:
    """:func:`as_fpt_linear` by qualified name (``model.layers.0.self_attn.q_proj``)."""
    parent, _, name = qualified.rpartition(".")
    return as_fpt_linear(model.get_submodule(parent) if parent else model, name)


def plain_linears(model: nn.Module) -> nn.Module:
    """Replace every :class:`FPTLinear` (not parametrized) by a plain
    ``nn.Linear`` holding the same parameters (online ops and quantizers dropped: only
    meaningful where they are off or folded, see :func:`icml_fptquant.interop.unwrap`)."""
    for qualified, mod in list(model.named_modules()):
        if type(mod) is FPTLinear:
            parent, _, name = qualified.rpartition(".")
            lin = nn.Linear.__new__(nn.Linear)
            nn.Module.__init__(lin)
            lin.in_features, lin.out_features = mod.in_features, mod.out_features
            lin.weight, lin.bias = mod.weight, mod.bias
            lin.train(mod.training)
            setattr(model.get_submodule(parent) if parent else model, name, lin)
    return model


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
    for name in decoder_linears(model):
        linear_at(model.model, name)
    as_fpt_linear(model, "lm_head")


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
    """Route the model's attention through the KV-quantizing function. The model's own config
    is not written: the attention modules get one shared copy of it whose
    ``_attn_implementation`` names the registered function (``fptq_sdpa`` / ``fptq_eager``);
    :func:`plain_attention` gives them the model's config back."""
    import copy

    register_kv_attention()
    kv_cfg = None
    for layer in model.model.layers:
        attn = layer.self_attn
        impl = attn.config._attn_implementation or "sdpa"
        if impl.startswith(KV_PREFIX):
            continue
        if kv_cfg is None:
            kv_cfg = copy.copy(attn.config)
            kv_cfg._attn_implementation = KV_PREFIX + ("eager" if impl == "eager" else "sdpa")
        attn.config = kv_cfg


def plain_attention(model: Any) -> None:
    """Undo :func:`use_kv_attention`: every attention module reads the model's config again."""
    for layer in model.model.layers:
        layer.self_attn.config = model.config
