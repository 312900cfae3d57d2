"""Agent metrics: accuracy by hop count, mean turns, premature-answer and collapse rates, and the
paper's diverse- and redundant-trajectory rates (its Figure 1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from icml_dr_mmsearch.rewards import answer_correct, format_check


def diverse_rate(rewards: Sequence[float], turns: Sequence[int], groups: Sequence[Any],
                 tol: float = 1e-9) -> float:
    """Share of trajectories with *different lengths under identical reward*: a trajectory
    counts when another one of its group has the same reward (within ``tol``) and a different
    turn count."""
    n = len(rewards)
    if not (n == len(turns) == len(groups)):
        raise ValueError("rewards, turns and groups need the same length")
    if n == 0:
        return float("nan")
    hit = 0
    for i in range(n):
        for j in range(n):
            if (i != j and groups[i] == groups[j] and abs(rewards[i] - rewards[j]) <= tol
                    and turns[i] != turns[j]):
                hit += 1
                break
    return hit / n


def agent_metrics(trajs: Sequence[Any], rewards: Sequence[float] | None = None, *,
                  match: str = "EM", format_mode: str = "general",
                  tool_limits: dict[str, int] | None = None,
                  collapse_hops: int = 3) -> dict[str, float]:
    """Metrics of a list of :class:`~icml_dr_mmsearch.rollout.Trajectory`:

    ``accuracy`` and ``accuracy_hop{k}`` (EM of the last answer), ``turns`` and
    ``turns_hop{k}`` (mean model turns), ``searches``, ``format_ok``, ``premature_rate`` (share
    of the items that need searches answered after fewer than ``required_searches``),
    ``collapse_rate`` (share of ``collapse_hops``-hop rollouts answered in one turn, without a
    tool), ``redundant_rate`` (share issuing the same text query twice), ``diverse_rate`` (see
    :func:`diverse_rate`; needs ``rewards``), ``reward`` (mean)."""
    if not trajs:
        raise ValueError("no trajectories to measure")
    out: dict[str, float] = {}
    correct = [answer_correct(t.responses, t.question.answer, match) for t in trajs]
    turns = [t.turns for t in trajs]
    out["accuracy"] = sum(correct) / len(trajs)
    out["turns"] = sum(turns) / len(trajs)
    out["searches"] = sum(t.episode.searches for t in trajs) / len(trajs)
    fmts = [format_check(t.responses, mode=format_mode, tool_limits=tool_limits)[0]
            for t in trajs]
    out["format_ok"] = sum(fmts) / len(trajs)
    for h in sorted({t.question.hops for t in trajs}):
        ix = [i for i, t in enumerate(trajs) if t.question.hops == h]
        out[f"accuracy_hop{h}"] = sum(correct[i] for i in ix) / len(ix)
        out[f"turns_hop{h}"] = sum(turns[i] for i in ix) / len(ix)
        out[f"n_hop{h}"] = float(len(ix))
    need = [t for t in trajs if t.question.required_searches > 0]
    out["premature_rate"] = (sum(t.episode.searches < t.question.required_searches
                                 and t.episode.actions[-1:] == ["A"] for t in need) / len(need)
                             if need else float("nan"))
    deep = [t for t in trajs if t.question.hops == collapse_hops]
    out["collapse_rate"] = (sum(t.turns == 1 and t.episode.searches == 0 for t in deep)
                            / len(deep) if deep else float("nan"))
    out["redundant_rate"] = sum(t.episode.redundant for t in trajs) / len(trajs)
    if rewards is not None:
        if len(rewards) != len(trajs):
            raise ValueError(f"{len(rewards)} rewards for {len(trajs)} trajectories")
        out["reward"] = float(sum(rewards)) / len(trajs)
        out["diverse_rate"] = diverse_rate(list(rewards), turns, [t.group for t in trajs])
    return out


def paired_verdict(a: Sequence[float], b: Sequence[float], *, seed: int = 0) -> dict[str, Any]:
    """The decision rule for one comparison of two arms paired by seed (``a[i]`` and ``b[i]``
    from the same seed): ``mean(a - b)`` with a percentile bootstrap CI over seeds
    (``icml.stats.paired_diff_ci``), the MDE of the per-seed differences
    (``icml.stats.mde_from_samples``, alpha 0.05, power 0.8) and their sample sd (the seed
    spread, the tolerance).

    ``detected`` when the interval excludes 0 and ``|mean| > sd`` (a difference inside the seed
    spread is reported as none). The MDE does not decide: it is what the design could detect
    with 80% power, so a detected difference below it is still detected, only its size is
    imprecise (``below_mde``). ``label``: ``"no"``, ``"yes"`` or ``"yes, below MDE"``; ``sign``
    is +1/-1 for a detected difference (a above / below b), else 0. (0.3.0's rule also asked
    ``|mean| >= MDE``; no verdict of ``results/prereg.json`` depends on that.)"""
    import math

    from icml import stats

    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"paired_verdict needs two equal-length samples of >= 2 seeds, got "
                         f"{len(a)} and {len(b)}")
    est = stats.paired_diff_ci(list(a), list(b), seed=seed)
    d = [x - y for x, y in zip(a, b, strict=True)]
    mde = stats.mde_from_samples(d, seed=seed)
    mean = sum(d) / len(d)
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1))
    det = bool((est.lo > 0 or est.hi < 0) and abs(est.value) > sd)
    below = bool(det and abs(est.value) < mde)
    label = ("yes, below MDE" if below else "yes") if det else "no"
    return {"diff": est, "mde": mde, "sd": sd, "detected": det, "below_mde": below,
            "label": label, "sign": (1 if est.value > 0 else -1) if det else 0}
