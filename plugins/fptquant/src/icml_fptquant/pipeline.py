"""The comparison job shared by the hooks and the benchmark: build (or load) a model, inject
outliers, quantize it with every arm, and measure perplexity / KL / logit error / size."""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

import torch

from icml_fptquant.config import QuantizeConfig

ARM_LABELS = {"fp": "FP", "rtn": "RTN", "smoothquant": "SmoothQuant-style",
              "quarot": "QuaRot-style (dynamic)",
              "quarot_static": "QuaRot-style (static)", "fptquant_local": "FPTQuant-local",
              "fptquant_e2e": "FPTQuant-end-to-end", "nf4": "NF4 weight-only",
              "bnb_nf4": "bitsandbytes NF4 (W only)", "bnb_int8": "bitsandbytes int8 (W only)"}


def load_input_model(spec: str, device: Any, dtype: Any) -> tuple[Any, Any]:
    """``icml.compose.load_model``: a packaged name, a local HF folder or a previous run folder;
    a model that is already quantized is refused (quantize the full-precision one)."""
    from icml import ConfigError, compose

    model, tok = compose.load_model(spec, device=device, dtype=dtype)
    done = [t for t in compose.transforms(model) if t.quantized]
    if done:
        raise ConfigError(f"model={spec!r} is already quantized ({done[0].label()}): pass the "
                          "full-precision model (its base, or an unwrapped/merged folder)")
    return model, tok


def build_model(cfg: QuantizeConfig, device: Any, dtype: Any, seed: int = 0,
                progress: Any = None) -> dict[str, Any]:
    """Model + tokenizer + (train, calib, eval) token chunks; trains the tiny model."""
    from icml.models import byte_tokenizer, tiny_causal_lm
    from icml_fptquant.data import pretrain, split_data, token_chunks, training_text

    if cfg.model:
        model, tok = load_input_model(cfg.model, device, dtype)
    else:
        tok = byte_tokenizer()
        model = tiny_causal_lm(cfg.arch, seed=seed, device=device, hidden_size=cfg.hidden_size,
                               num_layers=cfg.num_layers, num_heads=cfg.num_heads,
                               num_kv_heads=cfg.num_kv_heads, vocab_size=len(tok),
                               max_positions=max(512, cfg.seq_len))
    chunks = token_chunks(training_text(), tok, cfg.seq_len)
    train, calib, evaluation = split_data(chunks, cfg.calib_samples, cfg.eval_samples, seed)
    losses = []
    if not cfg.model:
        model = model.float()
        losses = pretrain(model, train, cfg.train_steps, cfg.train_lr, seed=seed,
                          progress=progress)
        model = model.to(dtype)
    return {"model": model.eval(), "tokenizer": tok, "train": train, "calib": calib,
            "eval": evaluation, "pretrain_losses": losses}


def model_bytes(model: Any, w_bits: int, weight_only: str = "") -> int:
    """Storage of the quantized model: decoder linears at ``w_bits`` plus an fp16 scale per
    output channel (NF4: 4 bits + a scale per 64-block; int8: 8 bits + a scale per row),
    everything else at 16 bits."""
    from icml_fptquant.qlinear import decoder_linears

    lin_ids = set()
    total = 0
    for lin in decoder_linears(model).values():
        lin_ids.add(id(lin.weight))
        n = lin.weight.numel()
        if weight_only in ("nf4", "bnb_nf4"):
            total += n // 2 + 2 * (n // 64)
        elif weight_only == "bnb_int8":
            total += n + 2 * lin.weight.shape[0]
        elif w_bits >= 16:
            total += 2 * n
        else:
            total += (n * w_bits + 7) // 8 + 2 * lin.weight.shape[0]
        if lin.bias is not None:
            total += 2 * lin.bias.numel()
    seen = set()
    for p in model.parameters():
        if id(p) in seen or id(p) in lin_ids:
            continue
        seen.add(id(p))
        if not any(p is lin.bias for lin in decoder_linears(model).values()):
            total += 2 * p.numel()
    return total


