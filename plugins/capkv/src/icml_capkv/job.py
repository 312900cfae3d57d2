"""The default jobs behind the hooks: ``infer`` (a tiny model trained on associative recall, or a
user's model, and each eviction policy's fidelity to the full cache; the long-context needle
table on a packaged pretrained chat model) and ``evaluate`` (the tensor benchmark)."""

from __future__ import annotations

import math

import icml
from icml_capkv.config import EvaluateConfig, InferConfig


def infer_job(ctx: icml.RunContext, config: InferConfig) -> icml.RunResult:
    """The ``infer`` job: on a packaged pretrained chat model the long-context needle table;
    otherwise a tiny model trained on associative recall (or ``model=``) and the fidelity of
    each policy x ratio against the full cache."""
    import torch

    if config.model and _packaged(config.model):
        return _infer_long_context(ctx, config)

    from icml.compose import load_model
    from icml.report import line_plot
    from icml_capkv.fidelity import fidelity_table, summarize
    from icml_capkv.recall import RecallTask, train_recall_model

    device, dtype = ctx.torch_device(), ctx.torch_dtype()
    task = RecallTask(context_len=config.context_len, n_pairs=config.n_pairs,
                      n_keys=config.n_keys, n_values=config.n_values,
                      n_fillers=config.n_fillers, n_queries=config.n_queries,
                      layout=config.layout)
    metrics: dict[str, float] = {}
    if config.model:
        with ctx.step(f"loading {config.model}"):
            model, _ = load_model(config.model, device=device, dtype=dtype)
        vocab = model.get_input_embeddings().weight.shape[0]
        if vocab < task.vocab_size:
            raise icml.ConfigError(f"model vocabulary {vocab} is smaller than the recall task's "
                             f"{task.vocab_size} token ids: lower n_pairs/n_fillers")
    else:
        model, stats = train_recall_model(
            task, arch=config.arch, hidden_size=config.hidden_size, steps=config.train_steps,
            batch_size=config.batch_size, lr=config.lr, seed=ctx.seed, device=device,
            progress=lambda it: ctx.progress(it, desc="training tiny model on recall"))
        model = model.to(dtype)
        metrics.update(stats)
        ctx.record(stats)
    gen = torch.Generator().manual_seed(ctx.seed + 1)
    contexts, questions, answers = task.eval_batch(config.eval_samples, gen)
    rows = fidelity_table(model, contexts, questions, answers, config.policies, config.ratios,
                          press=config.press,
                          progress=lambda it: ctx.progress(it, desc="policies x ratios"))
    ratios = [float(r) for r in config.ratios]
    full = next(r for r in rows if r["policy"] == "full")
    metrics["full_accuracy"] = full["accuracy"]
    for r in rows:
        if r["policy"] != "full":
            metrics[f"kl/{r['policy']}/{r['ratio']}"] = r["kl"]
            metrics[f"accuracy/{r['policy']}/{r['ratio']}"] = r["accuracy"]
    cap = [r for r in rows if r["policy"] == "capkv"]
    if cap:
        metrics["capkv_scoring_over_prefill"] = (sum(r["scoring_s"] for r in cap) /
                                                 max(sum(r["full_prefill_s"] for r in cap),
                                                     1e-9))
    cols = ["policy"] + [f"r={r}" for r in ratios]
    tables = [
        icml.Table(f"Answer accuracy (full cache: {full['accuracy']:.3f})", cols,
                   _grid(rows, config.policies, ratios, "accuracy")),
        icml.Table("KL(full || compressed) of the answer distribution", cols,
                   _grid(rows, config.policies, ratios, "kl")),
    ]
    if "capkv" in config.policies and len(config.policies) > 1:
        vrows = _verdicts({k: summarize([rows], k, seed=ctx.seed) for k in ("kl", "accuracy")},
                          ratios, metrics)
        tables.append(icml.Table(
            "Is CapKV best or tied-best? (95% bootstrap intervals over questions; tied = "
            "CapKV's interval overlaps the best other policy's; greedy_logdet, the exact "
            "objective CapKV approximates, is not counted as a competitor; MDE = smallest "
            "CapKV - best-other gap these questions detect at 80% power, 5% level)",
            ["ratio", "metric", "capkv [95% CI]", "best other [95% CI]", "verdict", "MDE"],
            vrows))
    series = {p: (ratios, [max(v, 1e-6) for v in _grid(rows, [p], ratios, "kl")[0][1:]])
              for p in config.policies}
    artifacts = {}
    if line_plot(ctx.path("kl_vs_ratio.png"), series, title="KL(full || compressed)",
                 xlabel="compression ratio", ylabel="KL (nats)", logy=True):
        artifacts["kl_vs_ratio"] = "kl_vs_ratio.png"
    notes = ("Lowest KL per ratio: " + _best(rows, ratios, "kl") + ".\n\nHighest accuracy per "
             "ratio: " + _best(rows, ratios, "accuracy", lower=False) + ".")
    return icml.RunResult(metrics=metrics, tables=tables, artifacts=artifacts, notes=notes)


