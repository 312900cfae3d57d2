"""Real low-bit execution on CPU for a model after :func:`merge_and_quantize`.

* ``w8a8``: int8 weights (per output channel, symmetric) times int8 activations (the static
  per-tensor asymmetric 8-bit range of the simulated path, shifted to signed) with torch's
  int8 GEMM ``torch._int_mm`` (int32 accumulation), rescaled to float. Same integers as the
  simulated path, so outputs agree up to float summation order.
* ``w4a16``: 4-bit weights packed two per byte by
  ``torch.ops.aten._convert_weight_to_int4pack_for_cpu`` and multiplied by
  ``torch._weight_int4pack_mm_for_cpu`` (activations in the model's dtype, bf16 or fp32).
  The per-channel scale is repeated over the kernel's groups, so it is the same function.

The online ops of a linear (dynamic residual scaling, Hadamard, head mix) run before the
kernel as in the simulated path. CPU kernels only: on another device :func:`to_kernels`
raises (torch's CUDA int4 kernel needs another packing).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from icml_fptquant.qlinear import decoder_linears, int_weight_codes


def _online(mod: Any, x: torch.Tensor) -> torch.Tensor:
    from icml_fptquant.qlinear import FPTLinear

    return FPTLinear.online_input(mod, x)


def _int_weights(lin: Any, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer codes and per-row scales of ``lin.fpt_qweight`` (RTN or GPTQ grid)."""
    return int_weight_codes(lin, bits)


class Int8Linear(nn.Module):
    """W8A8 with ``torch._int_mm``: ``y = s_x s_w (X_int8 W_int8^T + (128 - z) colsum(W))``."""

    def __init__(self, lin: Any) -> None:
        super().__init__()
        aq = getattr(lin, "act_quant", None)
        if aq is None or aq.bits != 8 or aq.dynamic or aq.group_dim is not None:
            raise ValueError("w8a8 kernels need static per-tensor 8-bit activations: quantize "
                             "with a_bits=8 (act_dynamic=false)")
        q, scale = _int_weights(lin, 8)
        w8 = q.to(torch.int8)
        self.register_buffer("w_t", w8.T.contiguous())  # (in, out) for _int_mm
        self.register_buffer("colsum", w8.to(torch.int32).sum(1))
        self.register_buffer("w_scale", scale.float())
        self.register_buffer("lo", aq.lo.detach().clone())
        self.register_buffer("hi", aq.hi.detach().clone())
        self.bias = None if lin.bias is None else nn.Parameter(lin.bias.detach().clone(),
                                                               requires_grad=False)
        self.in_features, self.out_features = lin.in_features, lin.out_features
        self.fpt_input_scale = None
        self.fpt_hadamard = getattr(lin, "fpt_hadamard", None)
        self.fpt_head_mix = getattr(lin, "fpt_head_mix", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _online(self, x)
        dt = x.dtype
        # the simulated quantizer's integers (fake_quant_asym), shifted to int8
        lo, hi = self.lo.reshape(()).to(dt), self.hi.reshape(()).to(dt)
        s = ((hi - lo) / 255).clamp_min(1e-12)
        z = torch.round(-lo / s)
        xq = torch.clamp(torch.round(x / s + z), 0, 255) - 128  # as fake_quant_asym
        shape = x.shape
        acc = torch._int_mm(xq.reshape(-1, shape[-1]).to(torch.int8), self.w_t)
        acc = acc + ((128 - z).to(torch.int32) * self.colsum)
        y = acc.to(dt) * (s * self.w_scale.to(dt))
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features)


def _group_size(k: int) -> int:
    for g in (256, 128, 64, 32):
        if k % g == 0:
            return g
    raise ValueError(f"in_features {k} is not a multiple of 32: torch's int4 kernel needs it")


class Int4Linear(nn.Module):
    """W4A16 with torch's packed int4 CPU kernel (two codes per byte)."""

    def __init__(self, lin: Any, dtype: Any) -> None:
        super().__init__()
        if getattr(lin, "act_quant", None) is not None:
            raise ValueError("w4a16 kernels keep activations unquantized: quantize with "
                             "a_bits=16")
        q, scale = _int_weights(lin, 4)
        k = lin.in_features
        self.group = _group_size(k)
        codes = (q + 8).to(torch.int32).contiguous()  # 0..15; the kernel computes (u-8)*s+z
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(
            codes.cpu(), 2))
        sz = torch.stack([scale.float().expand(k // self.group, -1),
                          torch.zeros(k // self.group, scale.numel())], -1)
        self.register_buffer("scales_zeros", sz.to(dtype).contiguous())
        self.bias = None if lin.bias is None else nn.Parameter(
            lin.bias.detach().to(dtype).clone(), requires_grad=False)
        self.in_features, self.out_features = k, lin.out_features
        self.fpt_input_scale = None
        self.fpt_hadamard = getattr(lin, "fpt_hadamard", None)
        self.fpt_head_mix = getattr(lin, "fpt_head_mix", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _online(self, x)
        shape = x.shape
        y = torch._weight_int4pack_mm_for_cpu(
            x.reshape(-1, shape[-1]).to(self.scales_zeros.dtype).contiguous(), self.packed,
            self.group, self.scales_zeros)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features).to(x.dtype)


@torch.no_grad()
def to_kernels(model: Any, kind: str, dtype: Any = None) -> Any:
    """Replace every decoder linear of a quantized model (``merge_and_quantize`` with
    ``w_bits=8, a_bits=8`` for ``w8a8``, ``w_bits=4, a_bits=16`` for ``w4a16``) by its real
    low-bit kernel module, in place. The float weights are dropped. ``dtype`` (e.g.
    ``torch.bfloat16`` for W4A16) casts the rest of the model afterwards; the integer codes
    are taken from the model as it is (quantize in float32, then cast here)."""
    if kind not in ("w8a8", "w4a16"):
        raise ValueError(f"kernel kind {kind!r} unknown: use 'w8a8' or 'w4a16'")
    ref = next(model.parameters())
    if ref.device.type != "cpu":
        raise ValueError("the low-bit kernels here are torch's CPU kernels: move the model to "
                         "the CPU (model.cpu()) first")
    for name, lin in decoder_linears(model).items():
        layer, part, attr = name.split(".")[1], name.split(".")[2], name.split(".")[3]
        parent = getattr(model.model.layers[int(layer)], part)
        new = Int8Linear(lin) if kind == "w8a8" else Int4Linear(lin, dtype or ref.dtype)
        setattr(parent, attr, new)
    if dtype is not None:
        scales = [(m, m.w_scale) for m in model.modules() if isinstance(m, Int8Linear)]
        model.to(dtype)
        for m, w in scales:  # int8 rescaling stays in float32
            m.w_scale = w
    return model


def weight_bytes(model: Any) -> int:
    """Bytes of every distinct parameter and buffer storage (tied weights counted once)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        key = t.untyped_storage().data_ptr()
        if key in seen:
            continue
        seen.add(key)
        total += t.untyped_storage().nbytes()
    return total
