"""The default jobs behind the hooks: make the primitive data, train the backbone, distil the
heads, decode with the autoregressive baseline and each acceptance rule, and tabulate speed-up
and quality."""

from __future__ import annotations

import math
from typing import Any

import icml
from icml_xspecmesh.config import EvaluateConfig, InferConfig, TrainConfig

AnyConfig = InferConfig | TrainConfig | EvaluateConfig
"""Any of the jobs' configs (each carries the data, backbone, head and decoding keys)."""

LABEL = {"topk": "top-k criterion", "greedy": "greedy (lossless)", "exact": "exact sampling"}


def prepare(ctx: icml.RunContext, cfg: AnyConfig) -> dict[str, Any]:
    """Tokenizer, dataset and a trained backbone."""
    import torch

    from icml_xspecmesh.backbone import build_backbone, train_backbone
    from icml_xspecmesh.dataset import CLASSES, make_primitive_dataset
    from icml_xspecmesh.tokenizer import MeshTokenizer

    tok = MeshTokenizer(n_bins=cfg.n_bins, n_classes=len(CLASSES), axis_tokens=cfg.axis_tokens)
    with ctx.step("making primitive meshes"):
        data = make_primitive_dataset(cfg.n_train, seed=ctx.seed, tokenizer=tok,
                                      rotate=cfg.rotate)
    if data.max_length + cfg.num_heads > 512:
        raise icml.ConfigError(f"config key 'n_bins': sequences of {data.max_length} tokens do "
                               "not fit the 512-position backbone")
    if cfg.model:
        model, losses = load_backbone(ctx, cfg.model, tok), []
    else:
        model = build_backbone(tok, arch=cfg.arch, hidden_size=cfg.hidden_size,
                               num_layers=cfg.num_layers, seed=ctx.seed,
                               device=ctx.torch_device(), dtype=ctx.torch_dtype(),
                               max_positions=512)
        losses = train_backbone(model, data, steps=cfg.backbone_steps,
                                batch_size=cfg.batch_size, lr=cfg.backbone_lr, seed=ctx.seed,
                                progress=ctx.progress)
    torch.manual_seed(ctx.seed)
    return {"tok": tok, "data": data, "model": model,
            "backbone_loss": sum(losses[-10:]) / max(len(losses[-10:]), 1) if losses else math.nan}


def load_backbone(ctx: icml.RunContext, spec: str, tok: Any) -> Any:
    """A backbone another run produced (``icml.compose.load_model``: trained, quantized ...),
    checked against the mesh vocabulary. Speculative decoding reads only the model's own final
    hidden state and logits, so a producer's transform needs no map here: heads are distilled
    on this very model."""
    from icml.compose import load_model

    with ctx.step(f"loading {spec}"):
        model, _ = load_model(spec, device=ctx.torch_device(), dtype=ctx.torch_dtype())
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    vocab = getattr(out, "out_features", None)
    if vocab != tok.vocab_size:
        raise icml.ConfigError(f"config key 'model': {spec!r} has {vocab} output tokens, the "
                               f"mesh tokenizer {tok.vocab_size} (n_bins={tok.n_bins}): pass a "
                               "backbone trained on this mesh vocabulary")
    return model


def make_heads(ctx: icml.RunContext, cfg: AnyConfig, info: dict[str, Any],
               loss: str) -> tuple[Any, list[float]]:
    from icml_xspecmesh.distill import distill_heads
    from icml_xspecmesh.heads import SpeculativeHeads

    heads = SpeculativeHeads.from_model(info["model"], num_heads=cfg.num_heads,
                                        num_layers=cfg.head_layers,
                                        cross_attention=cfg.cross_attention)
    losses = distill_heads(info["model"], heads, info["data"], loss=loss, steps=cfg.distill_steps,
                           lr=cfg.distill_lr, batch_size=cfg.batch_size, decay=cfg.decay,
                           temperature=cfg.decode.temperature, source=cfg.source, seed=ctx.seed,
                           progress=ctx.progress)
    return heads, losses


def _run(ctx: icml.RunContext, cfg: Any, info: dict[str, Any], arms: list[Any],
         refs: Any) -> list[Any]:
    from icml_xspecmesh.evaluation import run_arms

    labels = [i % info["tok"].n_classes for i in range(cfg.num_meshes)]
    return run_arms(info["model"], arms, info["tok"], labels, cfg.decode, refs=refs,
                    seed=ctx.seed + 1, max_new_tokens=cfg.max_new_tokens,
                    n_points=cfg.chamfer_points, progress=ctx.progress)


def _refs(ctx: icml.RunContext, cfg: Any, info: dict[str, Any]) -> Any:
    from icml_xspecmesh.evaluation import class_references

    with ctx.step("sampling class references"):
        return class_references(info["tok"], n_refs=cfg.n_refs, n_points=cfg.chamfer_points,
                                seed=ctx.seed + 7, rotate=cfg.rotate)


