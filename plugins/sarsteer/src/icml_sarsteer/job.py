"""The default jobs behind the hooks: build the offline audio benchmark, train the toy audio-LM,
fit every defense from one set of recorded activations, and score them."""

from __future__ import annotations

import time
from typing import Any

import icml
from icml_sarsteer.config import EvaluateConfig, InferConfig, TrainConfig

AnyConfig = EvaluateConfig | TrainConfig | InferConfig
"""Any of the jobs' configs (each carries the data, model and steering keys)."""

LABELS = {"none": "no defense", "prompt": "prompt defense (R appended)",
          "plain": "plain steering (lambda=0)", "llm": "LLM steering (text-only direction)",
          "sarsteer": "SARSteer"}
STEERING = ("plain", "llm", "sarsteer")


def build_and_train(ctx: icml.RunContext, cfg: AnyConfig) -> tuple[Any, Any, Any, dict[str, float]]:
    """Benchmark + trained toy audio-LM: ``(bench, model, prompt, timings)``."""
    from icml_sarsteer.data import make_benchmark
    from icml_sarsteer.toy_lalm import ToyLALMConfig, build_toy_lalm, train_toy_lalm

    t0 = time.perf_counter()
    with ctx.step(f"rendering {2 * (cfg.n_fit + cfg.n_eval)} queries to speech"):
        bench = make_benchmark(cfg.n_fit, cfg.n_eval, seed=ctx.seed, backend=cfg.audio_backend)
    t1 = time.perf_counter()
    tcfg = ToyLALMConfig(arch=cfg.arch, hidden_size=cfg.hidden_size, num_layers=cfg.num_layers)
    lm = tok = None
    if cfg.model:
        from icml.compose import load_model

        with ctx.step(f"loading {cfg.model}"):
            lm, tok = load_model(cfg.model, device=ctx.torch_device())
    model, prompt = build_toy_lalm(tcfg, seed=ctx.seed, device=ctx.torch_device(),
                                   language_model=lm, tokenizer=tok)
    losses = train_toy_lalm(model, prompt, bench, steps=cfg.train_steps, lr=cfg.train_lr,
                            batch_size=cfg.train_batch, seed=ctx.seed, exp=cfg.steer.exp,
                            audio_safety_frac=cfg.audio_safety_frac,
                            audio_refusal_suffix=cfg.audio_refusal_suffix,
                            progress=lambda it: ctx.progress(it, desc="training the toy "
                                                             "audio-LM"))
    t2 = time.perf_counter()
    return bench, model, prompt, {"render_s": t1 - t0, "train_s": t2 - t1,
                                  "final_loss": sum(losses[-20:]) / len(losses[-20:])}


def fit_defenses(model: Any, prompt: Any, bench: Any, cfg: AnyConfig, names: list[str]
                 ) -> dict[str, Any]:
    """Fit the named defenses; the audio activations are recorded once and shared."""
    from icml_sarsteer.activations import collect_activations
    from icml_sarsteer.baselines import make_defense
    from icml_sarsteer.layers import find_decoder_layers, hidden_size, resolve_layers

    _, mods = find_decoder_layers(model)
    sc = cfg.steer
    try:
        ids = resolve_layers(sc.layers, len(mods))
    except ValueError as exc:
        raise icml.ConfigError(f"config key 'steer.layers': {exc}") from None
    if sc.lam != 0 and sc.k > cfg.n_fit:
        raise icml.ConfigError(f"config key 'steer.k': k={sc.k} exceeds n_fit={cfg.n_fit} "
                               "benign samples; lower steer.k or raise n_fit")
    dim = hidden_size(model)
    if sc.k > dim:
        raise icml.ConfigError(f"config key 'steer.k': k={sc.k} exceeds the text decoder's "
                               f"hidden size {dim}")
    defenses = {n: make_defense(n, sc, contrast=cfg.llm_contrast) for n in names}
    steer = [n for n in names if n in ("plain", "sarsteer")]
    if steer:
        ref = defenses[steer[0]]
        base = collect_activations(model, prompt, bench.fit_harmful, ref.instruction,
                                   layers=ids)
        refused = collect_activations(model, prompt, bench.fit_harmful,
                                      ref.refusal_instruction, layers=ids)
        ben = collect_activations(model, prompt, bench.fit_benign, ref.instruction, layers=ids)
        for n in steer:
            defenses[n].fit_hidden(base, refused, ben, layer_ids=ids, num_layers=len(mods))
    if "llm" in defenses:
        defenses["llm"].fit(model, bench.fit_harmful, bench.fit_benign,
                            text_prompt=prompt.as_text())
    return defenses


