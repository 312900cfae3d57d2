"""The default jobs of the three capabilities, typed: ``train`` (the four-arm ablation),
``infer`` (rollouts with transcripts) and ``evaluate`` (agent metrics). The hooks in
``plugin.py`` call these."""

from __future__ import annotations

import math
from typing import Any

import icml
from icml_dr_mmsearch.config import EvaluateConfig, InferConfig, TrainConfig

_COLS = [("acc 1-hop", "accuracy_hop1"), ("acc 2-hop", "accuracy_hop2"),
         ("acc 3-hop", "accuracy_hop3"), ("turns 3-hop", "turns_hop3"),
         ("collapse 3-hop", "collapse_rate"), ("premature", "premature_rate"),
         ("diverse", "diverse_rate"), ("redundant", "redundant_rate"),
         ("held-out acc 2-hop", "heldout_accuracy_hop2"),
         ("held-out acc 3-hop", "heldout_accuracy_hop3"),
         ("held-out turns 3-hop", "heldout_turns_hop3")]


def _cell(values: list[float]) -> Any:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return float("nan")
    mean = sum(vals) / len(vals)
    if len(vals) == 1:
        return round(mean, 3)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
    return f"{mean:.3f} ± {sd:.3f}"


def _mean(values: list[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return sum(vals) / len(vals) if vals else float("nan")


def train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    """The default job: warm start per seed, then each arm, recorded as it finishes."""
    from icml.report import bar_plot, line_plot
    from icml_dr_mmsearch.experiment import save_policy, train_arm, warm_start_policy

    device, dtype = ctx.torch_device(), ctx.torch_dtype()
    per_arm: dict[str, list[dict[str, float]]] = {"warm start": []}
    curves: dict[str, list[list[dict[str, float]]]] = {a: [] for a in config.arms}
    cols = ["arm", "seed"] + [c for c, _ in _COLS]
    saved = ""
    for s in range(config.seeds):
        seed = ctx.seed + s
        with ctx.step(f"seed {seed}: warm start on gold trajectories ({config.warm.steps} "
                      "steps)"):
            ws = warm_start_policy(config, seed=seed, device=device, dtype=dtype)
        per_arm["warm start"].append(ws.metrics)
        ctx.record_row("finished runs (partial results)", cols,
                       ["warm start", seed] + [ws.metrics.get(k, float("nan")) for _, k in _COLS])
        for arm in ctx.progress(list(config.arms), desc=f"seed {seed}: GRPO arms "
                                f"({config.steps} steps each)"):
            m, curve, model = train_arm(ws, arm)
            per_arm.setdefault(arm, []).append(m)
            curves[arm].append(curve)
            ctx.record({f"acc3_{arm}_seed{seed}": m.get("accuracy_hop3", float("nan"))})
            ctx.record_row("finished runs (partial results)", cols,
                           [arm, seed] + [m.get(k, float("nan")) for _, k in _COLS])
            if config.save_model == arm and s == config.seeds - 1:
                save_policy(ctx.path("policy"), model, ws.tokenizer, ws.world)
                saved = "policy"
    from icml import stats

    rows, metrics = [], {}
    for name, ms in per_arm.items():
        # MDE of a 3-hop accuracy difference between two arms (two-sided, alpha 0.05, power
        # 0.8), worst case p = 0.5, counting every sampled 3-hop rollout as independent: the
        # rollouts of one question are correlated, so the true MDE is larger still.
        n3 = int(sum(m.get("n_hop3", 0.0) for m in ms))
        rows.append([name] + [_cell([m.get(k, float("nan")) for m in ms]) for _, k in _COLS]
                    + [round(stats.mde_proportion(n3), 3) if n3 else float("nan")])
        key = name.replace(" ", "_")
        for _, k in _COLS:
            metrics[f"{k}_{key}"] = _mean([m.get(k, float("nan")) for m in ms])
    title = (f"Four arms after {config.steps} GRPO steps from one warm start "
             f"({config.seeds} seed{'s' if config.seeds > 1 else ''}"
             f"{', mean ± sd' if config.seeds > 1 else ''}; {config.eval_generations} sampled "
             "rollouts per question)")
    tables = [icml.Table(title, ["arm"] + [c for c, _ in _COLS] + ["MDE acc 3-hop"], rows)]
    artifacts = {}
    series = {}
    for arm, cs in curves.items():
        if cs and cs[0]:
            n = min(len(c) for c in cs)
            series[arm] = (list(range(1, n + 1)),
                           [_mean([c[i]["turns"] for c in cs]) for i in range(n)])
    if series and line_plot(ctx.path("turns.png"), series, title="Mean turns per rollout "
                            "during GRPO", xlabel="step", ylabel="turns (training batch)"):
        artifacts["mean turns during training"] = "turns.png"
    bars = {a: metrics.get(f"accuracy_hop3_{a.replace(' ', '_')}", float("nan"))
            for a in per_arm}
    if bar_plot(ctx.path("acc3.png"), bars, title="3-hop accuracy", ylabel="EM"):
        artifacts["3-hop accuracy"] = "acc3.png"
    if saved:
        artifacts[f"trained policy ({config.save_model})"] = saved
    held = (f"the 2-/3-hop questions of the last fact worlds (a share {config.holdout} of "
            f"{config.world.fact_worlds}; their founders are re-drawn, so only the search "
            "results answer them)" if config.holdout_by == "world" else
            f"the 2-/3-hop questions of a share {config.holdout} of the companies, never seen "
            "in training (the word-level tiny model cannot write names it never produced, so "
            "expect them near 0; see the README)")
    notes = ("Plain columns: the training questions (world 0's with several fact worlds); "
             f"held-out: {held}. "
             "Collapse = share of 3-hop rollouts answered in one turn without a tool; premature "
             "= share of search-needing rollouts answered with fewer searches than the question "
             "needs; diverse = share of rollouts whose group has another rollout with the same "
             "MMSearch-R1 reward and a different number of turns; redundant = share repeating "
             "a text query. MDE acc 3-hop: the smallest 3-hop accuracy difference between two "
             "arms this evaluation detects (alpha 0.05, power 0.8, worst case p = 0.5, rollouts "
             "counted as independent, so the true MDE is larger). The structural-proximity "
             "advantage and the Gaussian turn reward are "
             "reconstructed from the paper's abstract.")
    return icml.RunResult(metrics=metrics, tables=tables, artifacts=artifacts, notes=notes)


def _policy(ctx: icml.RunContext, config: InferConfig) -> tuple[Any, Any, Any]:
    """(model, tokenizer, env) for infer/evaluate; ``env.heldout_ids`` holds the ids of the
    questions a saved policy's training held out (empty otherwise)."""
    from icml_dr_mmsearch.env import DEFAULT_INSTRUCTION
    from icml_dr_mmsearch.experiment import (
        WORLD_FILE,
        build_world,
        load_policy,
        make_tiny_model,
        warm_start_data,
        world_config_of,
    )
    from icml_dr_mmsearch.grpo import warm_start
    from icml_dr_mmsearch.tokenizer import check_tokenizer

    world = config.world
    device, dtype = ctx.torch_device(), ctx.torch_dtype()
    saved = None
    if config.model:
        try:
            model, tok, saved = load_policy(config.model, device=device, dtype=dtype)
        except ValueError as exc:
            raise icml.ConfigError(f"config key 'model': {exc}") from None
    if saved is not None:
        try:
            world = world_config_of(saved)
        except (TypeError, ValueError) as exc:
            raise icml.ConfigError(f"config key 'model': {config.model}/{WORLD_FILE}: {exc}"
                                   ) from None
    kb, env, word_tok = build_world(world)
    if not config.model:
        tok = word_tok
        model = make_tiny_model(len(tok), seed=ctx.seed, device=device, dtype=dtype)
        with ctx.step(f"warm start on gold trajectories ({config.warm.steps} steps)"):
            warm_start(model, tok, env, warm_start_data(env, kb.questions, 0.0, ctx.seed),
                       config.warm, seed=ctx.seed)
    holdout = float((saved or {}).get("holdout", 0.0))
    by = str((saved or {}).get("holdout_by", "company"))
    env.heldout_ids = {q.id for q in kb.split(holdout, seed=world.world_seed, by=by)[1]}
    general = bool(config.model) and saved is None   # a causal LM of the user's
    fmt = "baseline" if general else config.result_format
    for name in ("text", "image"):
        env.tools[name].result_format = fmt
    env.result_format = fmt
    if general:
        env.instruction = DEFAULT_INSTRUCTION
        try:
            check_tokenizer(tok)
        except ValueError as exc:
            raise icml.ConfigError(f"config key 'model': {exc}") from None
    return model, tok, env


def _select(env: Any, which: str, n: int) -> list[Any]:
    qs = env.kb.questions if which == "all" else env.kb.questions_by_hops(int(which[-1]))
    if n and which == "all":   # spread over depths
        by = [env.kb.questions_by_hops(h) for h in (1, 2, 3)]
        qs = [q for group in zip(*by, strict=False) for q in group]
    return qs[:n] if n else list(qs)


def _rollouts(ctx: icml.RunContext, config: InferConfig) -> tuple[Any, Any, list[Any]]:
    import torch

    from icml_dr_mmsearch.rollout import agent_rollout

    model, tok, env = _policy(ctx, config)
    qs = _select(env, config.questions, config.num_questions)
    rc = config.rollout
    gen = torch.Generator(device=ctx.torch_device()).manual_seed(ctx.seed)
    with ctx.step(f"agent rollouts ({len(qs)} questions x {config.num_generations})"):
        trajs = agent_rollout(model, tok, env, qs, num_generations=config.num_generations,
                              config=rc, generator=gen)
    return model, env, trajs


def infer(ctx: icml.RunContext, config: InferConfig) -> icml.RunResult:
    """Rollouts of a policy (saved, a causal LM, or warm-started now) with transcripts."""
    from icml_dr_mmsearch.grpo import RewardConfig, TrajectoryReward
    from icml_dr_mmsearch.metrics import agent_metrics
    from icml_dr_mmsearch.rewards import extract_answer

    _, env, trajs = _rollouts(ctx, config)
    rewards = TrajectoryReward(RewardConfig(), env.limits)(trajs)
    rows, lines = [], []
    for t, r in zip(trajs, rewards, strict=True):
        ans = extract_answer(t.responses[-1]) if t.responses else None
        rows.append([t.question.id, t.question.hops, t.question.answer, t.actions, ans or "",
                     round(r, 3)])
        lines.append(f"## question #{t.question.id} ({t.question.hops}-hop): "
                     f"{t.question.text!r} gold={t.question.answer!r} reward={r:.3f}")
        for k, resp in enumerate(t.responses):
            lines.append(f"[model turn {k + 1}] {resp}")
            if k < len(t.episode.observations):
                lines.append(f"[tool] {t.episode.observations[k].strip()}")
        lines.append(f"[end] {t.episode.end_reason}\n")
    ctx.path("rollouts.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return icml.RunResult(
        metrics=agent_metrics(trajs, rewards, tool_limits=env.limits),
        tables=[icml.Table("Agent rollouts", ["question #", "hops", "gold", "tools",
                                              "answer", "MMSearch-R1 reward"], rows)],
        artifacts={"transcripts": "rollouts.txt"})


def evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    """Agent metrics of a policy on every question (trained on / held out apart)."""
    from icml_dr_mmsearch.grpo import RewardConfig, TrajectoryReward
    from icml_dr_mmsearch.metrics import agent_metrics

    _, env, trajs = _rollouts(ctx, config)
    rewards = TrajectoryReward(RewardConfig(), env.limits)(trajs)
    m = agent_metrics(trajs, rewards, tool_limits=env.limits)
    rows = []
    for h in (1, 2, 3):
        if f"accuracy_hop{h}" in m:
            n = sum(t.question.hops == h for t in trajs)
            rows.append([h, "all", n, m[f"accuracy_hop{h}"], m[f"turns_hop{h}"]])
    for name, keep in (("trained on", False), ("held out", True)):
        ix = [i for i, t in enumerate(trajs) if (t.question.id in env.heldout_ids) == keep]
        if not env.heldout_ids or not ix:
            continue
        sub = agent_metrics([trajs[i] for i in ix], [rewards[i] for i in ix],
                            tool_limits=env.limits)
        key = "heldout_" if keep else "train_"
        m.update({key + k: v for k, v in sub.items()})
        for h in (2, 3):
            if f"accuracy_hop{h}" in sub:
                n = sum(trajs[i].question.hops == h for i in ix)
                rows.append([h, name, n, sub[f"accuracy_hop{h}"], sub[f"turns_hop{h}"]])
    return icml.RunResult(
        metrics=m,
        tables=[icml.Table(f"Agent metrics ({len(trajs)} rollouts)",
                           ["hops", "questions", "rollouts", "accuracy (EM)", "mean turns"],
                           rows),
                icml.Table("Behaviour", ["metric", "value"],
                           [[k, m[k]] for k in ("premature_rate", "collapse_rate",
                                                "diverse_rate", "redundant_rate", "format_ok",
                                                "reward") if k in m])])
