"""Run both probes on a benchmark with one responder, judge every response, and report S_T,
S_C and the Abstraction Gap overall and per rung with bootstrap intervals.

A responder that fails on a batch gets empty responses for it (scored as the rubric scores
unparseable output, 0 for chains); a judge that fails on an item leaves that item out of that
probe's mean. Both are recorded in ``CageReport.failures`` and the run goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from icml_cage.dataset import CageBenchmark, CageItem, check_image
from icml_cage.judges import JudgeError, RuleJudge, answer_chain_consistency
from icml_cage.metrics import abstraction_gap, bootstrap_ci
from icml_cage.probes import Probe, chain_text_probe, parse_answer, parse_chain, text_only_probe
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

    def summary(self, n_boot: int = 1000, seed: int = 0) -> list[dict[str, Any]]:
        rows = []
        for rung in (*RUNGS, "overall"):
            group = [s for s in self.scores if rung == "overall" or s.rung == rung]
            pairs = [(s.text_score, s.chain_score) for s in group
                     if s.text_score is not None and s.chain_score is not None]
            if not pairs:
                continue
            t, c = [p[0] for p in pairs], [p[1] for p in pairs]
            s_t, s_c = sum(t) / len(t), sum(c) / len(c)
            lo, hi = bootstrap_ci(t, c, self.norm, n_boot=n_boot, seed=seed)
            rows.append({"responder": self.responder, "rung": rung, "n": len(pairs),
                         "S_text": s_t, "S_chain": s_c, "AG": abstraction_gap(s_t, s_c, self.norm),
                         "AG_lo": lo, "AG_hi": hi,
                         "text_acc": sum(s.text_correct for s in group) / len(group),
                         "chain_acc": sum(s.chain_correct for s in group) / len(group),
                         "blank_chains": sum(s.chain_blank for s in group) / len(group),
                         **_consistency(group)})
        return rows

    def to_json(self) -> dict[str, Any]:
        return {"responder": self.responder, "norm": self.norm, "failures": self.failures,
                "scores": [asdict(s) for s in self.scores]}


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
             norm: str = "relative", batch_size: int = 16,
             progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None) -> CageReport:
    """Score ``responder`` on ``bench`` with both probes (see module docstring)."""
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
            prompts = [probe.prompt(it.question) for it in batch]
            try:
                texts = responder.respond(images, prompts, batch)
                if len(texts) != len(batch):
                    raise ValueError(f"returned {len(texts)} responses for {len(batch)} prompts")
            except Exception as exc:  # keep going: the failed items score as blank output
                failures.append({"stage": f"respond:{probe.name}", "items": batch[0].id,
                                 "error": f"{type(exc).__name__}: {exc}"})
                texts = [""] * len(batch)
            for it, text in zip(batch, texts):
                responses[probe.name][it.id] = text if isinstance(text, str) else ""
    scores = []
    for it in bench.items:
        t_resp, c_resp = responses[text_probe.name][it.id], responses[chain_probe.name][it.id]
        t_score = _judge(judge.score_text, t_resp, it, failures, "judge:text")
        c_score = _judge(judge.score_chain, c_resp, it, failures, "judge:chain")
        scores.append(ItemScore(it.id, it.rung, it.family, t_score, c_score,
                                parse_answer(t_resp) == it.answer,
                                parse_answer(c_resp) == it.answer, not parse_chain(c_resp),
                                answer_chain_consistency(c_resp, it),
                                t_resp, c_resp))
    return CageReport(getattr(responder, "name", type(responder).__name__), norm, scores,
                      failures)


def _judge(fn: Callable[[str, CageItem], float], response: str, item: CageItem,
           failures: list[dict[str, str]], stage: str) -> float | None:
    try:
        return float(fn(response, item))
    except (JudgeError, Exception) as exc:
        failures.append({"stage": stage, "items": item.id, "error": f"{exc}"})
        return None
