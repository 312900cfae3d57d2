"""The default jobs behind the hooks: train (estimator table + tiny-LM training over seeds),
infer (multi-attempt rollouts), evaluate (Ver@k metrics). Heavy libraries are imported inside."""

from __future__ import annotations

import importlib
from typing import Any

import icml
from icml_cal_grpo.config import EvaluateConfig, InferConfig, TrainConfig


def _model_factory(ctx: icml.RunContext, name: str, arch: str = "qwen2",
                   hidden_size: int = 64) -> Any:
    device, dtype = ctx.torch_device(), ctx.torch_dtype()

    def make(seed: int) -> tuple[Any, Any]:
        from icml.compose import load_model
        from icml.models import byte_tokenizer, tiny_causal_lm

        if name:  # a packaged name, a local HF folder or a previous run folder
            import torch

            torch.manual_seed(seed)
            return load_model(name, device=device, dtype=dtype)
        model = tiny_causal_lm(arch, seed=seed, hidden_size=hidden_size, device=device,
                               dtype=dtype)
        return model, byte_tokenizer()

    return make


def _verifier(spec: str, ctx: icml.RunContext, max_attempts: int) -> tuple[Any, Any]:
    """(verifier, probe_task or None) from a config string."""
    from icml_cal_grpo.tasks import ProbeTask

    if spec == "probe":
        task = ProbeTask(max_attempts=max_attempts, seed=ctx.seed)
        return task, task
    mod, sep, attr = spec.partition(":")
    if not sep or not mod or not attr:
        raise icml.ConfigError(f"config key 'verifier': got {spec!r}, expected 'probe' or "
                               "'module:function'")
    try:
        fn = getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as exc:
        raise icml.ConfigError(f"config key 'verifier': cannot import {spec!r} ({exc})") from None
    if not callable(fn):
        raise icml.ConfigError(f"config key 'verifier': {spec!r} is not callable")
    return fn, None


def train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    """The default train job: the exact estimator table, then naive / trajectory / CAL training
    of a tiny LM on the probe task over seeds."""
    from icml.report import line_plot
    from icml_cal_grpo.experiment import estimator_table, summarize, train_probe_lm

    tables, metrics = [], {}
    if config.estimator_groups > 0:
        with ctx.step("exact estimator bias/variance on the tabular probe env"):
            rows = estimator_table(max_attempts=config.max_attempts,
                                   group_size=config.num_generations,
                                   num_groups=config.estimator_groups,
                                   p_guess=config.p_guess, p_exploit=config.p_exploit,
                                   seed=ctx.seed)
        tables.append(icml.Table(
            f"Estimators at the uniform policy (tabular probe env, K={config.max_attempts}; "
            f"bias and variance exact by enumeration, groups of {config.num_generations}, "
            "no std scaling, leave-one-out baselines)",
            ["estimator", "relative bias", "cosine to grad J", "variance",
             "variance / trajectory", "variance / |E g|^2"],
            [[r["estimator"], r["rel_bias"], r["cosine"], r["variance"], r["var_ratio"],
              r["rel_variance"]] for r in rows]))
        for r in rows:
            metrics[f"bias_{r['estimator']}"] = float(r["rel_bias"])
            metrics[f"variance_{r['estimator']}"] = float(r["variance"])
        ctx.record(dict(metrics))
        ctx.record_table(tables[-1])
    factory = _model_factory(ctx, config.model, config.arch, config.hidden_size)
    toks: list[Any] = []

    def make(seed: int) -> tuple[Any, Any]:
        model, tok = factory(seed)
        toks[:] = [tok]  # the tokenizer saved with the model
        return model, tok

    runs = [(m, ctx.seed + s) for m in config.modes for s in range(config.seeds)]
    saved_mode = "cal" if "cal" in config.modes else config.modes[-1]
    curves, keep = [], []
    for mode, seed in ctx.progress(runs, desc="training naive / trajectory / CAL"):
        curves.append(train_probe_lm(
            mode, seed, make_model=make, steps=config.steps,
            max_attempts=config.max_attempts, num_generations=config.num_generations,
            prompts_per_step=config.prompts_per_step, learning_rate=config.learning_rate,
            target=config.target, p_guess=config.p_guess, p_exploit=config.p_exploit,
            advantage=config.advantage, loss_type=config.loss_type, epsilon=config.epsilon,
            num_iterations=config.num_iterations,
            keep=keep if config.save_model and mode == saved_mode else None))
        c = curves[-1]
        final = float(c.ver[-1]) if c.ver else float("nan")
        ctx.record({f"ver@{config.max_attempts}_{mode}_seed{seed}": final})
        ctx.record_row("finished training runs (partial results)",
                       ["estimator", "seed", f"final Ver@{config.max_attempts}"],
                       [mode, seed, final])
    summary = summarize(curves, config.steps)
    k = config.max_attempts
    tables.append(icml.Table(
        f"Tiny LM on the probe task: exact Ver@{k} after {config.steps} steps "
        f"({config.seeds} seeds)",
        ["estimator", f"Ver@{k} (mean)", f"Ver@{k} (min)", "P(probe first)",
         f"median steps to Ver@{k} >= {config.target}", "seeds reaching target"],
        [[s["estimator"], s["final_ver"], s["min_ver"], s["probe_first"],
          _steps_cell(s["median_steps_to_target"], config.steps),
          f"{s['reached']}/{s['seeds']}"] for s in summary]))
    for s in summary:
        metrics[f"ver@{k}_{s['estimator']}"] = s["final_ver"]
        metrics[f"steps_to_target_{s['estimator']}"] = s["median_steps_to_target"]
        metrics[f"probe_first_{s['estimator']}"] = s["probe_first"]
    series = {}
    for mode in config.modes:
        cs = [c for c in curves if c.mode == mode]
        ys = [sum(c.ver[i] for c in cs) / len(cs) for i in range(config.steps)]
        series[mode] = (list(range(1, config.steps + 1)), ys)
    artifacts = {}
    if line_plot(ctx.path("ver_curve.png"), series, title="Exact Ver@K on the probe task",
                 xlabel="update", ylabel=f"Ver@{k} (mean over seeds)"):
        artifacts["Ver@K during training"] = "ver_curve.png"
    if keep:
        from icml_cal_grpo.experiment import save_trained

        save_trained(ctx.out_dir, keep[-1], toks[0], mode=saved_mode,
                     base=config.model or f"tiny-{config.arch}", steps=config.steps)
        artifacts["model"] = "model"  # icml.compose.load_model(<this run folder>)
    myopic = 1 - (1 - config.p_guess) ** k
    notes = (f"Myopic (always guess) Ver@{k} = {myopic:.3f}; probe-then-exploit Ver@{k} = "
             f"{1 - (1 - config.p_exploit) ** (k - 1) if k > 1 else config.p_guess:.3f}. "
             "Ver@K values are exact (enumerated over the task's arm tree with the model's "
             "probabilities). The CAL estimator is reconstructed from the abstract.")
    return icml.RunResult(metrics=metrics, tables=tables, artifacts=artifacts, notes=notes)


