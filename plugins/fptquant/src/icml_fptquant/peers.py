"""Adapters to bitsandbytes (optional, ``pip install bitsandbytes``): its NF4 and int8
(row-wise absmax, LLM.int8 without the outlier decomposition) weight-only quantization, applied
to the decoder linears as dequantized weights so every arm runs through the same model code."""

from __future__ import annotations

from typing import Any

import torch


def have_bitsandbytes() -> bool:
    try:
        import bitsandbytes  # noqa: F401
    except Exception:  # noqa: BLE001 -- a broken install is as good as none
        return False
    return True


def _bnb() -> Any:
    if not have_bitsandbytes():
        raise ImportError("the bnb_nf4 / bnb_int8 arms need bitsandbytes: pip install "
                          "'icml-fptquant[bench]' or pip install bitsandbytes")
    import bitsandbytes.functional as bnbf

    return bnbf


@torch.no_grad()
def bnb_dequantized(w: torch.Tensor, kind: str, blocksize: int = 64) -> torch.Tensor:
    """``w`` quantized by bitsandbytes (``nf4`` or ``int8``) and dequantized again."""
    bnbf = _bnb()
    w32 = w.detach().float().cpu().contiguous()
    if kind == "nf4":
        q, state = bnbf.quantize_4bit(w32, blocksize=blocksize, quant_type="nf4")
        out = bnbf.dequantize_4bit(q, state)
    elif kind == "int8":
        q, scale, _ = bnbf.int8_vectorwise_quant(w32)
        out = q.float() * (scale.float().unsqueeze(1) / 127.0)
    else:
        raise ValueError(f"bitsandbytes kind {kind!r} unknown: use 'nf4' or 'int8'")
    return out.to(dtype=w.dtype, device=w.device)