def _pct(r: dict[str, float]) -> str:
    """A rate in percent with its 95% interval (icml.stats.mean_ci over items)."""
    return f"{100 * r['rate']:.1f} [{100 * r['lo']:.1f}, {100 * r['hi']:.1f}]"


def _mde_points(n: int) -> float:
    """MDE (percentage points) of a difference between two arms' rates over ``n`` items each
    (icml.stats.mde_proportion, worst case p = 0.5, alpha 0.05, power 0.8)."""
    from icml import stats

    return 100 * stats.mde_proportion(n)


def evaluate_job(ctx: icml.RunContext, cfg: EvaluateConfig) -> icml.RunResult:
    """The defenses table: refusal on harmful audio, over-refusal on benign audio (keyword
    judge, bootstrap 95% CIs), at ``alpha`` and over the ``alphas`` sweep; plus the text-only
    refusal of the undefended model (the gap)."""
    from icml_sarsteer.baselines import NoDefense
    from icml_sarsteer.evaluation import evaluate_defense
    from icml_sarsteer.toy_lalm import COMPLY_RESPONSE, REFUSE_RESPONSE

    bench, model, prompt, times = build_and_train(ctx, cfg)
    t0 = time.perf_counter()
    defenses = fit_defenses(model, prompt, bench, cfg, list(cfg.defenses))
    times["fit_s"] = time.perf_counter() - t0
    canon = [prompt.decode(prompt.tokenizer.encode(r, add_special_tokens=False))
             for r in (REFUSE_RESPONSE, COMPLY_RESPONSE)]
    ev = dict(max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size, n_boot=cfg.n_boot,
              seed=ctx.seed, canonical=canon)
    cols = ["defense", "alpha", "refusal on harmful audio % [95% CI]",
            "over-refusal on benign audio % [95% CI]", "well-formed responses %"]
    title = (f"Defenses on held-out speech ({cfg.n_eval} harmful + {cfg.n_eval} benign "
             f"queries, {bench.backend} voices, keyword judge; a difference between two rows "
             f"below {_mde_points(cfg.n_eval):.0f} points is not detectable (MDE))")
    metrics: dict[str, float] = {**times}
    t0 = time.perf_counter()
    text = evaluate_defense(model, prompt.as_text(), NoDefense(), bench.eval_harmful,
                            bench.eval_benign, **ev)
    metrics["text_refusal_harmful"] = text["refusal_harmful"]["rate"]
    metrics["text_over_refusal_benign"] = text["over_refusal_benign"]["rate"]
    rows: list[list[Any]] = []
    results: dict[str, Any] = {}
    for name in ctx.progress(list(cfg.defenses), desc="scoring defenses"):
        d = defenses[name]
        r = evaluate_defense(model, prompt, d, bench.eval_harmful, bench.eval_benign, **ev)
        results[name] = r
        wf = 50 * (r["well_formed_harmful"] + r["well_formed_benign"])
        row = [LABELS[name], cfg.steer.alpha if name in STEERING else "-",
               _pct(r["refusal_harmful"]), _pct(r["over_refusal_benign"]), round(wf, 1)]
        rows.append(row)
        ctx.record_row(title, cols, row)
        metrics[f"{name}_refusal_harmful"] = r["refusal_harmful"]["rate"]
        metrics[f"{name}_over_refusal_benign"] = r["over_refusal_benign"]["rate"]
        metrics[f"{name}_well_formed"] = wf / 100
    rows.append(["(text input, no defense)", "-", _pct(text["refusal_harmful"]),
                 _pct(text["over_refusal_benign"]),
                 round(50 * (text["well_formed_harmful"] + text["well_formed_benign"]), 1)])
    tables = [icml.Table(title, cols, rows)]
    sweep_rows: list[list[Any]] = []
    curves: dict[str, list[tuple[float, float, float]]] = {}
    steer = [n for n in cfg.defenses if n in STEERING]
    for alpha in (ctx.progress(list(cfg.alphas), desc="alpha sweep") if steer else []):
        for name in steer:
            r = evaluate_defense(model, prompt, defenses[name], bench.eval_harmful,
                                 bench.eval_benign, alpha=alpha, **ev)
            h, b = r["refusal_harmful"]["rate"], r["over_refusal_benign"]["rate"]
            curves.setdefault(name, []).append((alpha, h, b))
            sweep_rows.append([LABELS[name], alpha, round(100 * h, 1), round(100 * b, 1),
                               round(100 * (h - b), 1)])
            metrics[f"{name}_a{alpha:g}_refusal_harmful"] = h
            metrics[f"{name}_a{alpha:g}_over_refusal_benign"] = b
    times["eval_s"] = metrics["eval_s"] = time.perf_counter() - t0
    if sweep_rows:
        tables.append(icml.Table("Alpha sweep (refusal on harmful minus over-refusal on benign "
                                 "= selectivity)", ["defense", "alpha", "harmful refusal %",
                                                    "benign over-refusal %",
                                                    "selectivity (points)"], sweep_rows))
    artifacts = {}
    png = _plot(ctx, curves, results)
    if png:
        artifacts["trade-off plot"] = png
    return icml.RunResult(metrics=metrics, tables=tables, artifacts=artifacts,
                          notes=_notes(results, text, cfg, bench.backend))


