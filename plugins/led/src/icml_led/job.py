"""The default jobs behind the hooks: build or load a model, train it on the task (SFT, then
post-training to entropy collapse), and compare LED with its baselines."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import icml
from icml_led.config import EvaluateConfig, InferConfig

if TYPE_CHECKING:
    from icml_led.led import LEDConfig


def led_config_from(cfg: InferConfig | EvaluateConfig, tokenizer: Any) -> LEDConfig:
    """The job's ``led`` section as LEDDecoding takes it: the section itself, with the think
    ids that are not set taken from the task tokenizer's delimiters."""
    from dataclasses import replace

    from icml_led.task import think_ids

    led = cfg.led
    if led.think_start_id is not None and led.think_end_id is not None:
        return led
    start, end = think_ids(tokenizer)
    return replace(led, think_start_id=start if led.think_start_id is None else led.think_start_id,
                   think_end_id=end if led.think_end_id is None else led.think_end_id)


def prepare(ctx: icml.RunContext, cfg: InferConfig | EvaluateConfig) -> dict[str, Any]:
    """Model + tokenizer, trained as configured, with entropy profiles around post-training."""
    import torch

    from icml.compose import load_model
    from icml.models import byte_tokenizer, tiny_causal_lm
    from icml_led.layers import (
        check_readout,
        entropy_profile,
        layer_indices,
        num_layers_of,
    )
    from icml_led.task import completion_mask, make_problems, post_train, sft

    device, dtype = ctx.torch_device(), ctx.torch_dtype()
    with ctx.step("building the model"):
        if cfg.model:
            model, tok = load_model(cfg.model, device=device, dtype=dtype)
        else:
            model = tiny_causal_lm(cfg.arch, seed=ctx.seed, device=device, dtype=dtype,
                                   hidden_size=cfg.hidden_size, num_layers=cfg.num_layers,
                                   num_heads=4, num_kv_heads=2)
            tok = byte_tokenizer()
    # fail early on bad LED settings (depth, k, think ids) and on read-outs a transformed
    # model cannot give (icml.compose)
    check_readout(model, cfg.led.use_final_norm)
    check_readout(model, cfg.profile_final_norm)
    led_cfg = led_config_from(cfg, tok)
    layer_indices(num_layers_of(model), led_cfg.depth, led_cfg.skip_penultimate, led_cfg.layers)
    vocab = model.get_output_embeddings().out_features
    if led_cfg.top_k > vocab:
        raise icml.ConfigError(f"config key 'led.top_k': {led_cfg.top_k} is larger than the "
                               f"vocabulary ({vocab}); use led.top_k <= {vocab}")
    for key in ("think_start_id", "think_end_id"):
        if not 0 <= getattr(led_cfg, key) < vocab:
            raise icml.ConfigError(f"config key 'led.{key}': {getattr(led_cfg, key)} is not a "
                                   f"token id of this model (vocabulary {vocab})")
    probe = make_problems(64, cfg.num_terms, cfg.base, seed=ctx.seed + 31_337,
                          min_terms=cfg.min_terms)
    pids, pmask = completion_mask(tok, probe, device)
    info: dict[str, Any] = {"model": model, "tok": tok, "led_config": led_cfg}
    if cfg.sft_steps:
        losses = sft(model, tok, cfg.sft_steps, num_terms=cfg.num_terms, base=cfg.base,
                     batch_size=cfg.batch_size, lr=cfg.sft_lr, seed=ctx.seed,
                     progress=ctx.progress, min_terms=cfg.min_terms)
        info["sft_final_loss"] = sum(losses[-10:]) / len(losses[-10:])
    info["profile_before"] = entropy_profile(model, pids, pmask, cfg.profile_final_norm)
    if cfg.post_steps:
        info.update(post_train(model, tok, cfg.post_steps, num_terms=cfg.num_terms,
                               base=cfg.base, lr=cfg.post_lr, entropy_coef=cfg.entropy_coef,
                               seed=ctx.seed, progress=ctx.progress,
                               min_terms=cfg.min_terms))
    info["profile_after"] = entropy_profile(model, pids, pmask, cfg.profile_final_norm)
    # the other read-out too: LED reads un-normed states (ln=0), the logit lens normed ones
    try:
        check_readout(model, not cfg.profile_final_norm)
    except icml.ConfigError:  # a re-based model that cannot give the un-normed read-out
        info["profile_after_other"] = [math.nan] * len(info["profile_after"])
    else:
        info["profile_after_other"] = entropy_profile(model, pids, pmask,
                                                      not cfg.profile_final_norm)
    info["profile_norm"] = cfg.profile_final_norm
    torch.manual_seed(ctx.seed)
    return info


def _profile_table(info: dict[str, Any]) -> icml.Table:
    before, after = info["profile_before"], info["profile_after"]
    other = info["profile_after_other"]
    L = len(after)
    rows = []
    for i in range(L):
        name = f"{i + 1}" + (" (final)" if i == L - 1 else "")
        rows.append([name, before[i], after[i], after[i] - before[i], other[i]])
    here, there = (("through the final norm", "no norm (what LED reads)") if
                   info["profile_norm"] else ("no norm (what LED reads)",
                                              "through the final norm"))
    return icml.Table(f"Logit-lens entropy on the thinking span (nats), {here}, before/after "
                      "post-training; last column: after, read out " + there,
                      ["layer", "before", "after", "change", f"after, {there}"], rows)


