"""Multi-attempt metrics: Verification@K, per-attempt pass rate, correction rate."""

from __future__ import annotations

from typing import Any

from icml_cal_grpo.advantages import _validate


def verification_at_k(rewards: Any, reached: Any = None, k: int | None = None) -> float:
    """Fraction of rollouts with a passing attempt among their first ``k`` (default: all)."""
    r, re = _validate(rewards, reached, 1)
    k = r.shape[1] if k is None else k
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    ok = (r[:, :k] > 0.5) & re[:, :k]
    return float(ok.any(dim=1).float().mean())


def per_attempt_pass_rate(rewards: Any, reached: Any = None) -> list[float]:
    """``P(first success at attempt k)`` over all rollouts, for ``k = 1..K``; these sum to
    Verification@K."""
    r, re = _validate(rewards, reached, 1)
    ok = (r > 0.5) & re
    first = ok & (ok.long().cumsum(dim=1) == 1)
    return [float(x) for x in first.float().mean(dim=0)]


def correction_rate(rewards: Any, reached: Any = None) -> list[float]:
    """``P(success at attempt k | attempts 1..k-1 failed)`` for ``k = 1..K`` (k = 1 is the
    first-attempt pass rate); NaN where no rollout reached attempt ``k`` with only failures."""
    r, re = _validate(rewards, reached, 1)
    ok = (r > 0.5) & re
    before = ok.long().cumsum(dim=1) - ok.long()
    at_risk = re & (before == 0)
    out = []
    for k in range(r.shape[1]):
        n = int(at_risk[:, k].sum())
        out.append(float((ok[:, k] & at_risk[:, k]).sum()) / n if n else float("nan"))
    return out


def attempt_metrics(rewards: Any, reached: Any = None) -> dict[str, float]:
    """Flat metrics dict: ``ver@k`` for each k, ``pass@attempt_k``, ``correction@k`` (k >= 2),
    ``mean_attempts``."""
    r, re = _validate(rewards, reached, 1)
    out: dict[str, float] = {}
    for k in range(1, r.shape[1] + 1):
        out[f"ver@{k}"] = verification_at_k(r, re, k)
    for k, v in enumerate(per_attempt_pass_rate(r, re), start=1):
        out[f"pass@attempt{k}"] = v
    for k, v in enumerate(correction_rate(r, re), start=1):
        if k > 1:
            out[f"correction@{k}"] = v
    out["mean_attempts"] = float(re.float().sum(dim=1).mean())
    return out
