"""Static W/A/KV quantization of a (transformed) model: attach quantizers, calibrate static
ranges on a calibration set, round weights (RTN or GPTQ-style), and merge-and-quantize."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.nn.utils import parametrize

from icml_fptquant.arch import check_supported
from icml_fptquant.config import FPTQuantConfig
from icml_fptquant.qlinear import decoder_linears, linear_at, use_kv_attention
from icml_fptquant.quantizers import (
    ActQuantizer,
    quantize_weight_gptq,
    quantize_weight_nf4,
    quantize_weight_rtn,
)


def as_batches(data: Any, batch_size: int = 4) -> list[torch.Tensor]:
    """Token-id sequences as a list of ``(batch, seq)`` LongTensors; raises on empty data."""
    if isinstance(data, torch.Tensor):
        seqs = [data] if data.dim() == 2 else ([data.unsqueeze(0)] if data.dim() == 1 else [])
        if data.dim() not in (1, 2):
            raise ValueError(f"token ids must be 1-D or 2-D, got shape {tuple(data.shape)}")
    else:
        seqs = [torch.as_tensor(s).reshape(1, -1) if torch.as_tensor(s).dim() == 1
                else torch.as_tensor(s) for s in (data or [])]
    seqs = [s for s in seqs if s.numel() > 0]
    if not seqs:
        raise ValueError("the calibration/evaluation set is empty: pass at least one non-empty "
                         "sequence of token ids, e.g. a (n, seq_len) LongTensor")
    out = []
    for s in seqs:
        out += list(s.long().split(batch_size, dim=0))
    return out


def quantizers(model: Any) -> list[ActQuantizer]:
    return [m for m in model.modules() if isinstance(m, ActQuantizer)]


def attach_quantizers(model: Any, config: FPTQuantConfig, seed: int = 0) -> Any:
    """Give every decoder linear a weight bit width and a static input quantizer, and every
    attention module per-KV-head key/value quantizers (replacing any existing ones)."""
    geo = check_supported(model)
    opts = config.quant  # bit widths validated by QuantOptions (and by each ActQuantizer)
    names = [f"model.{n}" for n in decoder_linears(model)]
    if opts.quantize_lm_head:
        names.append("lm_head")
    for i, qualified in enumerate(names):
        lin = linear_at(model, qualified)
        lin.w_bits = opts.w_bits
        lin.fpt_qweight = None
        lin.fpt_int_exact = opts.int_exact
        lin.act_quant = (ActQuantizer(opts.a_bits, method=opts.act_range, seed=seed + i,
                                      dynamic=opts.act_dynamic, symmetric=True,
                                      clip=opts.act_clip)
                         if opts.a_bits < 16 else None)
    for i, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        for name in ("fpt_k_quant", "fpt_v_quant"):
            q = (ActQuantizer(opts.kv_bits, geo.kv_heads, 1, method=opts.act_range,
                              seed=seed + i, dynamic=opts.act_dynamic, clip=opts.kv_clip)
                 if opts.kv_bits < 16 else None)
            setattr(attn, name, q)
    use_kv_attention(model)
    device = next(model.parameters()).device
    for q in quantizers(model):
        q.to(device)
    return model


@torch.no_grad()
def calibrate(model: Any, calibration_data: Any, batch_size: int = 4,
              observed: dict[str, list[torch.Tensor]] | None = None) -> None:
    """Set every static activation / KV range from the calibration set (min/max or MSE).

    ``observed``: a dict to share what the quantizers observed between models whose observed
    inputs are provably equal. While observing, every quantizer passes its input through
    unchanged, so what it sees depends on the model, its (rounded) weights, the data and the
    quantizers' seeds, but not on ``a_bits``/``kv_bits``: e.g. the same transformed model with
    the same 4-bit weights at W4A4KV4 and at W4A8KV8. An empty dict is filled with the samples
    (by quantizer name); a filled one is used instead of running the calibration set (its
    names must be this model's quantizers). The ranges are then computed for this model's bit
    widths exactly as without it (tested equal)."""
    qs = {n: m for n, m in model.named_modules() if isinstance(m, ActQuantizer)}
    if observed:
        if set(observed) != set(qs):
            raise ValueError("observed holds samples of other quantizers than this model's: "
                             "share it only between models with the same quantizers "
                             "(same architecture, transform and KV quantization on/off)")
        for n, q in qs.items():
            q.start_observing()
            q._samples = list(observed[n])
    else:
        batches = as_batches(calibration_data, batch_size)
        for q in qs.values():
            q.start_observing()
        device = next(model.parameters()).device
        with parametrize.cached():  # transformed weights computed once for all batches
            for b in batches:
                model(b.to(device), use_cache=False)
        if observed is not None:
            observed.update({n: list(q._samples) for n, q in qs.items()})
    for q in qs.values():
        q.finish_observing()


@contextmanager
def quant_disabled(model: Any) -> Iterator[None]:
    """Temporarily run the model in full precision (quantizers off, weights unrounded)."""
    qs = quantizers(model)
    states = [q.state for q in qs]
    lins = [m for m in model.modules() if hasattr(m, "w_bits") and hasattr(m, "fpt_qweight")]
    saved = [(m.w_bits, m.fpt_qweight) for m in lins]
    for q in qs:
        q.state = "off"
    for m in lins:
        m.w_bits, m.fpt_qweight = 16, None
    try:
        yield
    finally:
        for q, s in zip(qs, states):
            q.state = s
        for m, (b, w) in zip(lins, saved):
            m.w_bits, m.fpt_qweight = b, w


def _has_online_ops(mod: Any) -> bool:
    return any(getattr(mod, a, None) is not None
               for a in ("fpt_input_scale", "fpt_hadamard", "fpt_head_mix"))


def _hessian_hooks(lins: dict[str, Any], hs: dict[str, torch.Tensor],
                   shared: dict[str, str] | None = None,
                   dtype: torch.dtype = torch.float64) -> list:
    """Forward pre-hooks adding ``X^T X`` of each linear's input (after its online ops).
    Linears that read the very same input tensor (q/k/v, gate/up) share one product; with
    ``shared`` given, ``shared[name]`` is set to the first linear that read it (the group
    leader, whose GPTQ run the others join)."""
    handles = []
    last: dict[str, Any] = {}

    for name, lin in lins.items():
        def hook(mod: Any, args: tuple, name: str = name) -> None:
            x = args[0]
            plain = not _has_online_ops(mod)
            if plain and last.get("x") is x:
                contrib = last["h"]
                if shared is not None:
                    shared[name] = last["name"]
            else:
                if not plain:
                    x = mod.online_input(x)
                x2 = x.reshape(-1, x.shape[-1]).to(dtype)
                contrib = x2.T @ x2
                if plain:
                    last.update(x=args[0], h=contrib, name=name)
                if shared is not None:
                    shared[name] = name
            hs[name] = hs.get(name, 0) + contrib
        handles.append(lin.register_forward_pre_hook(hook))
    return handles


def _gptq_groups(lins: dict[str, Any], hs: dict[str, torch.Tensor], bits: int, damp: float,
                 shared: dict[str, str] | None = None,
                 dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    """GPTQ of every linear; linears sharing an input (``shared``: name -> leader) run as one
    matrix of stacked rows (GPTQ treats rows independently given ``H``, so this equals
    separate runs up to float summation order, at one Cholesky and one column loop)."""
    groups: dict[str, list[str]] = {}
    for name in lins:
        groups.setdefault((shared or {}).get(name, name), []).append(name)
    out = {}
    for leader, names in groups.items():
        ws = [lins[n].weight.detach() for n in names]
        q = quantize_weight_gptq(torch.cat(ws, 0), hs[leader], bits, damp, dtype=dtype)
        for n, part in zip(names, q.split([w.shape[0] for w in ws], 0)):
            out[n] = part.to(lins[n].weight.dtype).contiguous()
    return out


@torch.no_grad()
def _input_hessians(model: Any, lins: dict[str, Any], batches: list[torch.Tensor],
                    shared: dict[str, str] | None = None,
                    dtype: torch.dtype = torch.float64) -> dict:
    """Every linear's input Hessian from one full-precision pass (the non-sequential variant)."""
    hs: dict[str, torch.Tensor] = {}
    handles = _hessian_hooks(lins, hs, shared, dtype)
    device = next(model.parameters()).device
    try:
        with quant_disabled(model):
            for b in batches:
                model(b.to(device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return hs


def gptq_dtype(config: FPTQuantConfig) -> torch.dtype:
    """The torch dtype of ``config.quant.gptq_dtype`` (float64, or float32 as reference GPTQ)."""
    return getattr(torch, config.quant.gptq_dtype)  # one of QuantOptions' choices


class _Stop(Exception):
    pass


@torch.no_grad()
def _layer_inputs(model: Any, batches: list[torch.Tensor]) -> list[tuple]:
    """``(hidden_states, args, kwargs)`` that the first decoder layer receives for each batch."""
    device = next(model.parameters()).device
    got: list[tuple] = []

    def grab(mod: Any, args: tuple, kwargs: dict) -> None:
        got.append((args[0] if args else kwargs.pop("hidden_states"), args[1:], kwargs))
        raise _Stop

    handle = model.model.layers[0].register_forward_pre_hook(grab, with_kwargs=True)
    try:
        for b in batches:
            try:
                model(b.to(device), use_cache=False)
            except _Stop:
                pass
    finally:
        handle.remove()
    return got


@torch.no_grad()
def gptq_sequential(model: Any, config: FPTQuantConfig, batches: list[torch.Tensor],
                    damp: float = 0.01) -> None:
    """GPTQ as GPTQ does it: layer by layer, each layer's input Hessians collected from the
    outputs of the layers before it *with their weights already quantized* (activations and KV
    in full precision meanwhile); sets every decoder linear's ``fpt_qweight`` (and lm_head's
    with ``quantize_lm_head``, from inputs of the fully weight-quantized decoder)."""
    dtype = gptq_dtype(config)
    inputs = _layer_inputs(model, batches)
    hidden = [h for h, _, _ in inputs]
    all_lins = decoder_linears(model)
    rounded: dict[str, torch.Tensor] = {}
    with quant_disabled(model):
        for i, layer in enumerate(model.model.layers):
            lins = {n: m for n, m in all_lins.items() if n.startswith(f"layers.{i}.")}
            hs: dict[str, torch.Tensor] = {}
            shared: dict[str, str] = {}
            handles = _hessian_hooks(lins, hs, shared, dtype)
            try:
                for k, (_, args, kwargs) in enumerate(inputs):
                    layer(hidden[k], *args, **kwargs)
            finally:
                for h in handles:
                    h.remove()
            for name, q in _gptq_groups(lins, hs, config.quant.w_bits, damp, shared,
                                        dtype).items():
                rounded[name] = q
                lins[name].fpt_qweight = q  # the next layers see this layer quantized
            for k, (_, args, kwargs) in enumerate(inputs):
                out = layer(hidden[k], *args, **kwargs)
                hidden[k] = out[0] if isinstance(out, tuple) else out
    # quant_disabled put back what each linear had on entry: set the rounded weights now
    for name, lin in all_lins.items():
        lin.fpt_qweight = rounded[name]
    if config.quant.quantize_lm_head:
        hs = {}
        handles = _hessian_hooks({"lm_head": model.lm_head}, hs, dtype=dtype)
        qs = quantizers(model)
        states = [q.state for q in qs]
        head = (model.lm_head.w_bits, model.lm_head.fpt_qweight)
        try:
            for q in qs:
                q.state = "off"
            model.lm_head.w_bits, model.lm_head.fpt_qweight = 16, None
            device = next(model.parameters()).device
            for b in batches:
                model(b.to(device), use_cache=False)
        finally:
            for h in handles:
                h.remove()
            for q, st in zip(qs, states):
                q.state = st
            model.lm_head.w_bits, model.lm_head.fpt_qweight = head
        w = model.lm_head.weight.detach()
        model.lm_head.fpt_qweight = quantize_weight_gptq(w, hs["lm_head"], config.quant.w_bits,
                                                         damp, dtype=dtype).to(w.dtype)


@torch.no_grad()
def round_weights(model: Any, config: FPTQuantConfig, calibration_data: Any = None,
                  method: str | None = None) -> None:
    """Freeze the quantized weights: ``rtn``, ``gptq`` (layer-sequential, see
    :func:`gptq_sequential`; ``gptq_sequential=False`` collects every Hessian in one
    full-precision pass instead), ``nf4`` (native NF4) or bitsandbytes' ``bnb_nf4`` /
    ``bnb_int8``."""
    method = method or config.quant.weight_quantizer
    lins = {n: m for n, m in decoder_linears(model).items()}
    if config.quant.quantize_lm_head:
        lins["lm_head"] = model.lm_head
    if method == "gptq" and config.quant.gptq_sequential:
        gptq_sequential(model, config, as_batches(calibration_data))
        return
    if method == "gptq":
        shared: dict[str, str] = {}
        dtype = gptq_dtype(config)
        hs = _input_hessians(model, lins, as_batches(calibration_data), shared, dtype)
        gptq = _gptq_groups(lins, hs, config.quant.w_bits, 0.01, shared, dtype)
    for name, lin in lins.items():
        w = lin.weight.detach()
        if method == "rtn":
            q = quantize_weight_rtn(w, config.quant.w_bits)
        elif method == "gptq":
            q = gptq[name]
        elif method == "nf4":
            q = quantize_weight_nf4(w)
        elif method in ("bnb_nf4", "bnb_int8"):
            from icml_fptquant.peers import bnb_dequantized

            q = bnb_dequantized(w, method[4:])
        else:
            raise ValueError(f"weight method {method!r} unknown: use rtn, gptq, nf4, bnb_nf4 "
                             "or bnb_int8")
        lin.fpt_qweight = q


def quantized_weights(model: Any) -> dict[str, torch.Tensor]:
    """The frozen quantized weights (``fpt_qweight``) of the decoder linears (and lm_head when
    quantized), by name: pass them to :func:`merge_and_quantize` as ``weights`` to reuse them
    for a model with the same transform and ``w_bits`` (e.g. at another activation width:
    GPTQ's Hessians are collected with activations and KV cache in full precision, so they do
    not depend on ``a_bits``/``kv_bits``)."""
    lins = dict(decoder_linears(model))
    lins["lm_head"] = model.lm_head
    return {n: lin.fpt_qweight.detach().clone() for n, lin in lins.items()
            if getattr(lin, "fpt_qweight", None) is not None}


def merge_and_quantize(model: Any, calibration_data: Any,
                       config: FPTQuantConfig | None = None, seed: int = 0,
                       weights: dict[str, torch.Tensor] | None = None,
                       observed: dict[str, list[torch.Tensor]] | None = None) -> Any:
    """Merge every mergeable transform into the weights, then quantize statically: weights per
    output channel (RTN or GPTQ-style), activations per tensor and the KV cache per head with
    ranges from ``calibration_data``. In place; returns the model, which still runs through
    ``generate``. ``weights`` (from :func:`quantized_weights` of an identically transformed
    model at the same ``w_bits``) skips the weight rounding; ``observed`` shares the
    calibration observations (see :func:`calibrate`)."""
    from icml_fptquant.apply import merge_transforms

    cfg = config or getattr(model, "fpt_config", None) or FPTQuantConfig()
    batches = as_batches(calibration_data)
    merge_transforms(model)
    attach_quantizers(model, cfg, seed)
    for q in quantizers(model):
        q.state = "off"
    if weights is None:
        round_weights(model, cfg, batches)
    else:
        lins = dict(decoder_linears(model))
        if cfg.quant.quantize_lm_head:
            lins["lm_head"] = model.lm_head
        if set(weights) != set(lins):
            raise ValueError("weights must hold one tensor per decoder linear (and lm_head with "
                             "quantize_lm_head): pass quantized_weights() of a model quantized "
                             "with the same transform and config")
        for name, lin in lins.items():
            if weights[name].shape != lin.weight.shape:
                raise ValueError(f"weights[{name!r}] has shape {tuple(weights[name].shape)}, "
                                 f"the model's is {tuple(lin.weight.shape)}")
            lin.fpt_qweight = weights[name].to(lin.weight)
    calibrate(model, batches, observed=observed)
    model.fpt_quant_config = cfg
    from icml_fptquant.interop import mark_fpt

    mark_fpt(model, "quantized")
    return model