def run_arms(cfg: QuantizeConfig, base: dict[str, Any], seed: int = 0,
             progress: Any = None, log: Any = None, keep: tuple[str, ...] = (),
             on_arm: Any = None) -> dict[str, Any]:
    """Quantize copies of ``base["model"]`` with every arm of ``cfg.arms``; returns rows of
    metrics, the training histories and the quantized models of the arms named in ``keep``.
    ``on_arm(name, row)`` is called as each arm finishes (its ``rtn_gap_closed`` is only known
    at the end, so it is absent there)."""
    from icml_fptquant.apply import apply_fpt_transforms
    from icml_fptquant.baselines import apply_quarot, apply_smoothquant
    from icml_fptquant.evaluation import compare_logits, logits_of, perplexity
    from icml_fptquant.outliers import inject_outliers
    from icml_fptquant.quantize import merge_and_quantize, round_weights
    from icml_fptquant.training import max_abs_weight, optimize_e2e, optimize_local, outlier_norm

    fp = base["model"]
    inject_outliers(fp, cfg.outlier_strength, seed=seed, sites=cfg.outlier_sites)
    calib, evaluation = base["calib"], base["eval"]
    ref = logits_of(fp, evaluation)
    ppl_fp = perplexity(fp, evaluation)
    rows: dict[str, dict[str, float]] = {}
    hist: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    local_state = None
    t_local = 0.0

    def finish(name: str, model: Any, t0: float, weight_only: str = "") -> None:
        if name in keep:
            kept[name] = model
        m = compare_logits(model, evaluation, ref)
        rows[name] = {"ppl": perplexity(model, evaluation), **m,
                      "bytes": float(model_bytes(model, cfg.quant.w_bits, weight_only)),
                      "seconds": time.perf_counter() - t0}
        if log:
            log(f"{ARM_LABELS[name]}: ppl {rows[name]['ppl']:.3f}, KL {rows[name]['kl']:.4f}")
        if on_arm:
            on_arm(name, rows[name])

    for arm in cfg.arms:
        t0 = time.perf_counter()
        if arm == "fp":
            rows["fp"] = {"ppl": ppl_fp, "kl": 0.0, "max_logit_err": 0.0,
                          "bytes": float(model_bytes(fp, 16)), "seconds": 0.0}
            if on_arm:
                on_arm("fp", rows["fp"])
            continue
        model = copy.deepcopy(fp)
        if arm == "rtn":
            merge_and_quantize(model, calib, cfg, seed)
        elif arm in ("nf4", "bnb_nf4", "bnb_int8"):
            wcfg = dataclasses.replace(cfg, quant=dataclasses.replace(cfg.quant, a_bits=16,
                                                                      kv_bits=16))
            merge_and_quantize(model, calib, wcfg, seed)
            round_weights(model, wcfg, method=arm)
            finish(arm, model, t0, weight_only=arm)
            continue
        elif arm == "smoothquant":
            apply_smoothquant(model, calib, cfg.smoothquant_alpha)
            merge_and_quantize(model, calib, cfg, seed)
        elif arm in ("quarot", "quarot_static"):
            dynamic = arm == "quarot"
            apply_quarot(model, cfg, seed, dynamic=dynamic)
            merge_and_quantize(model, calib, dataclasses.replace(
                cfg, quant=dataclasses.replace(cfg.quant, act_dynamic=dynamic)), seed)
        elif arm in ("fptquant_local", "fptquant_e2e"):
            apply_fpt_transforms(model, cfg, seed)
            reused = local_state is not None
            if not reused:
                with torch.no_grad():
                    before = (float(outlier_norm(model, cfg.training.local_p)),
                              max_abs_weight(model))
                hist["local_loss"] = optimize_local(model, cfg, progress)
                with torch.no_grad():
                    after = (float(outlier_norm(model, cfg.training.local_p)),
                              max_abs_weight(model))
                hist["outlier_norm_before_after"] = [before[0], after[0]]
                hist["max_abs_weight_before_after"] = [before[1], after[1]]
                local_state = copy.deepcopy(model.fpt_transforms.state_dict())
                t_local = time.perf_counter() - t0
            else:
                model.fpt_transforms.load_state_dict(local_state)
            t_arm = t0 - t_local if reused else t0  # an arm's time includes the local stage
            if arm == "fptquant_e2e":
                h = optimize_e2e(model, calib, cfg, seed, progress)
                hist["e2e_loss"] = h["loss"]
                hist["value_cond"] = h["value_cond"]
            merge_and_quantize(model, calib, cfg, seed)
            finish(arm, model, t_arm)
            continue
        finish(arm, model, t0)
    for r in rows.values():
        gap = rows.get("rtn", {}).get("ppl", float("nan")) - ppl_fp
        r["rtn_gap_closed"] = (rows["rtn"]["ppl"] - r["ppl"]) / gap if "rtn" in rows and gap > 0 \
            else float("nan")
    return {"rows": rows, "history": hist, "models": kept}


def _num(v: float) -> Any:
    return "" if v != v else round(v, 3)  # NaN -> empty cell


def arm_table_rows(rows: dict[str, dict[str, float]]) -> list[list[Any]]:
    fp_bytes = rows.get("fp", {}).get("bytes")
    out = []
    for name, r in rows.items():
        out.append([ARM_LABELS[name], round(r["ppl"], 3), round(r["kl"], 4),
                    round(r["max_logit_err"], 3), _num(r["rtn_gap_closed"]),
                    int(r["bytes"]), round(r["bytes"] / fp_bytes, 3) if fp_bytes else "",
                    round(r["seconds"], 2)])
    return out


ARM_COLUMNS = ["arm", "perplexity", "KL to FP", "max |dlogit|", "RTN gap closed", "bytes",
               "size vs FP16", "quantize s"]
