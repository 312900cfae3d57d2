"""Run both probes on a benchmark with one responder, judge every response, and report S_T,
S_C and the Abstraction Gap overall and per rung with bootstrap intervals, and the distribution
of the per-item AG.

The responder is given :class:`~icml_cage.probes.Query` objects only (image, question, the
probe's prompt and budget, the picture's caption), never the items with their gold fields.

A responder that fails on a batch gets empty responses for it (scored as the rubric scores
unparseable output, 0 for chains); a judge that fails on an item leaves that item out of that
probe's mean. Both are recorded in ``CageReport.failures`` and the run goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from icml_cage.config import GapConfig
from icml_cage.dataset import CageBenchmark, CageItem, check_image
from icml_cage.judges import JudgeError, RuleJudge, answer_chain_consistency
from icml_cage.metrics import abstraction_gap, bootstrap_ci, gap_flag, item_gap
from icml_cage.probes import (
    Probe,
    Query,
    chain_text_probe,
    parse_answer,
    parse_chain,
    text_only_probe,
)
from icml_cage.questions import RUNGS


@dataclass
class ItemScore:
    id: str
    rung: str
    family: str
    text_score: float | None
    chain_score: float | None
    text_correct: bool
    chain_correct: bool
    chain_blank: bool
    consistent: bool | None
    text_response: str
    chain_response: str


@dataclass
class CageReport:
    """Per-item scores of one responder, and the per-rung summary."""

    responder: str
    norm: str
    scores: list[ItemScore]
    failures: list[dict[str, str]] = field(default_factory=list)
    floor: float | None = None  # AG undefined below it (default GapConfig().floor)

    def summary(self, n_boot: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
        """Per rung and overall: S_T, S_C, AG with a bootstrap interval of ``n_boot``
        resamples (default ``GapConfig().n_bootstrap``; 0 = none), the per-item AG. ``AG`` is
        NaN and ``AG_flag`` says why when it is undefined (both scores below ``floor``, or a
        zero normaliser); ``AG_flag`` is ``""`` otherwise."""
        n_boot = GapConfig().n_bootstrap if n_boot is None else n_boot
        rows = []
        for rung in (*RUNGS, "overall"):
            group = [s for s in self.scores if rung == "overall" or s.rung == rung]
            pairs = [(s.text_score, s.chain_score) for s in group
                     if s.text_score is not None and s.chain_score is not None]
            if not pairs:
                continue
            t, c = [p[0] for p in pairs], [p[1] for p in pairs]
            s_t, s_c = sum(t) / len(t), sum(c) / len(c)
            gaps = sorted(g for g in (item_gap(a, b, floor=self.floor) for a, b in pairs)
                          if g == g)
            lo, hi = bootstrap_ci(t, c, self.norm, n_boot=n_boot, seed=seed, floor=self.floor)
            rows.append({"responder": self.responder, "rung": rung, "n": len(pairs),
                         "S_text": s_t, "S_chain": s_c,
                         "AG": abstraction_gap(s_t, s_c, self.norm, floor=self.floor),
                         "AG_flag": gap_flag(s_t, s_c, self.norm, self.floor),
                         "AG_lo": lo, "AG_hi": hi,
                         "text_acc": sum(s.text_correct for s in group) / len(group),
                         "chain_acc": sum(s.chain_correct for s in group) / len(group),
                         "blank_chains": sum(s.chain_blank for s in group) / len(group),
                         **_distribution(gaps), **_consistency(group)})
        return rows

    def responses(self) -> tuple[dict[str, str], dict[str, str]]:
        """Item id -> response under the Text-Only and the Chain-Text probe."""
        return ({s.id: s.text_response for s in self.scores},
                {s.id: s.chain_response for s in self.scores})

    def item_gaps(self) -> list[float]:
        """Per-item AG, ``(t - c) / t`` (NaN when undefined), in item order."""
        return [item_gap(s.text_score, s.chain_score, floor=self.floor)
                if s.text_score is not None and s.chain_score is not None else float("nan")
                for s in self.scores]

    def to_json(self) -> dict[str, Any]:
        return {"responder": self.responder, "norm": self.norm, "failures": self.failures,
                "scores": [{**asdict(s), "item_AG": g}
                           for s, g in zip(self.scores, self.item_gaps())]}


def _distribution(gaps: Sequence[float]) -> dict[str, float]:
    """Per-item AG: mean, quartiles and the share of items above 0.5 (NaN when none)."""
    import numpy as np

    if not gaps:
        return {k: float("nan") for k in ("AG_item_mean", "AG_item_q25", "AG_item_median",
                                          "AG_item_q75", "AG_item_gt_half")} | {"n_item_AG": 0}
    q25, q50, q75 = np.quantile(gaps, [0.25, 0.5, 0.75])
    return {"AG_item_mean": float(np.mean(gaps)), "AG_item_q25": float(q25),
            "AG_item_median": float(q50), "AG_item_q75": float(q75),
            "AG_item_gt_half": float(np.mean(np.asarray(gaps) > 0.5)), "n_item_AG": len(gaps)}


def _consistency(group: Sequence[ItemScore]) -> dict[str, float]:
    """Share of chain answers consistent with the effect state their chain states, over the
    items where the chain states one (NaN when none does)."""
    checked = [s.consistent for s in group if s.consistent is not None]
    return {"consistency": sum(checked) / len(checked) if checked else float("nan"),
            "n_consistency": len(checked)}


def _batches(items: Sequence[CageItem], size: int) -> Iterable[Sequence[CageItem]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def evaluate(responder: Any, bench: CageBenchmark, judge: Any = None,
             text_probe: Probe | None = None, chain_probe: Probe | None = None,
             gap: GapConfig | None = None, batch_size: int = 16,
             progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None) -> CageReport:
    """Score ``responder`` on ``bench`` with both probes (see module docstring); ``gap`` (the
    config's ``gap`` section, default :class:`~icml_cage.config.GapConfig`) sets the report's
    AG normaliser."""
    if len(bench) == 0:
        raise ValueError("the benchmark is empty: generate at least one image")
    judge = judge or RuleJudge()
    text_probe, chain_probe = text_probe or text_only_probe(), chain_probe or chain_text_probe()
    failures: list[dict[str, str]] = []
    responses: dict[str, dict[str, str]] = {p.name: {} for p in (text_probe, chain_probe)}
    batches = list(_batches(bench.items, batch_size))
    for batch in (progress or (lambda x: x))(batches):
        images = [check_image(bench.image(it), it.image_id) for it in batch]
        for probe in (text_probe, chain_probe):
            queries = [Query(it.id, img, it.question, probe.prompt(it.question), probe.name,
                             probe.max_new_tokens, bench.captions.get(it.image_id, ""))
                       for it, img in zip(batch, images)]
            try:
                texts = responder.respond(queries)
                if len(texts) != len(batch):
                    raise ValueError(f"returned {len(texts)} responses for {len(batch)} prompts")
            except Exception as exc:  # keep going: the failed items score as blank output
                failures.append({"stage": f"respond:{probe.name}", "items": batch[0].id,
                                 "error": f"{type(exc).__name__}: {exc}"})
                texts = [""] * len(batch)
            for it, text in zip(batch, texts):
                responses[probe.name][it.id] = text if isinstance(text, str) else ""
    report = score_responses(getattr(responder, "name", type(responder).__name__), bench,
                             responses[text_probe.name], responses[chain_probe.name], judge,
                             gap)
    report.failures[:0] = failures
    return report


def score_responses(name: str, bench: CageBenchmark, text: dict[str, str], chain: dict[str, str],
                    judge: Any = None, gap: GapConfig | None = None) -> CageReport:
    """Judge stored responses (item id -> text under each probe); rejudging a report with
    another judge: ``score_responses(r.responder, bench, *r.responses(), judge)``."""
    judge = judge or RuleJudge()
    failures: list[dict[str, str]] = []
    scores = []
    batched: dict[str, list[float | None]] = {}
    if hasattr(judge, "score_many"):  # one batched pass per probe (model judges)
        for probe, resp in (("text", text), ("chain", chain)):
            try:
                batched[probe] = list(judge.score_many([resp[it.id] for it in bench.items],
                                                       bench.items, probe))
            except Exception as exc:
                failures.append({"stage": f"judge:{probe}", "items": bench.items[0].id,
                                 "error": f"{type(exc).__name__}: {exc}"})
                batched[probe] = [None] * len(bench.items)
    for n, it in enumerate(bench.items):
        t_resp, c_resp = text[it.id], chain[it.id]
        t_score = (batched["text"][n] if batched else
                   _judge(judge.score_text, t_resp, it, failures, "judge:text"))
        c_score = (batched["chain"][n] if batched else
                   _judge(judge.score_chain, c_resp, it, failures, "judge:chain"))
        scores.append(ItemScore(it.id, it.rung, it.family, t_score, c_score,
                                parse_answer(t_resp) == it.answer,
                                parse_answer(c_resp) == it.answer, not parse_chain(c_resp),
                                answer_chain_consistency(c_resp, it),
                                t_resp, c_resp))
    gap = gap or GapConfig()
    return CageReport(name, gap.norm, scores, failures, floor=gap.floor)


def _judge(fn: Callable[[str, CageItem], float], response: str, item: CageItem,
           failures: list[dict[str, str]], stage: str) -> float | None:
    try:
        return float(fn(response, item))
    except (JudgeError, Exception) as exc:
        failures.append({"stage": stage, "items": item.id, "error": f"{exc}"})
        return None


def _ranks(v: Any) -> Any:
    """Average ranks (ties share their mean rank), for Spearman's correlation."""
    import numpy as np

    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v), dtype=float)
    ranks[order] = np.arange(len(v), dtype=float)
    for value in np.unique(v):
        tie = v == value
        ranks[tie] = ranks[tie].mean()
    return ranks