def evaluate_job(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    """The ``evaluate`` job: the tensor benchmark (relative attention-output error and the
    kept set's information capacity per policy x ratio, retrieval and diffuse queries)."""
    from icml.report import line_plot
    from icml_capkv.fidelity import tensor_benchmark

    modes = ["retrieval", "diffuse"] if config.query_mode == "both" else [config.query_mode]
    ratios = [float(r) for r in config.ratios]
    metrics, tables, artifacts, notes = {}, [], {}, []
    for mode in ctx.progress(modes, desc="tensor benchmark"):
        rows, rho = tensor_benchmark(ratios, config.policies, config.seeds, press=config.press,
                                     T=config.T, d=config.d, heads=config.heads,
                                     n_unique=config.n_unique, query_mode=mode)
        metrics[f"spearman_capacity_error/{mode}"] = rho
        for r in rows:
            metrics[f"error/{mode}/{r['policy']}/{r['ratio']}"] = r["error"]
        ctx.record({k: v for k, v in metrics.items() if f"/{mode}" in k})
        cols = ["policy"] + [f"r={r}" for r in ratios]
        tables.append(icml.Table(f"Relative attention-output error, {mode} queries", cols,
                                 _grid(rows, config.policies, ratios, "error")))
        tables.append(icml.Table(f"Information capacity of the kept set, {mode} queries", cols,
                                 _grid(rows, config.policies, ratios, "capacity")))
        series = {p: (ratios, _grid(rows, [p], ratios, "error")[0][1:]) for p in config.policies}
        if line_plot(ctx.path(f"error_{mode}.png"), series, title=f"{mode} queries",
                     xlabel="compression ratio", ylabel="relative output error"):
            artifacts[f"error_{mode}"] = f"error_{mode}.png"
        notes.append(f"{mode}: lowest error per ratio: {_best(rows, ratios, 'error')}; "
                     f"Spearman(capacity, error) = {rho:.3f}.")
    return icml.RunResult(metrics=metrics, tables=tables, artifacts=artifacts,
                          notes="\n\n".join(notes))


def _grid(rows: list[dict], policies: list[str], ratios: list[float], key: str) -> list[list]:
    out = []
    for p in policies:
        by_r = {r["ratio"]: r[key] for r in rows if r["policy"] == p}
        out.append([p] + [by_r.get(float(r), math.nan) for r in ratios])
    return out


def _best(rows: list[dict], ratios: list[float], key: str, lower: bool = True) -> str:
    lines = []
    for r in ratios:
        cand = [x for x in rows if x["ratio"] == float(r) and x["policy"] != "full"]
        if not cand:
            continue
        best = (min if lower else max)(cand, key=lambda x: x[key])
        lines.append(f"ratio {r}: {best['policy']} ({key} {best[key]:.4g})")
    return "; ".join(lines)


def _verdicts(summaries: dict, ratios: list[float], metrics: dict[str, float]) -> list[list]:
    from icml import stats
    from icml_capkv.fidelity import verdict

    out = []
    for r in ratios:
        for key, lower in (("kl", True), ("accuracy", False)):
            s = summaries[key]
            if ("capkv", r) not in s:
                continue
            v, best = verdict(s, r, lower=lower, exclude=("full", "greedy_logdet"))
            metrics[f"capkv_best_or_tied/{key}/{r}"] = float(v != "worse")

            def fmt(c: tuple[float, float, float]) -> str:
                return f"{c[0]:.4g} [{c[1]:.4g}, {c[2]:.4g}]"

            # MDE of the CapKV - best-other gap: the two intervals' standard errors (width /
            # 3.92), combined as independent; 80% power at the 5% level (icml.stats.mde)
            se = math.hypot(*((s[p, r][2] - s[p, r][1]) / 3.92 for p in ("capkv", best)))
            out.append([r, key, fmt(s["capkv", r]), f"{best} {fmt(s[best, r])}", v,
                        f"{stats.mde(se):.3g}"])
    return out


def _packaged(name: str) -> bool:
    """A packaged pretrained model, by its name or through a model a producer saved from one
    (``icml.compose``: a run folder or saved folder whose manifest's ``base`` is packaged)."""
    import json

    from icml.compose import MANIFEST, resolve_model_dir
    from icml.pretrained import PACKAGED_MODELS

    if name in PACKAGED_MODELS:
        return True
    try:
        manifest = resolve_model_dir(name) / MANIFEST
        base = json.loads(manifest.read_text(encoding="utf-8")).get("base", "")
    except (icml.ConfigError, OSError, ValueError):
        return False
    return base in PACKAGED_MODELS


def _infer_long_context(ctx: icml.RunContext, config: InferConfig) -> icml.RunResult:
    """A packaged pretrained chat model: the long-context needle table (policy x ratio, exact
    accuracy and KL with 95% bootstrap intervals over items, CapKV's tied-best verdicts)."""
    from icml.compose import load_model
    from icml_capkv.longctx import capkv_verdicts, evaluate_item, make_items, summarize_items

    with ctx.step(f"loading {config.model}"):
        model, tok = load_model(config.model, device=ctx.torch_device(),
                                dtype=ctx.torch_dtype())
    policies = [p for p in config.policies if p != "greedy_logdet"]  # O(T^2 d) per step
    modes = {"agnostic": (False,), "aware": (True,), "both": (False, True)}[
        config.question_aware]
    ratios = [float(r) for r in config.ratios]
    jobs = [(t, it) for t in config.long_tasks
            for it in make_items(tok, t, config.long_context_len, config.long_items,
                                 seed=ctx.seed)]
    recs = []
    for task, item in ctx.progress(jobs, desc="long-context items"):
        recs.append({"task": task, "length": config.long_context_len,
                     "rows": evaluate_item(model, item, policies, ratios, modes, config.press)})
    metrics: dict[str, float] = {}
    tables = []
    cols = ["policy"] + [f"acc r={r}" for r in ratios] + [f"KL r={r}" for r in ratios]
    for (task, length, aware), s in sorted(summarize_items(recs, seed=ctx.seed).items()):
        mode = "aware" if aware else "agnostic"
        metrics[f"full_accuracy/{task}/{mode}"] = s["full_accuracy"]
        rows = []
        for p in policies:
            row = [p]
            for metric in ("correct", "kl"):
                for r in ratios:
                    m, lo, hi = s[metric][p, r]
                    row.append(f"{m:.3g} [{lo:.3g}, {hi:.3g}]")
                    metrics[f"{'accuracy' if metric == 'correct' else 'kl'}/{task}/{mode}/"
                            f"{p}/{r}"] = m
            rows.append(row)
        tables.append(icml.Table(
            f"{task}, {length} tokens, question-{mode}: exact accuracy and KL [95% CI] "
            f"({s['n']} items, full-cache accuracy {s['full_accuracy']:.2f})", cols, rows))
        vrows = [[r, m, v, b] for r, m, v, b in capkv_verdicts(s, ratios)]
        for r, m, v, _ in vrows:
            metrics[f"capkv_best_or_tied/{task}/{mode}/{m}/{r}"] = float(v in ("best", "tied"))
        tables.append(icml.Table(f"{task}, question-{mode}: is CapKV best or tied-best? (tied "
                                 "= 95% intervals overlap with the best other policy's)",
                                 ["ratio", "metric", "verdict", "best other"], vrows))
    cap = [r["scoring_s"] for rec in recs for r in rec["rows"]
           if r["policy"] == "capkv" and r["ratio"] == ratios[0]]
    pre = [r["prefill_s"] for rec in recs for r in rec["rows"] if r["policy"] == "full"]
    if cap and pre:
        metrics["capkv_scoring_over_prefill"] = sum(cap) / max(sum(pre), 1e-9)
    return icml.RunResult(metrics=metrics, tables=tables,
                          notes=f"{config.model}, {len(jobs)} items; exact grading = greedy "
                                "decoding reproduces the answer tokens.")