def _methods(cfg: Any, led_cfg: Any, temperature: float, model: Any = None) -> list[Any]:
    from icml_led.evaluation import standard_methods
    from icml_led.layers import check_readout

    # DoLa reads un-normed layers: left out on a re-based model that cannot give them
    try:
        if model is not None:
            check_readout(model, False)
        dola = True
    except icml.ConfigError:
        dola = False
    return standard_methods(temperature=temperature, led_config=led_cfg,
                            dola_layers=cfg.dola_layers, relative_top=cfg.relative_top,
                            sampling_top_k=cfg.sampling_top_k, sampling_top_p=cfg.sampling_top_p,
                            include_dola=dola)


def _paired_table(results: list, cfg: InferConfig) -> icml.Table:
    """LED minus each other decoder on the same problems (one seed): pass@1 with a percentile
    bootstrap CI over problems and its MDE (:mod:`icml.stats`); pass@k at the largest k, and
    when k equals the number of samples (pass@k = solved at least once, a 0/1 score per problem)
    McNemar's exact test and the worst-case MDE of a paired difference of proportions."""
    from icml import stats
    from icml_led.metrics import pass_at_k

    led = results[-1]
    n, k = led.num_samples, max(cfg.ks)
    cols = ["LED minus", "d pass@1", "CI low", "CI high", "MDE pass@1", f"d pass@{k}",
            f"McNemar p (pass@{k})", f"MDE pass@{k}"]
    rows = []
    for r in results[:-1]:
        d1 = [pass_at_k(n, a, 1) - pass_at_k(n, b, 1) for a, b in zip(led.correct, r.correct)]
        est = stats.paired_diff_ci(d1, [0.0] * len(d1), seed=0)
        dk = led.pass_at[k] - r.pass_at[k]
        if k == n:
            a = [int(c > 0) for c in led.correct]
            b = [int(c > 0) for c in r.correct]
            p = stats.mcnemar(a, b).p_value
            acc = (sum(a) + sum(b)) / (2 * len(a))
            mde_k = stats.mde_proportion(len(a), p=acc, paired=True)
        else:
            p, mde_k = "-", "-"
        rows.append([r.name, est.value, est.lo, est.hi, stats.mde_from_samples(d1, seed=0), dk,
                     p, mde_k])
    return icml.Table(f"LED minus each decoder, paired by problem (T={cfg.temperature}, "
                      f"{len(led.correct)} problems, 95% bootstrap CI over problems, MDE at "
                      "alpha 0.05 and power 0.8)", cols, rows)


def infer_job(ctx: icml.RunContext, cfg: InferConfig) -> icml.RunResult:
    from icml.report import bar_plot
    from icml_led.evaluation import run_method
    from icml_led.task import make_problems

    info = prepare(ctx, cfg)
    model, tok, led_cfg = info["model"], info["tok"], info["led_config"]
    problems = make_problems(cfg.num_problems, cfg.num_terms, cfg.base, seed=ctx.seed + 1,
                             min_terms=cfg.min_terms)
    results = []
    for m in ctx.progress(_methods(cfg, led_cfg, cfg.temperature, model), desc="decoding"):
        r = run_method(model, tok, problems, m, num_samples=cfg.num_samples, ks=list(cfg.ks),
                       seed=ctx.seed, max_new_tokens=cfg.num_terms + 4)
        results.append(r)
        ctx.record({f"{r.name.split(' ')[0]}_pass@{k}": r.pass_at[k] for k in cfg.ks})
        ctx.record_row("finished methods (partial results)",
                       ["method"] + [f"pass@{k}" for k in cfg.ks] + ["ms/token"],
                       [r.name] + [r.pass_at[k] for k in cfg.ks] + [r.ms_per_token])
    base_ms = results[0].ms_per_token
    cols = (["method"] + [f"pass@{k}" for k in cfg.ks] +
            ["distinct answers", "distinct traces", "explored", "ms/token", "cost vs sampling"])
    rows = []
    metrics: dict[str, float] = {}
    for r in results:
        rows.append([r.name] + [r.pass_at[k] for k in cfg.ks] +
                    [r.distinct_answers, r.distinct_traces,
                     "-" if math.isnan(r.explored_fraction) else r.explored_fraction,
                     r.ms_per_token, r.ms_per_token / base_ms])
        key = r.name.split(" ")[0]
        for k in cfg.ks:
            metrics[f"{key}_pass@{k}"] = r.pass_at[k]
        metrics[f"{key}_ms_per_token"] = r.ms_per_token
    led = results[-1]
    samp = results[0]
    for k in cfg.ks:
        metrics[f"led_minus_sampling_pass@{k}"] = led.pass_at[k] - samp.pass_at[k]
    if not math.isnan(led.explored_fraction):
        metrics["led_explored_fraction"] = led.explored_fraction
    metrics["led_cost_ratio"] = led.ms_per_token / base_ms
    metrics["final_entropy_before"] = info["profile_before"][-1]
    metrics["final_entropy_after"] = info["profile_after"][-1]
    L = len(info["profile_after"])
    mid = [info["profile_after"][i] for i in range(L - 1 - led_cfg.depth, L - 1) if i >= 0]
    metrics["intermediate_entropy_after"] = sum(mid) / max(len(mid), 1)
    for key in ("sft_final_loss", "kept_fraction"):
        if key in info:
            metrics[key] = float(info[key])
    table = icml.Table(f"pass@k on the task at T={cfg.temperature} ({cfg.num_problems} problems, "
                       f"n={cfg.num_samples})", cols, rows)
    paired = _paired_table(results, cfg)
    artifacts = {}
    png = bar_plot(ctx.path("pass_at_k.png"),
                   {r.name: r.pass_at[max(cfg.ks)] for r in results},
                   title=f"pass@{max(cfg.ks)} at T={cfg.temperature}", ylabel="pass@k")
    if png is not None:
        artifacts["pass@k"] = png.name
    ks_max = max(cfg.ks)
    seen = led.pass_at[ks_max] > samp.pass_at[ks_max]
    notes = (f"LED pass@{ks_max} {'exceeds' if seen else 'does not exceed'} temperature "
             f"sampling in this run ({led.pass_at[ks_max]:.3f} vs {samp.pass_at[ks_max]:.3f}); "
             "the paper's gains are ~1 point on large reasoning models, so toy-scale differences "
             "are within seed noise (see the README's benchmark over seeds).")
    return icml.RunResult(metrics=metrics, tables=[table, paired, _profile_table(info)],
                          artifacts=artifacts, notes=notes)


