"""Fidelity at equal budgets: tensor level (attention-output error with planted redundancy) and
model level (answer accuracy and KL(full || compressed) of a model's next-token distribution)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from icml_capkv.capacity import information_capacity
from icml_capkv.config import PressConfig
from icml_capkv.generation import continuation_logits, prefill
from icml_capkv.presses import POLICIES, make_press
from icml_capkv.scorers import capkv_relevance

__all__ = ["bootstrap_ci", "fidelity_table", "planted_redundancy", "spearman", "summarize",
           "tensor_benchmark", "verdict"]


def _kl(full_logits: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    p = full_logits.float().log_softmax(-1)
    q = logits.float().log_softmax(-1)
    return (p.exp() * (p - q)).sum(-1)


@torch.no_grad()
def fidelity_table(model: Any, contexts: torch.Tensor, questions: torch.Tensor,
                   answers: torch.Tensor | None, policies: Sequence[str],
                   ratios: Sequence[float], press: PressConfig | None = None,
                   batch_size: int = 64, progress: Callable | None = None) -> list[dict]:
    """For every policy and ratio: prefill ``contexts`` compressed by the policy, teacher-force
    ``questions`` and compare the next-token distribution after the question with the one on the
    full cache. Returns rows ``{policy, ratio, kept, accuracy, kl, top1_agree, scoring_s,
    prefill_s}``; ``accuracy`` is NaN without ``answers``. A ratio of 0 is the full cache.
    ``press`` is the settings every policy is built from (default ``PressConfig()``)."""
    for p in policies:
        if p not in POLICIES:
            raise ValueError(f"unknown policy {p!r}: use one of {', '.join(POLICIES)}")
    if contexts.shape[0] != questions.shape[0]:
        raise ValueError("contexts and questions must have the same batch size")
    chunks = [slice(i, i + batch_size) for i in range(0, contexts.shape[0], batch_size)]
    dev = next(model.parameters()).device
    full, t_full = [], 0.0
    for sl in chunks:
        t0 = time.perf_counter()
        cache = prefill(model, contexts[sl].to(dev))
        t_full += time.perf_counter() - t0
        full.append(continuation_logits(model, cache, questions[sl].to(dev))[:, -1].cpu())
    full_logits = torch.cat(full)
    full_correct = ((full_logits.argmax(-1) == answers.cpu()).float().tolist()
                    if answers is not None else [])
    rows = []
    jobs = [(p, r) for r in ratios for p in policies]
    for policy, ratio in (progress(jobs) if progress else jobs):
        built = make_press(policy, ratio, press)
        logits, scoring, kept, t_pre = [], 0.0, [], 0.0
        for sl in chunks:
            t0 = time.perf_counter()
            cache = prefill(model, contexts[sl].to(dev), built)
            t_pre += time.perf_counter() - t0
            scoring += built.last_scoring_s
            kept.append(sum(cache.physical_lengths()) / (len(cache.layers) * contexts.shape[1]))
            logits.append(continuation_logits(model, cache, questions[sl].to(dev))[:, -1].cpu())
        lg = torch.cat(logits)
        correct = ((lg.argmax(-1) == answers.cpu()).float().tolist() if answers is not None
                   else [])
        acc = sum(correct) / len(correct) if correct else math.nan
        kl_each = _kl(full_logits, lg)
        rows.append({"policy": policy, "ratio": float(ratio), "kept": sum(kept) / len(kept),
                     "accuracy": acc, "kl": float(kl_each.mean()),
                     "kl_each": kl_each.tolist(), "correct_each": correct,
                     "top1_agree": float((lg.argmax(-1) == full_logits.argmax(-1)).float().mean()),
                     "scoring_s": scoring, "prefill_s": t_pre - scoring, "full_prefill_s": t_full})
    rows.append({"policy": "full", "ratio": 0.0, "kept": 1.0,
                 "accuracy": (sum(full_correct) / len(full_correct) if full_correct
                              else math.nan),
                 "kl": 0.0, "kl_each": [0.0] * full_logits.shape[0],
                 "correct_each": full_correct, "top1_agree": 1.0, "scoring_s": 0.0,
                 "prefill_s": t_full,
                 "full_prefill_s": t_full})
    return rows


def bootstrap_ci(groups: Sequence[Sequence[float]], n_boot: int = 2000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float, float]:
    """Mean of all values in ``groups`` (one group of per-item values per trained model/seed)
    and its ``level`` interval by :func:`icml.stats.hierarchical_ci` with ``design="nested"``:
    each resample draws seeds with replacement, then items within each drawn seed, so the
    seed-to-seed variance counts (one group: a plain bootstrap over items). Returns
    ``(mean, lo, hi)``; a thin wrapper kept for the verdict tables' ``(mean, lo, hi)`` cells."""
    from icml import stats

    groups = [list(g) for g in groups]
    if not groups or any(len(g) == 0 for g in groups):
        raise ValueError("bootstrap_ci needs at least one non-empty group of values")
    est = stats.hierarchical_ci(groups, level=level, n_boot=n_boot, seed=seed, design="nested")
    return float(est.value), float(est.lo), float(est.hi)