def _pairs(a: CageReport, b: CageReport, probe: str) -> tuple[Any, Any]:
    """Both judges' scores of the items both scored, under ``probe``."""
    import numpy as np

    sb = {s.id: s for s in b.scores}
    pairs = [(getattr(s, f"{probe}_score"), getattr(sb[s.id], f"{probe}_score"))
             for s in a.scores if s.id in sb]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
    return (np.asarray([p[0] for p in pairs], dtype=float),
            np.asarray([p[1] for p in pairs], dtype=float))


def _corr(x: Any, y: Any) -> float:
    import numpy as np

    if len(x) < 3 or x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def _spearman(x: Any, y: Any) -> float:
    return _corr(_ranks(x), _ranks(y)) if len(x) else float("nan")


def agreement_pairs(reports: Sequence[tuple[CageReport, CageReport]], probe: str
                    ) -> tuple[Any, Any]:
    """The two judges' item scores under ``probe``, pooled over several responders' report
    pairs ``(judge a, judge b)``."""
    import numpy as np

    xs, ys = zip(*(_pairs(a, b, probe) for a, b in reports)) if reports else ((), ())
    return (np.concatenate(xs) if xs else np.zeros(0), np.concatenate(ys) if ys else np.zeros(0))


def agreement_ci(x: Any, y: Any, n_boot: int = 1000, seed: int = 0
                 ) -> dict[str, Any]:
    """Pearson, Spearman and the mean absolute difference of two judges' item scores, each an
    ``icml.stats.Estimate`` (percentile bootstrap over items; ``None`` where a judge gives
    every item the same score, so no correlation exists)."""
    from icml import stats

    out: dict[str, Any] = {"n": len(x)}
    for key, fn in (("pearson", _corr), ("spearman", _spearman)):
        try:
            out[key] = stats.bootstrap(fn, x, y, n_boot=n_boot, seed=seed) \
                if len(x) > 2 and fn(x, y) == fn(x, y) else None
        except ValueError:  # (almost) every resample constant
            out[key] = None
    out["mad"] = stats.mean_ci(abs(x - y), n_boot=n_boot, seed=seed) if len(x) else None
    return out


def judge_agreement(a: CageReport, b: CageReport) -> dict[str, float]:
    """How two judges of the same responses agree: Pearson and Spearman correlation of the
    item scores per probe, the mean absolute difference, and both judges' AG (NaN where
    undefined). :func:`agreement_ci` gives the intervals."""
    import numpy as np

    out: dict[str, float] = {}
    for probe in ("text", "chain"):
        x, y = _pairs(a, b, probe)
        out[f"{probe}_n"] = float(len(x))
        out[f"{probe}_mad"] = float(np.mean(np.abs(x - y))) if len(x) else float("nan")
        out[f"{probe}_pearson"] = _corr(x, y)
        out[f"{probe}_spearman"] = _spearman(x, y)
    for tag, rep in (("a", a), ("b", b)):
        row = next((r for r in rep.summary(n_boot=0) if r["rung"] == "overall"), None)
        out[f"AG_{tag}"] = row["AG"] if row else float("nan")
    return out
