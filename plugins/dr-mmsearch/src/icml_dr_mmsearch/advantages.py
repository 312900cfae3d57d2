"""Advantages: group GRPO (the baseline's) and DR-MMSearchAgent's batch-level
structural-proximity advantage (reconstructed from the abstract).

Each trajectory has a structure ``s_i = (T_i turns, tool sequence sigma_i over {I, T, A, X},
model-token length L_i)``. The proximity advantage adds to the group advantage a second term
against a kernel-weighted leave-one-out baseline over the *whole batch*::

    d_ij = |T_i - T_j| / K + lev(sigma_i, sigma_j) / max(|sigma_i|, |sigma_j|)
           + length_weight * |L_i - L_j| / L_max
    w_ij = exp(-d_ij / tau)                  (j != i)
    b_i  = sum_j w_ij R_j / sum_j w_ij
    A_i  = (R_i - mean_g R) / std_g  +  eta * (R_i - b_i) / std_B(R - b)
           [+ kappa * R_i * (1 - mean_j w_ij)]   (optional rarity bonus)

Limits (tested): all rewards equal -> 0; identical structures -> ``b_i`` is the leave-one-out
batch mean; ``tau -> inf`` -> the leave-one-out batch mean; ``tau -> 0`` -> the mean over the
nearest structures; permutation-equivariant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SCALES = ("group", "batch", "none")


@dataclass(frozen=True)
class Structure:
    """A trajectory's structure: turns, tool sequence (e.g. ``"ITTA"``) and model tokens."""

    turns: int
    tools: str
    length: int = 0