def _steps_cell(v: float, steps: int) -> Any:
    return f"> {steps}" if v != v else v


def _rollout_setup(ctx: icml.RunContext, config: InferConfig,
                   ) -> tuple[Any, Any, Any, Any, list[str]]:
    import torch

    from icml_cal_grpo.rollout import MultiAttemptConfig

    model, tok = _model_factory(ctx, config.model)(ctx.seed)
    verifier, task = _verifier(config.verifier, ctx, config.max_attempts)
    if task is not None:
        rc = task.rollout_config(tok, config.temperature)
        prompts = list(config.prompts) or [task.prompt]
    else:
        if not config.prompts:
            raise icml.ConfigError("config key 'prompts' is empty: give prompts for a custom "
                                   "verifier, e.g. --set prompts='[\"2+2=\"]'")
        rc = MultiAttemptConfig(max_attempts=config.max_attempts,
                                feedback=config.feedback or MultiAttemptConfig.feedback,
                                max_attempt_tokens=config.max_attempt_tokens,
                                on_length=config.on_length, temperature=config.temperature)
        prompts = list(config.prompts)
    if config.feedback and task is not None:
        rc.feedback = config.feedback
    rc.backend = config.backend
    gen = torch.Generator(device=ctx.torch_device()).manual_seed(ctx.seed)
    return model, tok, verifier, (rc, gen, task), prompts


def infer(ctx: icml.RunContext, config: InferConfig) -> icml.RunResult:
    """Multi-attempt rollouts of the model with the verifier."""
    from icml_cal_grpo.metrics import attempt_metrics
    from icml_cal_grpo.rollout import multi_attempt_rollout

    model, tok, verifier, (rc, gen, _), prompts = _rollout_setup(ctx, config)
    with ctx.step("multi-attempt rollout"):
        batch = multi_attempt_rollout(model, tok, prompts, verifier, rc,
                                      num_generations=config.num_generations, generator=gen)
    rows = []
    for i in range(len(batch.prompts)):
        outcome = "".join("✓" if batch.rewards[i, k] > 0.5 else "✗"
                          for k in range(len(batch.attempts[i])))
        rows.append([batch.prompt_index[i], batch.prompts[i][:40],
                     " | ".join(a[:30] for a in batch.attempts[i]), outcome])
    lines = [f"{batch.prompts[i]!r} -> {batch.attempts[i]!r} rewards "
             f"{batch.rewards[i, :len(batch.attempts[i])].tolist()}" for i in range(len(rows))]
    ctx.path("rollouts.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return icml.RunResult(
        metrics=attempt_metrics(batch.rewards, batch.reached),
        tables=[icml.Table("Multi-attempt rollouts", ["prompt #", "prompt", "attempts",
                                                      "verdicts"], rows)],
        artifacts={"rollouts": "rollouts.txt"})


def evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    """Ver@k, first-success and correction rates from many rollouts (exact Ver@K on the
    probe task)."""
    from icml_cal_grpo.metrics import attempt_metrics, correction_rate, per_attempt_pass_rate
    from icml_cal_grpo.rollout import multi_attempt_rollout

    model, tok, verifier, (rc, gen, task), prompts = _rollout_setup(ctx, config)
    with ctx.step("multi-attempt rollouts"):
        batch = multi_attempt_rollout(model, tok, prompts, verifier, rc,
                                      num_generations=config.num_generations, generator=gen)
    exact = task.exact_verification(model, tok, config.temperature) if task else None
    m = attempt_metrics(batch.rewards, batch.reached)
    passes = per_attempt_pass_rate(batch.rewards, batch.reached)
    corr = correction_rate(batch.rewards, batch.reached)
    rows = [[k + 1, m[f"ver@{k + 1}"], passes[k], corr[k]] for k in range(config.max_attempts)]
    if exact is not None:
        m["ver@K_exact"] = exact
    return icml.RunResult(
        metrics=m,
        tables=[icml.Table(f"Multi-attempt metrics ({len(batch.prompts)} rollouts)",
                           ["k", "Ver@k", "P(first success at k)",
                            "P(success at k | k-1 failures)"], rows)],
        notes=(f"Exact Ver@{config.max_attempts} of the model on the probe task: {exact:.4f} "
               "(the sampled Ver@K estimates it)." if exact is not None else ""))