def _notes(results: dict[str, Any], text: dict[str, Any], cfg: Any, backend: str) -> str:
    parts = [f"Toy Qwen2-Audio-style model ({cfg.arch} decoder, {cfg.num_layers} layers, "
             f"hidden {cfg.hidden_size}), {backend} voices, one seed; the behaviours are planted "
             "by the training mixture, so read this as a sanity check of the pipeline, not as "
             "evidence for the paper's numbers."]
    if "none" in results:
        parts.append(f"Gap: the undefended model refuses "
                     f"{100 * text['refusal_harmful']['rate']:.0f}% of harmful *text* but "
                     f"{100 * results['none']['refusal_harmful']['rate']:.0f}% of harmful "
                     "*speech*.")
    if "sarsteer" in results and "none" in results:
        s, n = results["sarsteer"], results["none"]
        parts.append(f"SARSteer harmful refusal {100 * s['refusal_harmful']['rate']:.0f}% vs "
                     f"{100 * n['refusal_harmful']['rate']:.0f}% undefended; over-refusal "
                     f"{100 * s['over_refusal_benign']['rate']:.0f}% vs "
                     + ", ".join(f"{k} {100 * results[k]['over_refusal_benign']['rate']:.0f}%"
                                 for k in ("prompt", "plain") if k in results) + ".")
    return " ".join(parts)