def evaluate_job(ctx: icml.RunContext, cfg: EvaluateConfig) -> icml.RunResult:
    from icml.report import line_plot
    from icml_led.evaluation import run_method
    from icml_led.task import make_problems

    info = prepare(ctx, cfg)
    model, tok, led_cfg = info["model"], info["tok"], info["led_config"]
    problems = make_problems(cfg.num_problems, cfg.num_terms, cfg.base, seed=ctx.seed + 1,
                             min_terms=cfg.min_terms)
    ks_max = max(cfg.ks)
    curves: dict[str, tuple[list[float], list[float]]] = {}
    rows = []
    metrics: dict[str, float] = {}
    jobs = [(t, m) for t in cfg.temperatures for m in _methods(cfg, led_cfg, t, model)]
    for t, m in ctx.progress(jobs, desc="decoding"):
        r = run_method(model, tok, problems, m, num_samples=cfg.num_samples, ks=list(cfg.ks),
                       seed=ctx.seed, max_new_tokens=cfg.num_terms + 4)
        xs, ys = curves.setdefault(m.name, ([], []))
        xs.append(t)
        ys.append(r.pass_at[ks_max])
        rows.append([t, m.name] + [r.pass_at[k] for k in cfg.ks] + [r.distinct_answers])
        key = m.name.split(" ")[0]
        for k in cfg.ks:
            metrics[f"{key}_T{t:g}_pass@{k}"] = r.pass_at[k]
        ctx.record({f"{key}_T{t:g}_pass@{k}": r.pass_at[k] for k in cfg.ks})
        ctx.record_row("finished (temperature, method) pairs (partial results)",
                       ["T", "method"] + [f"pass@{k}" for k in cfg.ks] + ["distinct answers"],
                       rows[-1])
    for name, (xs, ys) in curves.items():
        if len(xs) > 1:
            n = len(xs)
            mx, my = sum(xs) / n, sum(ys) / n
            var = sum((x - mx) ** 2 for x in xs)
            cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
            slope = cov / var if var else 0.0
            metrics[f"{name.split(' ')[0]}_slope_pass@{ks_max}_vs_T"] = slope
    artifacts = {}
    png = line_plot(ctx.path("pass_at_k_vs_temperature.png"), curves,
                    title=f"pass@{ks_max} vs temperature", xlabel="temperature",
                    ylabel=f"pass@{ks_max}")
    if png is not None:
        artifacts["pass@k vs T"] = png.name
    png2 = line_plot(ctx.path("entropy_profile.png"),
                     {"before post-training": (list(range(1, len(info["profile_before"]) + 1)),
                                               info["profile_before"]),
                      "after post-training": (list(range(1, len(info["profile_after"]) + 1)),
                                              info["profile_after"]),
                      "after, other read-out": (
                          list(range(1, len(info["profile_after_other"]) + 1)),
                          info["profile_after_other"])},
                     title="logit-lens entropy by layer", xlabel="layer", ylabel="entropy (nats)")
    if png2 is not None:
        artifacts["entropy profile"] = png2.name
    cols = ["T", "method"] + [f"pass@{k}" for k in cfg.ks] + ["distinct answers"]
    return icml.RunResult(metrics=metrics,
                          tables=[icml.Table("pass@k against temperature", cols, rows),
                                  _profile_table(info)],
                          artifacts=artifacts)