def levenshtein(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Edit distance (insert, delete, substitute; unit costs)."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def _as_tensor(x: Any) -> Any:
    import torch

    t = torch.as_tensor(x, dtype=torch.float64)
    if t.ndim != 1:
        raise ValueError(f"rewards must be 1-D, got shape {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError("rewards contain nan or inf")
    return t


def _groups(n: int, group_ids: Sequence[Any] | None, group_size: int | None) -> list[list[int]]:
    if group_ids is not None:
        if len(group_ids) != n:
            raise ValueError(f"group_ids has {len(group_ids)} entries for {n} rewards")
        out: dict[Any, list[int]] = {}
        for i, g in enumerate(group_ids):
            out.setdefault(g, []).append(i)
        return list(out.values())
    if group_size is None:
        return [list(range(n))]
    if group_size < 1 or n % group_size:
        raise ValueError(f"{n} rewards do not split into groups of {group_size}: pass "
                         "group_ids or a group_size dividing the batch")
    return [list(range(s, s + group_size)) for s in range(0, n, group_size)]


def group_advantages(rewards: Any, *, group_ids: Sequence[Any] | None = None,
                     group_size: int | None = None, scale: str = "group",
                     eps: float = 1e-6) -> Any:
    """GRPO advantages ``(R_i - mean_g R) / (std_g R + eps)`` (``scale="group"``, unbiased std
    as in veRL/TRL), or divided by the batch std (``"batch"``), or not scaled (``"none"``).
    Groups come from ``group_ids`` or consecutive blocks of ``group_size``; a group of one gets
    advantage 0. Returns a float64 tensor."""
    import torch

    if scale not in SCALES:
        raise ValueError(f"scale {scale!r} is not known: use one of {', '.join(SCALES)}")
    r = _as_tensor(rewards)
    adv = torch.zeros_like(r)
    for idx in _groups(len(r), group_ids, group_size):
        ix = torch.tensor(idx)
        g = r[ix]
        centred = g - g.mean()
        if scale == "group":
            sd = g.std(unbiased=True) if len(idx) > 1 else torch.tensor(0.0, dtype=r.dtype)
            centred = centred / (sd + eps)
        adv[ix] = centred
    if scale == "batch":
        sd = adv.std(unbiased=True) if len(r) > 1 else torch.tensor(0.0, dtype=r.dtype)
        adv = adv / (sd + eps)
    return adv


def structure_distances(structures: Sequence[Structure], *, max_turns: float | None = None,
                        length_weight: float = 0.0, max_length: float | None = None) -> Any:
    """The ``[N, N]`` structural distance matrix ``d_ij`` of the module docstring. ``max_turns``
    (``K``) defaults to the largest turn count in the batch, ``max_length`` to the largest
    length."""
    import torch

    n = len(structures)
    if n == 0:
        raise ValueError("structures is empty")
    k = float(max_turns or max(max(s.turns for s in structures), 1))
    lmax = float(max_length or max(max(s.length for s in structures), 1))
    d = torch.zeros((n, n), dtype=torch.float64)
    for i in range(n):
        for j in range(i + 1, n):
            a, b = structures[i], structures[j]
            v = abs(a.turns - b.turns) / k
            m = max(len(a.tools), len(b.tools))
            if m:
                v += levenshtein(a.tools, b.tools) / m
            if length_weight:
                v += length_weight * abs(a.length - b.length) / lmax
            d[i, j] = d[j, i] = v
    return d


def proximity_baseline(rewards: Any, structures: Sequence[Structure], *, tau: float = 0.5,
                       max_turns: float | None = None, length_weight: float = 0.0,
                       max_length: float | None = None) -> tuple[Any, Any]:
    """``(b, mean_w)``: the kernel-weighted leave-one-out baseline ``b_i`` and each
    trajectory's mean kernel weight to the others (for the rarity bonus). ``tau = 0`` gives
    the mean over the nearest structures, ``tau = inf`` the leave-one-out batch mean."""
    import torch

    r = _as_tensor(rewards)
    n = len(r)
    if len(structures) != n:
        raise ValueError(f"{len(structures)} structures for {n} rewards")
    if tau < 0 or (isinstance(tau, float) and math.isnan(tau)):
        raise ValueError(f"tau must be >= 0, got {tau}")
    if n == 1:
        return r.clone(), torch.zeros_like(r)
    d = structure_distances(structures, max_turns=max_turns, length_weight=length_weight,
                            max_length=max_length)
    off = ~torch.eye(n, dtype=torch.bool)
    if math.isinf(tau):
        w = off.to(torch.float64)
        raw = w
    elif tau == 0:
        dm = d.masked_fill(~off, float("inf"))
        nearest = dm <= dm.min(dim=1, keepdim=True).values + 1e-12
        w = (nearest & off).to(torch.float64)
        raw = torch.zeros_like(d)
    else:
        dm = d.masked_fill(~off, float("inf"))
        shift = dm.min(dim=1, keepdim=True).values          # stable: the nearest gets weight 1
        w = torch.exp(-(dm - shift) / tau)
        raw = torch.exp(-dm / tau)
    b = (w * r[None, :]).sum(dim=1) / w.sum(dim=1)
    mean_w = raw.sum(dim=1) / (n - 1)
    return b, mean_w


def structural_proximity_advantages(rewards: Any, structures: Sequence[Structure], *,
                                    group_ids: Sequence[Any] | None = None,
                                    group_size: int | None = None, tau: float = 0.5,
                                    eta: float = 1.0, kappa: float = 0.0,
                                    length_weight: float = 0.0, max_turns: float | None = None,
                                    max_length: float | None = None, scale: str = "group",
                                    eps: float = 1e-6) -> Any:
    """DR-MMSearchAgent's structural-proximity advantage (reconstructed; module docstring):
    the group GRPO advantage plus ``eta`` times the batch-standardised residual against the
    kernel-weighted leave-one-out baseline, plus the optional rarity bonus ``kappa``. ``eta =
    0`` and ``kappa = 0`` give back :func:`group_advantages`. Returns a float64 tensor."""
    r = _as_tensor(rewards)
    base = group_advantages(r, group_ids=group_ids, group_size=group_size, scale=scale, eps=eps)
    if eta == 0 and kappa == 0:
        return base
    b, mean_w = proximity_baseline(r, structures, tau=tau, max_turns=max_turns,
                                   length_weight=length_weight, max_length=max_length)
    resid = r - b
    sd = resid.std(unbiased=True) if len(r) > 1 else resid.abs().sum()
    adv = base + eta * resid / (sd + eps)
    if kappa:
        adv = adv + kappa * r * (1 - mean_w)
    return adv
