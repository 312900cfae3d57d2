"""Hooks: `evaluate` runs the dual-probe benchmark; `train` exports chain-SFT data."""

from __future__ import annotations

import icml
from icml_cage.config import RESPONDERS, EvaluateConfig, TrainConfig

BIBTEX = """@inproceedings{hoang2026cage,
  title={The Abstraction Gap in Vision-Language Causal Reasoning},
  author={Hoang and Hasan},
  booktitle={International Conference on Machine Learning (ICML)},
  year={2026}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="cage",
        title="CAGE: the Causal Abstraction Gap Evaluation for vision-language models",
        summary="Dual-probe causal benchmark (text vs explicit chain) and the Abstraction Gap.",
        paper=icml.Paper(title="The Abstraction Gap in Vision-Language Causal Reasoning",
                         url="https://arxiv.org/abs/2605.28779", authors="Hoang, Hasan",
                         bibtex=BIBTEX),
        capabilities=("evaluate", "train"),
        configs={"evaluate": EvaluateConfig, "train": TrainConfig},
    )


def _responder(name: str, config: EvaluateConfig, ctx: icml.RunContext):  # noqa: ANN202
    from icml_cage.responders import FluentUnfaithfulResponder, OracleResponder, VLMResponder
    from icml_cage.tiny_vlm import load_vlm, tiny_llava, tiny_qwen2vl

    if name == "oracle":
        return OracleResponder()
    if name == "unfaithful":
        return FluentUnfaithfulResponder(seed=ctx.seed)
    device = ctx.torch_device()
    if name in ("tiny-llava", "tiny-llava-sft"):
        model, proc = tiny_llava(seed=ctx.seed, device=device)
        if name == "tiny-llava-sft":
            from icml_cage.dataset import generate_benchmark
            from icml_cage.finetune import chain_sft

            train = generate_benchmark(config.sft_images, seed=ctx.seed + 10_000,
                                       families=config.families, size=config.size)
            losses = chain_sft(model, proc, train, steps=config.sft_steps, seed=ctx.seed,
                               prompt_template=config.chain_prompt,
                               progress=lambda r: ctx.progress(r, desc="chain-SFT"))
            ctx.logger.info("chain-SFT loss %.3f -> %.3f", losses[0], losses[-1])
    elif name == "tiny-qwen2vl":
        model, proc = tiny_qwen2vl(seed=ctx.seed, device=device)
    else:
        if not config.model:
            raise icml.ConfigError("responder 'model' needs --set model=NAME_OR_PATH")
        model, proc = load_vlm(config.model, device=device)
    return VLMResponder(model, proc, max_new_tokens=config.max_new_tokens,
                        batch_size=config.batch_size, name=name)


_COLUMNS = ["responder", "rung", "n", "S_text", "S_chain", "AG", "AG 95% CI", "text acc",
            "chain acc", "blank chains", "answer-chain consistent"]


def _check_families(families: list[str]) -> None:
    """Unknown or no scene families are a config error (exit 2), found before any work."""
    from icml_cage.scenes import FAMILIES

    if not families:
        raise icml.ConfigError("config key 'families' is empty: name at least one of "
                               f"{', '.join(FAMILIES)}")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise icml.ConfigError(f"config key 'families': unknown scene family {unknown[0]!r}: "
                               f"use {', '.join(FAMILIES)} (or register one in "
                               "icml_cage.scenes.FAMILIES)")


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_cage.dataset import generate_benchmark
    from icml_cage.evaluate import evaluate
    from icml_cage.judges import RuleJudge
    from icml_cage.probes import chain_text_probe, text_only_probe

    unknown = [r for r in config.responders if r not in RESPONDERS]
    if unknown:
        raise icml.ConfigError(f"unknown responder(s) {unknown}: use {', '.join(RESPONDERS)}")
    _check_families(config.families)
    with ctx.step("generating scenes"):
        bench = generate_benchmark(config.n_images, seed=ctx.seed, families=config.families,
                                   size=config.size)
    if config.save_benchmark:
        bench.save(ctx.path("benchmark"))
    judge = RuleJudge(config.chain_metric, config.chain_weight, config.inconsistency_penalty)
    probes = dict(text_probe=text_only_probe(config.text_prompt),
                  chain_probe=chain_text_probe(config.chain_prompt))
    rows, metrics, failures, details = [], {}, [], {}
    for name in config.responders:
        responder = _responder(name, config, ctx)
        subset = bench
        if name not in ("oracle", "unfaithful") and config.vlm_items:
            subset = bench.subset(limit=config.vlm_items)
        report = evaluate(responder, subset, judge, norm=config.norm,
                          batch_size=config.batch_size, **probes,
                          progress=lambda b, n=name: ctx.progress(b, desc=f"{n}"))
        summary = report.summary(n_boot=config.n_bootstrap, seed=ctx.seed)
        details[name] = report.to_json()
        failures += [{**f, "responder": name} for f in report.failures]
        for row in summary:
            rows.append([name, row["rung"], row["n"], row["S_text"], row["S_chain"], row["AG"],
                         f"[{row['AG_lo']:.2f}, {row['AG_hi']:.2f}]", row["text_acc"],
                         row["chain_acc"], row["blank_chains"],
                         "-" if not row["n_consistency"] else
                         f"{row['consistency']:.2f} (n={row['n_consistency']})"])
            prefix = f"{name}.{row['rung']}"
            for key in ("S_text", "S_chain", "AG", "text_acc", "chain_acc"):
                metrics[f"{prefix}.{key}"] = float(row[key])
            ctx.record({f"{prefix}.{key}": float(row[key])
                        for key in ("S_text", "S_chain", "AG", "text_acc", "chain_acc")})
            ctx.record_row("Abstraction Gap per responder and rung (finished responders)",
                           _COLUMNS, rows[-1])
    import json

    ctx.path("items.json").write_text(json.dumps(details, indent=1))
    table = icml.Table("Abstraction Gap per responder and rung", _COLUMNS, rows)
    notes = (f"{len(bench.images)} scenes, {len(bench)} questions (families: "
             f"{', '.join(config.families)}); rule judge ({config.chain_metric}, weight "
             f"{config.chain_weight}); AG normaliser: {config.norm}. VLM responders answered the "
             f"first {config.vlm_items or len(bench)} questions. Tiny VLMs have random weights: "
             "they exercise the adapter path, they are not a claim about real VLMs.")
    if failures:
        notes += f"\n\n{len(failures)} failures were recorded (see items.json)."
        ctx.path("failures.json").write_text(json.dumps(failures, indent=1))
    return icml.RunResult(metrics=metrics, tables=[table],
                          artifacts={"per-item responses and scores": "items.json"}, notes=notes)


@icml.hookimpl
def icml_train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    from icml_cage.dataset import generate_benchmark
    from icml_cage.sft_export import export_sft

    _check_families(config.families)
    with ctx.step("generating scenes"):
        bench = generate_benchmark(config.n_images, seed=ctx.seed, families=config.families,
                                   size=config.size)
    path = export_sft(bench, ctx.path("sft"), config.chain_prompt)
    per_rung = {}
    for it in bench.items:
        per_rung[it.rung] = per_rung.get(it.rung, 0) + 1
    return icml.RunResult(
        metrics={"examples": float(len(bench)), "images": float(len(bench.images))},
        tables=[icml.Table("Chain-SFT export", ["rung", "examples"],
                           [[r, n] for r, n in per_rung.items()])],
        artifacts={"sft data (TRL conversational format)": str(path.relative_to(ctx.out_dir)),
                   "benchmark items": "sft/items.jsonl"},
        notes="Load with `datasets.load_dataset('json', data_files='sft/sft.jsonl')` and pass "
              "to TRL's SFTTrainer with your VLM's processor.")
