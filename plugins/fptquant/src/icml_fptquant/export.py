"""Save a merged and quantized model (weights already on the quantization grid, stored
dequantized in ``fptquant.safetensors``) with ``fptquant.json`` (static ranges and the online
parts), and load it back with :func:`load_quantized` so it runs through ``generate`` again.

The folder is deliberately *not* loadable by plain ``from_pretrained``: without the online
Hadamards, residual scaling and quantizers those weights compute a different function, so the
weights file does not carry a name transformers looks for (it raises ``OSError``), and
``config.json`` records ``quantization_config.quant_method = "fptquant"`` with the loader."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch

from icml_fptquant.config import FPTQuantConfig

META = "fptquant.json"
WEIGHTS = "fptquant.safetensors"
MAPS = "fptquant-maps.safetensors"
LOADER = "icml_fptquant.load_quantized"


def _linears(model: Any) -> dict[str, Any]:
    from icml_fptquant.qlinear import decoder_linears

    out = {f"model.{k}": v for k, v in decoder_linears(model).items()}
    out["lm_head"] = model.lm_head
    return out


def save_quantized(model: Any, path: str | Path, tokenizer: Any = None) -> Path:
    """Write ``model`` (after :func:`merge_and_quantize`) to the folder ``path``."""
    from torch.nn.utils import parametrize
    from transformers import AutoModelForCausalLM

    cfg = getattr(model, "fpt_quant_config", None)
    if cfg is None:
        raise ValueError("this model is not quantized: call merge_and_quantize(model, "
                         "calibration_data, config) before save_quantized")
    if any(parametrize.is_parametrized(m) for m in model.modules()):
        raise ValueError("the model still has unmerged transforms: call merge_and_quantize")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    lins = _linears(model)
    meta: dict[str, Any] = {"format": 3, "config": cfg.sections(),
                            "dynamic_residual_scaling": bool(getattr(model, "fpt_drs", False)),
                            "qk_hadamard": getattr(model.model.layers[0].self_attn,
                                                   "fpt_qk_hadamard", None) is not None,
                            "hadamard": [], "act": {}, "kv": {},
                            "head_bases": bool(getattr(model, "fpt_head_bases", False))}
    state = {}
    qweights = {f"{n}.weight": lin.fpt_qweight for n, lin in lins.items()
                if getattr(lin, "fpt_qweight", None) is not None}
    for key, value in model.state_dict().items():
        if ".act_quant." in key or ".fpt_k_quant." in key or ".fpt_v_quant." in key:
            continue
        state[key] = qweights.get(key, value).detach().clone()
    meta["head_mix"] = {}
    for name, lin in lins.items():
        if getattr(lin, "fpt_hadamard", None) is not None:
            meta["hadamard"].append(name)
        if getattr(lin, "fpt_head_mix", None) is not None:
            meta["head_mix"][name] = lin.fpt_head_mix.double().tolist()
        q = getattr(lin, "act_quant", None)
        if q is not None:
            meta["act"][name] = {"bits": q.bits, "lo": q.lo.tolist(), "hi": q.hi.tolist()}
    for i, layer in enumerate(model.model.layers):
        for kind in ("k", "v"):
            q = getattr(layer.self_attn, f"fpt_{kind}_quant", None)
            if q is not None:
                meta["kv"][f"{i}.{kind}"] = {"bits": q.bits, "lo": q.lo.tolist(),
                                             "hi": q.hi.tolist()}
    config = copy.deepcopy(model.config)
    config._attn_implementation = "sdpa"
    plain = AutoModelForCausalLM.from_config(config).to(next(model.parameters()).dtype)
    plain.load_state_dict(state, strict=True)  # checks the keys are the plain model's
    from safetensors.torch import save_file

    save_file({k: v.detach().clone().contiguous() for k, v in plain.state_dict().items()},
              str(out / WEIGHTS),
              metadata={"format": "pt", "fptquant": "1"})
    config.quantization_config = {"quant_method": "fptquant", "load_with": LOADER,
                                  "w_bits": cfg.quant.w_bits, "a_bits": cfg.quant.a_bits,
                                  "kv_bits": cfg.quant.kv_bits}
    config.save_pretrained(out)
    for stale in ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json"):
        (out / stale).unlink(missing_ok=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    maps = {}
    if getattr(model, "fpt_rotation", None) is not None:
        maps["rotation"] = model.fpt_rotation
    for name, g in (getattr(model, "fpt_norm_gains", None) or {}).items():
        maps[f"gain.{name}"] = g
    (out / MAPS).unlink(missing_ok=True)
    if maps:  # the residual rotation and folded norm gains: the icml.compose maps, unwrap()
        save_file({k: v.detach().cpu().clone().contiguous() for k, v in maps.items()},
                  str(out / MAPS))
    (out / META).write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return out


def load_quantized(path: str | Path, device: Any = "cpu") -> tuple[Any, Any]:
    """Load a folder written by :func:`save_quantized`; returns ``(model, tokenizer or None)``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from icml_fptquant.qlinear import linear_at
    from icml_fptquant.quantize import attach_quantizers
    from icml_fptquant.residual_scaling import apply_dynamic_residual_scaling
    from icml_fptquant.transforms import hadamard_block

    folder = Path(path)
    if not (folder / META).is_file():
        raise ValueError(f"{str(folder)!r} has no {META}: pass a folder written by "
                         "save_quantized")
    meta = json.loads((folder / META).read_text(encoding="utf-8"))
    if not (folder / WEIGHTS).is_file():
        raise ValueError(f"{str(folder)!r} has no {WEIGHTS}: it was written by an older "
                         "icml-fptquant (< 0.2); save it again with save_quantized")
    from safetensors.torch import load_file
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    state = load_file(str(folder / WEIGHTS))
    dtype = next(iter(state.values())).dtype
    model = AutoModelForCausalLM.from_config(config).to(dtype)
    model.load_state_dict(state, strict=True)
    model = model.to(device).eval()
    try:
        tok = AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError):
        tok = None
    cfg = FPTQuantConfig.from_sections(meta["config"])  # format 2: flat keys
    if meta["dynamic_residual_scaling"]:
        apply_dynamic_residual_scaling(model)
    attach_quantizers(model, cfg)
    if meta.get("qk_hadamard"):
        from icml_fptquant.apply import install_qk_hadamard
        from icml_fptquant.arch import check_supported

        install_qk_hadamard(model, check_supported(model).head_dim)
    dtype = next(model.parameters()).dtype
    for name in meta["hadamard"]:
        lin = linear_at(model, name)
        lin.fpt_hadamard = hadamard_block(lin.in_features, dtype, device)
    for name, mix in meta.get("head_mix", {}).items():
        lin = linear_at(model, name)
        lin.fpt_head_mix = torch.tensor(mix, dtype=dtype, device=device)
    lins = _linears(model)
    for name, lin in lins.items():
        if hasattr(lin, "w_bits"):
            lin.w_bits = 16  # stored weights are already on the quantization grid
        entry = meta["act"].get(name)
        if entry is None:
            if hasattr(lin, "act_quant"):
                lin.act_quant = None
            continue
        lin.act_quant.lo.copy_(torch.tensor(entry["lo"]))
        lin.act_quant.hi.copy_(torch.tensor(entry["hi"]))
        lin.act_quant.state = "quant"
    for i, layer in enumerate(model.model.layers):
        for kind in ("k", "v"):
            entry = meta["kv"].get(f"{i}.{kind}")
            q = getattr(layer.self_attn, f"fpt_{kind}_quant")
            if entry is None:
                setattr(layer.self_attn, f"fpt_{kind}_quant", None)
                continue
            q.lo.copy_(torch.tensor(entry["lo"]))
            q.hi.copy_(torch.tensor(entry["hi"]))
            q.state = "quant"
    model.fpt_quant_config = cfg
    # folders written before the flag existed: re-parametrised heads unless both were off
    if meta.get("head_bases", cfg.transforms.prerope or cfg.transforms.value):
        model.fpt_head_bases = True
    if (folder / MAPS).is_file():
        maps = load_file(str(folder / MAPS), device=str(device))
        if "rotation" in maps:
            model.fpt_rotation = maps.pop("rotation")
        model.fpt_norm_gains = {k[len("gain."):]: v for k, v in maps.items()
                                if k.startswith("gain.")}
    from icml_fptquant.interop import mark_fpt

    mark_fpt(model, "quantized")
    return model, tok
