"""Run any judge over a benchmark in each modality and compute the metric table with bootstrap
CIs, per category and per severity. A judge that raises or returns a bad score is recorded as a
failure (NaN) and counted in the report."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from icml_lalm_judge.config import StatsConfig
from icml_lalm_judge.dialogue import Benchmark, judge_view
from icml_lalm_judge.judges import JudgeError, check_modality, check_score
from icml_lalm_judge.metrics import (
    bootstrap_ci,
    sensitivity,
    severity_order_specificity,
    turn_position_bias,
)
from icml_lalm_judge.speech import Waveform


@dataclass
class ModalityReport:
    """Metrics of one judge in one modality (``*_ci`` are 95% bootstrap intervals)."""

    modality: str
    sensitivity: float
    sensitivity_ci: tuple[float, float]
    specificity: float
    specificity_ci: tuple[float, float]
    spearman: float
    item_specificity: float
    slope: float
    slope_ci: tuple[float, float]
    spread: float
    stability: float
    failures: int
    n: int
    per_severity: dict[int, float] = field(default_factory=dict)
    per_category: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class JudgeReport:
    """All modalities of one judge."""

    judge: str
    modalities: dict[str, ModalityReport]
    errors: list[str] = field(default_factory=list)


def score_all(judge: Any, bench: Benchmark, modality: str,
              audio: dict[str, Waveform] | None = None,
              progress: Callable | None = None) -> tuple[dict[str, float], list[str]]:
    """Scores of every dialogue (bases and variants) by id; failures become NaN and their
    messages are returned. Each judge is given :func:`~icml_lalm_judge.dialogue.judge_view`
    of the dialogue (text and speakers, no label) and its waveform; only a judge that declares
    ``reads_labels = True`` (the oracle and decay references, upper bounds) gets the labelled
    dialogue."""
    check_modality(judge, modality)
    if modality in ("A", "A+T") and audio is None:
        raise JudgeError(f"modality {modality} needs audio: synthesize the benchmark first")
    dialogues = bench.all_dialogues
    scores, errors = {}, []
    batch = getattr(judge, "score_batch", None)
    if modality == "A" and batch is not None and audio is not None:
        try:
            vals = batch([audio[d.id] for d in dialogues])
            for d, v in zip(dialogues, vals):
                scores[d.id] = check_score(judge.name, v)
            return scores, errors
        except JudgeError as exc:
            errors.append(str(exc))
            scores.clear()
    it = dialogues if progress is None else progress(dialogues)
    for d in it:
        try:
            wav = audio.get(d.id) if audio is not None else None
            seen = d if getattr(judge, "reads_labels", False) else judge_view(d)
            scores[d.id] = check_score(judge.name, judge.score(seen, modality, wav))
        except (JudgeError, ValueError, RuntimeError) as exc:
            scores[d.id] = float("nan")
            errors.append(f"{d.id}: {exc}")
    return scores, errors


def metrics_from_scores(bench: Benchmark, scores: dict[str, float], modality: str = "T",
                        n_boot: int | None = None, seed: int = 0) -> ModalityReport:
    """The metric row from a score per dialogue id; ``n_boot`` bootstrap resamples over bases
    (default ``StatsConfig().n_boot``)."""
    n_boot = StatsConfig().n_boot if n_boot is None else n_boot
    vs = bench.variants
    base = np.array([scores[v.base_id] for v in vs])
    var = np.array([scores[v.id] for v in vs])
    sev = np.array([v.severity for v in vs])
    pos = np.array([v.position for v in vs])
    length = np.array([v.n_turns for v in vs])
    groups = np.array([v.base_id for v in vs])
    cats = np.array([v.category for v in vs])
    delta = base - var
    pb = turn_position_bias(delta, pos, length)
    kw = dict(n=n_boot, seed=seed, groups=groups)
    failures = int(np.sum(~np.isfinite([scores[d.id] for d in bench.all_dialogues])))
    return ModalityReport(
        modality=modality,
        sensitivity=sensitivity(base, var),
        sensitivity_ci=bootstrap_ci(sensitivity, base, var, **kw),
        specificity=severity_order_specificity(var, sev),
        specificity_ci=bootstrap_ci(severity_order_specificity, var, sev, **kw),
        spearman=severity_order_specificity(var, sev, "spearman"),
        item_specificity=severity_order_specificity(var, sev, "item"),
        slope=pb["slope"],
        slope_ci=bootstrap_ci(lambda d, p, t: turn_position_bias(d, p, t)["slope"], delta, pos,
                              length, **kw),
        spread=pb["spread"], stability=pb["stability"], failures=failures,
        n=len(bench.all_dialogues),
        per_severity={int(k): sensitivity(base[sev == k], var[sev == k]) for k in np.unique(sev)},
        per_category={str(c): sensitivity(base[cats == c], var[cats == c])
                      for c in np.unique(cats)})


def evaluate_judge(judge: Any, bench: Benchmark, modalities: Sequence[str] = ("T", "A", "A+T"),
                   audio: dict[str, Waveform] | None = None, n_boot: int | None = None,
                   seed: int = 0, progress: Callable | None = None,
                   stats: StatsConfig | None = None) -> JudgeReport:
    """Score ``bench`` with ``judge`` in every supported modality of ``modalities`` and compute
    the metrics. Modalities the judge does not support are skipped and noted in ``errors``.
    The bootstrap takes ``stats`` (the config's section, default
    :class:`~icml_lalm_judge.config.StatsConfig`); ``n_boot`` overrides its resamples."""
    n_boot = (stats or StatsConfig()).n_boot if n_boot is None else n_boot
    import time

    out, errs = {}, []
    for m in modalities:
        if m not in judge.modalities:
            errs.append(f"{judge.name} does not support {m}")
            continue
        t0 = time.perf_counter()
        scores, e = score_all(judge, bench, m, audio, progress)
        rep = metrics_from_scores(bench, scores, m, n_boot=n_boot, seed=seed)
        rep.seconds = time.perf_counter() - t0
        out[m] = rep
        errs += e
    return JudgeReport(judge.name, out, errs)