def _baseline_arms(rules: list[str]) -> list[Any]:
    """AR sampling (baseline of topk and exact) and AR greedy (baseline of greedy)."""
    from icml_xspecmesh.evaluation import Arm

    out = []
    if any(r != "greedy" for r in rules):
        out.append(Arm("AR sampling", None, "exact"))
    if "greedy" in rules:
        out.append(Arm("AR greedy", None, "greedy"))
    return out


def _base_of(results: list[Any], rule: str) -> Any:
    name = "AR greedy" if rule == "greedy" else "AR sampling"
    return next(r for r in results if r.name == name)


def _row(r: Any, base: Any, seed: int) -> list[Any]:
    cd, lo, hi = r.chamfer_ci(seed)
    return [r.name, r.tokens_per_call, r.calls_per_mesh,
            base.calls_per_mesh / r.calls_per_mesh, base.seconds / r.seconds,
            r.acceptance_rate if not math.isnan(r.acceptance_rate) else "-",
            r.valid_rate, "-" if math.isnan(cd) else f"{cd:.4f} [{lo:.4f}, {hi:.4f}]"]


COLUMNS = ["decoder", "tokens/call", "calls/mesh", "speed-up (calls)", "speed-up (wall)",
           "draft acceptance", "valid rate", "Chamfer [95% CI]"]


def _metrics(prefix: str, r: Any, base: Any) -> dict[str, float]:
    cd = r.chamfer_ci()[0]
    return {f"{prefix}_tokens_per_call": r.tokens_per_call,
            f"{prefix}_calls_per_mesh": r.calls_per_mesh,
            f"{prefix}_speedup_calls": base.calls_per_mesh / r.calls_per_mesh,
            f"{prefix}_speedup_wall": base.seconds / r.seconds,
            f"{prefix}_valid_rate": r.valid_rate, f"{prefix}_chamfer": cd}


def _plot(ctx: icml.RunContext, arms: list[Any], name: str) -> dict[str, str]:
    from icml.report import bar_plot

    png = bar_plot(ctx.path(name), {a.name: a.tokens_per_call for a in arms},
                   title="tokens per backbone call", ylabel="tokens / call")
    return {"tokens per call": png.name} if png is not None else {}


def infer_job(ctx: icml.RunContext, cfg: InferConfig) -> icml.RunResult:
    from icml_xspecmesh.evaluation import Arm

    info = prepare(ctx, cfg)
    ctx.record({"backbone_loss": info["backbone_loss"]})  # each finished stage is kept
    heads, hlosses = make_heads(ctx, cfg, info, cfg.loss)
    ctx.record({f"head_{cfg.loss}_loss": sum(hlosses[-10:]) / max(len(hlosses[-10:]), 1)})
    refs = _refs(ctx, cfg, info)
    bases = _baseline_arms(cfg.acceptance)
    arms = bases + [Arm(f"XSpecMesh {LABEL[r]}", heads, r) for r in cfg.acceptance]
    results = _run(ctx, cfg, info, arms, refs)
    rows, metrics = [], {}
    for r in results:
        base = _base_of(results, r.rule)
        rows.append(_row(r, base, ctx.seed))
        if r.name.startswith("AR"):
            metrics.update(_metrics("ar_" + ("greedy" if r.rule == "greedy" else "sample"), r,
                                    base))
        else:
            metrics.update(_metrics(f"spec_{r.rule}", r, base))
            if r.rule == "greedy":
                metrics["greedy_identical_to_ar"] = float(r.sequences == base.sequences)
    metrics["backbone_loss"] = info["backbone_loss"]
    metrics[f"head_{cfg.loss}_loss"] = sum(hlosses[-10:]) / max(len(hlosses[-10:]), 1)
    table = icml.Table(f"Speculative vs autoregressive decoding, {cfg.num_meshes} meshes, "
                       f"K={cfg.num_heads} {cfg.loss.upper()} heads", COLUMNS, rows)
    best = max(cfg.acceptance, key=lambda r: metrics[f"spec_{r}_speedup_calls"])
    notes = (f"Most calls saved here: {best}, {metrics[f'spec_{best}_speedup_calls']:.2f}x "
             "fewer backbone calls (paper: 1.7x). Calls include the prefill. The greedy rule is "
             "lossless (identical meshes), exact sampling preserves the AR distribution, the "
             "top-k criterion trades quality for accepted drafts (accept_top_k sets how much). "
             "Wall time is measured with every decoder interleaved mesh by mesh on this "
             "machine; on a tiny CPU model a verification call costs about as much as a "
             "one-token call, which large GPU models do not guarantee.")
    return icml.RunResult(metrics=metrics, tables=[table], artifacts=_plot(ctx, results,
                          "tokens_per_call.png"), notes=notes)