def summarize(runs: Sequence[Sequence[dict]], key: str = "kl", n_boot: int = 2000,
              seed: int = 0) -> dict[tuple[str, float], tuple[float, float, float]]:
    """Pool :func:`fidelity_table` rows of several runs (one per trained model/seed) into
    ``{(policy, ratio): (mean, lo, hi)}`` with two-level (seeds, then items) bootstrap 95%
    intervals (:func:`bootstrap_ci`) of the mean
    per-question ``key`` (``"kl"`` or ``"accuracy"``; ``"ppl_ratio"`` for the per-document rows
    of :func:`icml_capkv.lm.continuation_fidelity`)."""
    field = {"kl": "kl_each", "accuracy": "correct_each", "ppl_ratio": "ppl_ratio_each"}.get(key)
    if field is None:
        raise ValueError(f"key must be 'kl', 'accuracy' or 'ppl_ratio', got {key!r}")
    cells: dict[tuple[str, float], list] = {}
    for rows in runs:
        for r in rows:
            cells.setdefault((r["policy"], r["ratio"]), []).append(r[field])
    return {c: bootstrap_ci(g, n_boot, seed=seed) for c, g in cells.items()}


def verdict(summary: dict, ratio: float, policy: str = "capkv", lower: bool = True,
            exclude: Sequence[str] = ("full",)) -> tuple[str, str]:
    """The tied-best rule, fixed before the results were seen: at ``ratio``, ``policy`` is
    ``"best"`` if its mean is the best of all policies (``exclude`` left out), ``"tied"`` if its
    95% interval overlaps the interval of the policy with the best mean, else ``"worse"``.
    Returns ``(verdict, best_other_policy)``."""
    cand = {p: v for (p, r), v in summary.items() if r == float(ratio) and p not in exclude}
    if policy not in cand:
        raise ValueError(f"no {policy!r} row at ratio {ratio} in the summary")
    others = {p: v for p, v in cand.items() if p != policy}
    if not others:
        return "best", policy
    sign = 1.0 if lower else -1.0
    best = min(others, key=lambda p: sign * others[p][0])
    m, lo, hi = cand[policy]
    bm, blo, bhi = others[best]
    if sign * m <= sign * bm:
        return "best", best
    return ("tied" if lo <= bhi and blo <= hi else "worse"), best