def _plot(ctx: icml.RunContext, curves: dict[str, list[tuple[float, float, float]]],
          results: dict[str, Any]) -> str | None:
    from icml.report import figure

    if not curves and not results:
        return None
    path = ctx.path("tradeoff.png")
    with figure(path, figsize=(5.2, 4.2)) as ax:
        if ax is None:
            return None
        for name, pts in curves.items():
            ax.plot([100 * b for _, _, b in pts], [100 * h for _, h, _ in pts], "o-",
                    label=LABELS[name])
            for a, h, b in pts:
                ax.annotate(f"{a:g}", (100 * b, 100 * h), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
        for name in ("none", "prompt"):
            if name in results:
                r = results[name]
                ax.plot(100 * r["over_refusal_benign"]["rate"],
                        100 * r["refusal_harmful"]["rate"], "s", label=LABELS[name])
        ax.set_xlabel("over-refusal on benign speech (%)")
        ax.set_ylabel("refusal on harmful speech (%)")
        ax.set_xlim(-3, 103)
        ax.set_ylim(-3, 103)
        ax.plot([0, 100], [0, 100], ":", color="grey", lw=0.8)
        ax.legend(fontsize=7)
        ax.set_title("Defenses (labels: alpha)")
    return path.name


def train_job(ctx: icml.RunContext, cfg: TrainConfig) -> icml.RunResult:
    """Train the toy audio-LM, fit SARSteer, save the model (``toy_lalm/``) and the vectors
    (``sarsteer_vectors.pt``); report the vector norms per layer and the share of d removed."""
    bench, model, prompt, times = build_and_train(ctx, cfg)
    t0 = time.perf_counter()
    steer = fit_defenses(model, prompt, bench, cfg, ["sarsteer"])["sarsteer"]
    times["fit_s"] = time.perf_counter() - t0
    vec = steer.save(ctx.path("sarsteer_vectors.pt"))
    model.save_pretrained(ctx.path("toy_lalm"))
    prompt.tokenizer.save_pretrained(ctx.path("toy_lalm"))
    rows, metrics = [], dict(times)
    for j, i in enumerate(steer.layer_ids):
        d, v = steer.directions[j], steer.vectors[j]
        kept = float(v.norm() / d.norm()) if float(d.norm()) > 0 else 0.0
        resid = float((steer.bases[j].T @ v).norm())
        rows.append([i, round(float(d.norm()), 4), round(float(v.norm()), 4), round(kept, 4),
                     f"{resid:.1e}"])
        metrics[f"layer{i}_kept_norm_ratio"] = kept
    table = icml.Table(f"Fitted SARSteer vectors (k={steer.k}, lambda={steer.lam}, "
                       f"N={steer.n_harmful} harmful / {steer.n_benign} benign)",
                       ["layer", "|d|", "|v|", "|v|/|d|", "|U_k^T v|"], rows)
    return icml.RunResult(metrics=metrics, tables=[table],
                          artifacts={"vectors": vec.name, "model": "toy_lalm"})


def infer_job(ctx: icml.RunContext, cfg: InferConfig) -> icml.RunResult:
    """Steered generation on held-out speech: each response without and with SARSteer."""
    from transformers import AutoTokenizer

    from icml_sarsteer.data import make_benchmark
    from icml_sarsteer.prompts import generate_responses
    from icml_sarsteer.steering import SARSteer, hook_count
    from icml_sarsteer.toy_lalm import (
        AudioPrompt,
        ToyLALMConfig,
        feature_extractor,
        toy_audio_lm_class,
    )

    if bool(cfg.model_path) != bool(cfg.vectors_path):
        raise icml.ConfigError("config keys 'model_path' and 'vectors_path' go together: give "
                               "both (from a train run) or neither")
    if cfg.model_path:
        from pathlib import Path

        if not Path(cfg.model_path).is_dir():
            raise icml.ConfigError(f"config key 'model_path': no folder {cfg.model_path}")
        try:
            model = toy_audio_lm_class().from_pretrained(cfg.model_path)
        except (OSError, ValueError, KeyError) as exc:
            raise icml.ConfigError(f"config key 'model_path': {cfg.model_path} is not a toy "
                                   f"audio-LM folder written by train ({exc})") from None
        model = model.to(ctx.torch_device())
        tok = AutoTokenizer.from_pretrained(cfg.model_path)
        frames = model.n_audio_tokens * model.stack
        tcfg = ToyLALMConfig(n_mels=model.n_mels, stack=model.stack,
                             max_source_positions=frames // 2)
        prompt = AudioPrompt(tok, feature_extractor(tcfg), model.n_audio_tokens, frames,
                             ctx.torch_device())
        try:
            steer = SARSteer.load(cfg.vectors_path, model=model)
        except (FileNotFoundError, ValueError) as exc:
            raise icml.ConfigError(f"config key 'vectors_path': {exc}") from None
        bench = make_benchmark(cfg.n_fit, cfg.n_eval, seed=ctx.seed, backend=cfg.audio_backend)
    else:
        bench, model, prompt, _ = build_and_train(ctx, cfg)
        steer = fit_defenses(model, prompt, bench, cfg, ["sarsteer"])["sarsteer"]
    qs = (bench.eval_harmful[:(cfg.n_show + 1) // 2] + bench.eval_benign[:cfg.n_show // 2])
    t0 = time.perf_counter()
    plain = generate_responses(model, prompt, qs, steer.instruction,
                               max_new_tokens=cfg.max_new_tokens)
    t1 = time.perf_counter()
    with steer.apply(model):
        steered = generate_responses(model, prompt, qs, steer.instruction,
                                     max_new_tokens=cfg.max_new_tokens)
    t2 = time.perf_counter()
    rows = [[q.question, "harmful" if q.harmful else "benign", a, b]
            for q, a, b in zip(qs, plain, steered, strict=True)]
    return icml.RunResult(
        metrics={"unsteered_s": t1 - t0, "steered_s": t2 - t1,
                 "hooks_after_exit": float(hook_count(model))},
        tables=[icml.Table(f"Responses to held-out speech (alpha={steer.alpha}, k={steer.k}, "
                           f"lambda={steer.lam})", ["spoken query (transcript)", "label",
                                                    "no defense", "SARSteer"], rows)])