def train_job(ctx: icml.RunContext, cfg: TrainConfig) -> icml.RunResult:
    import torch

    from icml_xspecmesh.dataset import make_primitive_dataset, pad_collate
    from icml_xspecmesh.distill import distillation_loss, teacher_pass
    from icml_xspecmesh.evaluation import Arm

    info = prepare(ctx, cfg)
    held = make_primitive_dataset(64, seed=ctx.seed + 99, tokenizer=info["tok"],
                                  rotate=cfg.rotate)
    batch = pad_collate(held.sequences)
    device = next(info["model"].parameters()).device
    ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
    hidden, teacher = teacher_pass(info["model"], ids, mask)
    rows, metrics = [], {"backbone_loss": info["backbone_loss"]}
    refs = None
    for loss in cfg.losses:
        heads, losses = make_heads(ctx, cfg, info, loss)
        with torch.no_grad():
            cond = hidden[:, :2] if heads.cross_attention else None
            hl = heads(hidden, cond, mask[:, :2] if cond is not None else None)
            kl = float(distillation_loss(hl, teacher, mask, loss="kl", decay=cfg.decay))
            top1 = _head_top1(hl, teacher, mask)
        refs = refs or _refs(ctx, cfg, info)
        r = _run(ctx, cfg, info, [Arm(f"{loss.upper()} heads, top-k rule", heads, "topk")],
                 refs)[0]
        rows.append([loss, losses[-1] if losses else "-", kl, *top1, r.tokens_per_call])
        metrics[f"{loss}_heldout_kl"] = kl
        metrics[f"{loss}_tokens_per_call"] = r.tokens_per_call
        for k, v in enumerate(top1, 1):
            metrics[f"{loss}_head{k}_top1_agreement"] = v
        torch.save(heads.state_dict(), ctx.path(f"heads_{loss}.pt"))
    cols = (["loss", "final train loss", "held-out KL to backbone"] +
            [f"head {k} top-1 = backbone" for k in range(1, cfg.num_heads + 1)] +
            ["tokens/call (top-k rule)"])
    return icml.RunResult(metrics=metrics, tables=[icml.Table("Head training: KL distillation "
                          "vs cross-entropy", cols, rows)],
                          artifacts={f"heads ({x})": f"heads_{x}.pt" for x in cfg.losses})


def _head_top1(hl: Any, teacher: Any, mask: Any) -> list[float]:
    """Per head, how often its argmax equals the backbone's argmax at the target position."""
    T, K = hl.shape[1], hl.shape[2]
    out = []
    for k in range(1, K + 1):
        valid = mask[:, k + 1:T].bool()
        same = hl[:, :T - k - 1, k - 1].argmax(-1) == teacher[:, k:T - 1].argmax(-1)
        out.append(float(same[valid].float().mean()) if valid.any() else math.nan)
    return out


def evaluate_job(ctx: icml.RunContext, cfg: EvaluateConfig) -> icml.RunResult:
    from icml_xspecmesh.evaluation import Arm
    from icml_xspecmesh.metrics import bootstrap_diff_ci

    info = prepare(ctx, cfg)
    refs = _refs(ctx, cfg, info)
    arms = _baseline_arms(cfg.acceptance)
    for loss in cfg.losses:
        heads, _ = make_heads(ctx, cfg, info, loss)
        arms += [Arm(f"{loss.upper()} {LABEL[r]}", heads, r) for r in cfg.acceptance]
    results = _run(ctx, cfg, info, arms, refs)
    rows, qrows, metrics = [], [], {}
    for r in results:
        base = _base_of(results, r.rule)
        if r.name.startswith("AR"):
            rows.append(["-", *_row(r, base, ctx.seed)])
            continue
        loss = r.name.split(" ")[0].lower()
        rows.append([loss, *_row(r, base, ctx.seed)])
        metrics.update(_metrics(f"{loss}_{r.rule}", r, base))
        d, lo, hi = bootstrap_diff_ci(r.chamfer, base.chamfer, seed=ctx.seed)
        dv, lov, hiv = bootstrap_diff_ci([float(v) for v in r.valid],
                                         [float(v) for v in base.valid], seed=ctx.seed)
        qrows.append([r.name, base.name, f"{dv:+.3f} [{lov:+.3f}, {hiv:+.3f}]",
                      "-" if math.isnan(d) else f"{d:+.4f} [{lo:+.4f}, {hi:+.4f}]"])
        metrics[f"{loss}_{r.rule}_chamfer_diff"] = d
        metrics[f"{loss}_{r.rule}_valid_diff"] = dv
    return icml.RunResult(
        metrics=metrics,
        tables=[icml.Table(f"Speed-up and quality, {cfg.num_meshes} meshes per decoder",
                           ["heads", *COLUMNS], rows),
                icml.Table("Quality vs the autoregressive baseline (difference, bootstrap 95% CI; "
                           "0 inside the interval = no significant change)",
                           ["decoder", "baseline", "valid rate diff", "Chamfer diff"], qrows)],
        artifacts=_plot(ctx, results, "tokens_per_call.png"))