def planted_redundancy(T: int = 256, d: int = 16, heads: int = 4, n_unique: int = 24,
                       noise: float = 0.05, n_queries: int = 128, sharpness: float = 4.0,
                       query_mode: str = "retrieval", seed: int = 0) -> dict[str, torch.Tensor]:
    """Synthetic attention state with planted redundancy: ``T`` tokens (after 4 distinct sinks)
    that are noisy copies of ``n_unique`` prototypes with Zipf multiplicities, so a few
    prototypes fill most of the context and many are rare.

    ``query_mode="retrieval"``: each future query looks up one prototype (uniformly), ``q =
    sharpness * k_proto / ||k_proto|| * sqrt(d) + noise``, so attention is sharp and one copy of a
    prototype answers it as well as all copies. ``query_mode="diffuse"``: queries are ``N(mu,
    I/4)`` around one direction (soft attention, where the copy count matters). The observed
    queries (the prefill's last 16, for SnapKV/H2O) come from the same law as the future ones;
    the anchor is their mean. Shapes: keys/values ``(1, H, T, d)``, queries ``(1, H, n, d)``,
    anchor ``(1, H, d)``."""
    if query_mode not in ("retrieval", "diffuse"):
        raise ValueError(f"query_mode must be 'retrieval' or 'diffuse', got {query_mode!r}")
    g = torch.Generator().manual_seed(seed)
    H = heads
    protos_k = torch.randn(H, n_unique, d, generator=g)
    protos_v = torch.randn(H, n_unique, d, generator=g)
    probs = 1.0 / torch.arange(1, n_unique + 1, dtype=torch.float) ** 1.5
    assign = torch.multinomial(probs / probs.sum(), T, replacement=True, generator=g)
    keys = protos_k[:, assign] + noise * torch.randn(H, T, d, generator=g)
    values = protos_v[:, assign] + noise * torch.randn(H, T, d, generator=g)
    keys[:, :4] = torch.randn(H, 4, d, generator=g)
    values[:, :4] = torch.randn(H, 4, d, generator=g)
    present = assign.unique()
    mu = torch.randn(H, d, generator=g)

    def draw(n: int) -> torch.Tensor:
        if query_mode == "diffuse":
            return mu[:, None] + 0.5 * torch.randn(H, n, d, generator=g)
        pick = present[torch.randint(len(present), (n,), generator=g)]
        kp = protos_k[:, pick]
        q = sharpness * math.sqrt(d) * kp / kp.norm(dim=-1, keepdim=True)
        return q + 0.1 * torch.randn(H, n, d, generator=g)

    future, observed = draw(n_queries), draw(16)
    return {"keys": keys[None], "values": values[None], "future": future[None],
            "observed": observed[None], "anchor": observed.mean(1)[None]}


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    logits = torch.einsum("bhqd,bhtd->bhqt", q, k) / math.sqrt(k.shape[-1])
    return logits.softmax(-1) @ v


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation (no ties handling beyond average order)."""
    def rank(a: Sequence[float]) -> torch.Tensor:
        t = torch.tensor(list(a), dtype=torch.float64)
        return t.argsort().argsort().double()

    rx, ry = rank(x), rank(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return float((rx * ry).sum() / (rx.norm() * ry.norm()).clamp_min(1e-12))


def tensor_benchmark(ratios: Sequence[float] = (0.5, 0.75, 0.9),
                     policies: Sequence[str] = tuple(POLICIES), seeds: Sequence[int] = (0, 1, 2),
                     press: PressConfig | None = None, **setup: Any) -> tuple[list[dict], float]:
    """Relative attention-output error ``E_q ||o_full(q) - o_S(q)|| / ||o_full(q)||`` on
    :func:`planted_redundancy` states, per policy and ratio (mean over ``seeds``), with the
    information capacity of each retained set. Returns ``(rows, spearman(capacity, error))``.
    ``press`` is the settings every policy is built from (default ``PressConfig()``); the
    capacity measure weights tokens with its relevance (``tau``, ``normalize``)."""
    press = PressConfig() if press is None else press
    rows, caps, errs = [], [], []
    for ratio in ratios:
        for policy in policies:
            err_s, cap_s = [], []
            for seed in seeds:
                st = planted_redundancy(seed=seed, **setup)
                built = make_press(policy, ratio, press)
                k, v, idx = built.compress_tensors(st["keys"], st["values"],
                                                   queries=st["observed"],
                                                   query_anchor=st["anchor"])
                o_full = _attend(st["future"], st["keys"], st["values"])
                o = _attend(st["future"], k, v)
                err_s.append(float(((o - o_full).norm(dim=-1) / o_full.norm(dim=-1)).mean()))
                w = capkv_relevance(st["keys"], st["anchor"], press.tau,
                                    press.normalize).mean(2)
                cap_s.append(float(information_capacity(st["values"], w, idx).mean()))
            rows.append({"policy": policy, "ratio": float(ratio),
                         "error": sum(err_s) / len(err_s), "capacity": sum(cap_s) / len(cap_s)})
            caps.append(rows[-1]["capacity"])
            errs.append(rows[-1]["error"])
    return rows, spearman(caps, errs)
