"""The default jobs behind the hooks: build (or load) a model, quantize it with every arm,
record each arm as it finishes, and save the FPTQuant model for other plugins."""

from __future__ import annotations

from typing import Any

import icml
from icml_fptquant.config import EvaluateConfig, QuantizeConfig, TrainConfig


def _setup(ctx: icml.RunContext, config: QuantizeConfig) -> dict[str, Any]:
    from icml_fptquant.pipeline import build_model

    with ctx.step("building model"):
        return build_model(config, ctx.torch_device(), ctx.torch_dtype(), ctx.seed,
                           progress=ctx.progress)


def arm_result(ctx: icml.RunContext, config: QuantizeConfig, title: str,
               save: bool = False, produce: bool = True) -> icml.RunResult:
    """Run the arms (each recorded as it finishes); ``save``: also ``<run>/quantized``;
    ``produce``: save the first FPTQuant arm's model to ``<run>/model`` (icml.compose)."""
    from icml.report import bar_plot, line_plot
    from icml_fptquant.pipeline import ARM_COLUMNS, ARM_LABELS, arm_table_rows, run_arms

    base = _setup(ctx, config)
    keep = tuple(a for a in ("fptquant_e2e", "fptquant_local")
                 if a in config.arms and produce)[:1]
    bits = f"W{config.quant.w_bits}A{config.quant.a_bits}KV{config.quant.kv_bits}"
    done: dict[str, dict[str, float]] = {}

    def on_arm(name: str, row: dict[str, float]) -> None:  # partial results, arm by arm
        done[name] = {**row, "rtn_gap_closed": float("nan")}
        ctx.record({f"{name}.{k}": float(row[k]) for k in ("ppl", "kl", "max_logit_err",
                                                             "bytes")})
        ctx.record_table(icml.Table(f"{title} ({bits}; finished arms)", ARM_COLUMNS,
                                    arm_table_rows(done)))

    res = run_arms(config, base, ctx.seed, ctx.progress, ctx.logger.info, keep=keep,
                   on_arm=on_arm)
    rows, hist = res["rows"], res["history"]
    metrics: dict[str, float] = {}
    for name, r in rows.items():
        for k in ("ppl", "kl", "max_logit_err", "rtn_gap_closed", "bytes"):
            # a diverged arm reports nan; rtn_gap_closed is nan only when undefined (no RTN arm)
            if k != "rtn_gap_closed" or r[k] == r[k]:
                metrics[f"{name}.{k}"] = float(r[k])
    for k in ("outlier_norm_before_after", "max_abs_weight_before_after"):
        if k in hist:
            metrics[f"local.{k.replace('_before_after', '')}_before"] = hist[k][0]
            metrics[f"local.{k.replace('_before_after', '')}_after"] = hist[k][1]
    if hist.get("value_cond"):
        metrics["e2e.max_value_condition_number"] = max(hist["value_cond"])
    artifacts = {}
    p = bar_plot(ctx.path("perplexity.png"), {ARM_LABELS[n]: r["ppl"] for n, r in rows.items()},
                 title=f"{title}: perplexity", ylabel="perplexity", logy=True)
    if p:
        artifacts["perplexity"] = "perplexity.png"
    series = {}
    if hist.get("local_loss"):
        series["local outlier norm"] = (range(len(hist["local_loss"])), hist["local_loss"])
    if hist.get("e2e_loss"):
        series["end-to-end loss"] = (range(len(hist["e2e_loss"])), hist["e2e_loss"])
    if series:
        p = line_plot(ctx.path("training.png"), series, title="transform training",
                      xlabel="step", logy=True)
        if p:
            artifacts["training"] = "training.png"
    for name, model in res.get("models", {}).items():
        from icml_fptquant.export import save_quantized
        from icml_fptquant.interop import save_fpt_model

        if save:
            save_quantized(model, ctx.path("quantized"), base["tokenizer"])
            artifacts["quantized model"] = "quantized"
        save_fpt_model(ctx.out_dir, model, base["tokenizer"],
                       base=config.model or f"tiny-{config.arch}")
        artifacts["model"] = "model"  # icml.compose.load_model(<this run folder>)
        ctx.logger.info("saved the %s model to %s", ARM_LABELS[name], ctx.path("model"))
    notes = (f"Static {bits} (weights per channel {config.quant.weight_quantizer.upper()}, "
             f"activations per tensor, KV per head, {config.quant.act_range} ranges from "
             f"{config.calib_samples} calibration sequences); outliers injected with strength "
             f"{config.outlier_strength} at {', '.join(config.outlier_sites)}. Quantization is "
             "simulated (fake-quant); sizes are the packed storage the bit widths imply. "
             "'RTN gap closed' = (ppl_RTN - ppl_arm) / (ppl_RTN - ppl_FP).")
    return icml.RunResult(metrics=metrics,
                          tables=[icml.Table(f"{title} ({bits})", ARM_COLUMNS,
                                             arm_table_rows(rows))],
                          artifacts=artifacts, notes=notes)


def quantize_job(ctx: icml.RunContext, config: QuantizeConfig) -> icml.RunResult:
    """Every arm of ``config.arms`` on the (tiny or given) model; saves the FPTQuant model."""
    return arm_result(ctx, config, "Quantization arms")


def train_job(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    """Transform training; saves ``<run>/quantized`` (save_quantized) and ``<run>/model``."""
    return arm_result(ctx, config, "FPTQuant transform training", save=True)


def evaluate_job(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    """Perplexity and KL of a few arms, or the perplexity of a saved quantized model."""
    if not config.quantized:
        return arm_result(ctx, config, "Evaluation", produce=False)
    from icml_fptquant.data import split_data, token_chunks, training_text
    from icml_fptquant.evaluation import perplexity
    from icml_fptquant.export import load_quantized

    model, tok = load_quantized(config.quantized, device=ctx.torch_device())
    if tok is None:
        raise icml.ConfigError(f"{config.quantized!r} has no tokenizer: save it with "
                         "save_quantized(model, folder, tokenizer)")
    chunks = token_chunks(training_text(), tok, config.seq_len)
    _, _, evaluation = split_data(chunks, config.calib_samples, config.eval_samples, ctx.seed)
    ppl = perplexity(model, evaluation)
    return icml.RunResult(metrics={"ppl": ppl},
                          tables=[icml.Table("Saved quantized model", ["folder", "perplexity"],
                                             [[config.quantized, round(ppl, 3)]])])
