"""Attempt-level advantage estimators for multi-attempt RL (the paper's weighting strategies).

Setting: a group of rollouts answers one prompt; rollout ``i`` makes attempts ``k = 1..K``, a hard
verifier gives ``r[i, k]`` in {0, 1}, and generation stops at the first success. The objective is
Verification@K, ``R_i = max_k r[i, k]`` over the attempts the rollout reached. Every estimator
returns one advantage per attempt, ``A[i, k]``, which the loss broadcasts to that attempt's tokens
(prompt and feedback tokens get none).

Modes (``mode=``):

* ``"trajectory"`` -- vanilla GRPO: ``A[i, k] = (R_i - b_i) / s`` for every reached attempt.
  Unbiased (up to the std scaling) but its baseline ignores that attempt ``k`` is reached only
  after ``k - 1`` failures.
* ``"naive"`` -- each attempt weighted by its own pass/fail: ``A[i, k] = r[i, k] - b[i, k]``.
  Biased: it drops the value of a failed attempt for the later ones.
* ``"cal"`` -- calibrated attempt-level (reconstructed): target ``R_i`` (the Verification@K
  reward-to-go of attempt ``k``) with a *position-conditioned leave-one-out* baseline
  ``b[i, k] = mean{R_j : j != i, rollout j reached attempt k}``. The baseline uses only other
  rollouts, so it is independent of rollout ``i`` and adds no bias.
* ``"td"`` -- the bias/variance knob ``G = lam * R_i + (1 - lam) * (r + (1 - r) * V[k + 1])``
  with ``V`` a value estimate (default: the group's position-conditioned leave-one-out success
  rate). ``lam = 1`` is ``"cal"``; ``lam < 1`` trades bias for variance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from icml_cal_grpo.config import AdvantageConfig

MODES = ("cal", "trajectory", "naive", "td")
SCALES = ("none", "group", "batch", "position")
BASELINES = ("loo", "mean")


def _as_tensor(x: Any, name: str, dtype: Any = None) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        t = x
    else:
        try:
            t = torch.as_tensor(x)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"{name} must be a 2-D array [rollouts, attempts]: {exc}") from None
    if dtype is not None:
        t = t.to(dtype)
    return t


def derive_reached(rewards: Any) -> Any:
    """Which attempts were made when generation stops at the first success and otherwise runs
    all ``K`` attempts: attempt ``k`` is reached iff attempts ``1..k-1`` all failed."""
    import torch

    r = _as_tensor(rewards, "rewards")
    if r.dim() != 2:
        raise ValueError(f"rewards must be 2-D [rollouts, attempts], got shape {tuple(r.shape)}")
    success = r > 0.5
    before = torch.cumsum(success.to(torch.int64), dim=1) - success.to(torch.int64)
    return before == 0


def _validate(rewards: Any, reached: Any, group_size: int) -> tuple[Any, Any]:
    import torch

    r = _as_tensor(rewards, "rewards")
    if r.dim() != 2:
        raise ValueError(f"rewards must be 2-D [rollouts, attempts], got shape {tuple(r.shape)}: "
                         "reshape to [num_prompts * group_size, max_attempts]")
    n, k = r.shape
    if n == 0 or k == 0:
        raise ValueError(f"rewards is empty (shape {tuple(r.shape)}): pass at least one group "
                         "of rollouts with at least one attempt")
    if not r.is_floating_point():
        r = r.to(torch.float64)
    if reached is None:
        reached_t = derive_reached(r)
    else:
        reached_t = _as_tensor(reached, "reached")
        if reached_t.shape != r.shape:
            raise ValueError(f"reached has shape {tuple(reached_t.shape)} but rewards has "
                             f"{tuple(r.shape)}: give one flag per (rollout, attempt)")
        reached_t = reached_t.to(torch.bool)
    if not bool(reached_t[:, 0].all()):
        raise ValueError("every rollout must reach attempt 1 (reached[:, 0] must be True)")
    if k > 1 and bool((reached_t[:, 1:] & ~reached_t[:, :-1]).any()):
        raise ValueError("reached must be a prefix per rollout (attempt k reached only if "
                         "attempt k-1 was): mark attempts after the last one made as False")
    rv = r[reached_t]
    if not bool(torch.isfinite(rv).all()) or not bool(((rv == 0) | (rv == 1)).all()):
        raise ValueError("rewards of reached attempts must be 0 or 1 (a hard verifier); got "
                         f"values {sorted(set(rv.flatten().tolist()))[:5]}")
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    if n % group_size:
        raise ValueError(f"{n} rollouts do not split into groups of {group_size}: order rollouts "
                         "so each prompt's group_size generations are consecutive")
    return r, reached_t


def active_attempts(rewards: Any, reached: Any = None) -> Any:
    """Attempts that can still change Verification@K: reached, with no success before them."""
    import torch

    r, reached_t = _validate(rewards, reached, 1)
    success = (r > 0.5) & reached_t
    before = torch.cumsum(success.to(torch.int64), dim=1) - success.to(torch.int64)
    return reached_t & (before == 0)


def verification_reward(rewards: Any, reached: Any = None) -> Any:
    """``R_i = 1[some reached attempt succeeded]`` (Verification@K of each rollout)."""
    r, reached_t = _validate(rewards, reached, 1)
    return ((r > 0.5) & reached_t).any(dim=1).to(r.dtype)


def _group_loo(x: Any, mask: Any, baseline: str, fallback: Any) -> Any:
    """Per (group, rollout, attempt): the mean of ``x[j, k]`` over rollouts ``j`` of the group
    with ``mask[j, k]`` (``j != i`` for ``"loo"``); ``fallback`` where that set is empty."""
    xm = x * mask
    s = xm.sum(dim=1, keepdim=True)
    n = mask.sum(dim=1, keepdim=True)
    if baseline == "loo":
        s = s - xm
        n = n - mask
    out = s / n.clamp(min=1)
    return out.where(n > 0, fallback)


def advantage_config(config: AdvantageConfig | None = None, **given: Any) -> AdvantageConfig:
    """``config`` (default: ``AdvantageConfig()``) with the keywords that are not ``None``
    replaced; validated by ``AdvantageConfig`` itself."""
    import dataclasses

    from icml_cal_grpo.config import AdvantageConfig

    base = config if config is not None else AdvantageConfig()
    given = {k: v for k, v in given.items() if v is not None}
    return dataclasses.replace(base, **given) if given else base


def attempt_advantages(rewards: Any, reached: Any = None, *, group_size: int, mode: str = "cal",
                       config: AdvantageConfig | None = None, lam: float | None = None,
                       scale: str | None = None, baseline: str | None = None,
                       values: Any = None, eps: float = 1e-4) -> Any:
    """Per-attempt advantages ``A[N, K]`` for ``N = num_prompts * group_size`` rollouts.

    Args:
        rewards: ``[N, K]`` verifier outcomes (0/1); entries of unreached attempts are ignored.
        reached: ``[N, K]`` bool, which attempts were made (a prefix per rollout). ``None``
            derives it assuming generation stops at the first success.
        group_size: rollouts per prompt (TRL's ``num_generations``); groups are consecutive rows.
        mode: ``"cal"`` (default), ``"trajectory"``, ``"naive"`` or ``"td"`` (see module doc).
        config: the estimator's settings (:class:`~icml_cal_grpo.config.AdvantageConfig`,
            the train config's ``advantage.*`` section; default: its defaults). ``lam``,
            ``scale`` and ``baseline`` given as keywords override it.
        lam: for ``"td"``, weight of the Monte Carlo return ``R_i`` (1 = unbiased CAL).
        scale: ``"none"`` (default), ``"group"`` (divide by the std of ``R`` in the group, TRL's
            ``scale_rewards="group"``), ``"batch"`` (std over the whole batch) or ``"position"``
            (std of the target among the group's rollouts that reached attempt ``k``). For
            ``"naive"``/``"td"``, whose target is per attempt, ``"group"``/``"batch"`` use the
            std of that target over the active attempts of the group / batch.
        baseline: ``"loo"`` (leave-one-out, unbiased; default) or ``"mean"`` (includes the
            rollout itself, as TRL does; a ``(n-1)/n`` shrink of the ``"loo"`` advantage).
        values: for ``"td"``, optional ``[N, K]`` estimates of ``V[k + 1]``, the probability of
            succeeding in the attempts after ``k``; default: the group's leave-one-out estimate.
        eps: added to the std when scaling.

    Returns a float tensor ``[N, K]``, zero on attempts that were not reached or come after a
    success. Inputs may be lists, NumPy arrays or tensors.
    """
    import torch

    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not known: use one of {', '.join(MODES)}")
    cfg = advantage_config(config, lam=lam, scale=scale, baseline=baseline)  # validates
    lam, scale, baseline = cfg.lam, cfg.scale, cfg.baseline
    r, reached_t = _validate(rewards, reached, group_size)
    if baseline == "loo" and group_size < 2:
        raise ValueError("a leave-one-out baseline needs group_size >= 2 (or baseline='mean')")
    n, k = r.shape
    g = group_size
    dt = r.dtype
    success = (r > 0.5) & reached_t
    before = torch.cumsum(success.to(torch.int64), dim=1) - success.to(torch.int64)
    act = (reached_t & (before == 0)).to(dt)                       # [N, K]
    rr = torch.where(reached_t, r, torch.zeros_like(r)) * act      # rewards of active attempts
    big_r = (rr.sum(dim=1) > 0.5).to(dt)                           # [N]

    shape3 = (n // g, g, k)
    a3 = act.view(shape3)
    rb = big_r.view(n // g, g, 1).expand(shape3)
    ones = torch.ones_like(a3)
    # trajectory-level (leave-one-out) mean of R, used as a fallback baseline: it depends only
    # on the other rollouts, so falling back to it keeps the estimator unbiased.
    traj_b = _group_loo(rb, ones, baseline, torch.zeros_like(rb))

    if mode == "trajectory":
        target, base = rb, traj_b
    elif mode == "cal":
        target, base = rb, _group_loo(rb, a3, baseline, traj_b)
    elif mode == "naive":
        r3 = rr.view(shape3)
        # fallback: the others' mean per-attempt reward over all their active attempts
        tot = (r3 * a3).sum(dim=(1, 2), keepdim=True)
        cnt = a3.sum(dim=(1, 2), keepdim=True)
        own_t = (r3 * a3).sum(dim=2, keepdim=True)
        own_c = a3.sum(dim=2, keepdim=True)
        if baseline == "loo":
            tot, cnt = tot - own_t, cnt - own_c
        fb = (tot / cnt.clamp(min=1)).where(cnt > 0, torch.zeros_like(tot)).expand(shape3)
        target, base = r3, _group_loo(r3, a3, baseline, fb)
    else:  # td
        r3 = rr.view(shape3)
        cal_b = _group_loo(rb, a3, baseline, traj_b)
        if values is None:
            v_next = torch.zeros_like(cal_b)
            v_next[:, :, :-1] = cal_b[:, :, 1:]
        else:
            v = _as_tensor(values, "values", dt)
            if v.shape != r.shape:
                raise ValueError(f"values has shape {tuple(v.shape)}, expected {tuple(r.shape)}")
            v_next = v.view(shape3)
        lam_f = float(lam)
        target = lam_f * rb + (1.0 - lam_f) * (r3 + (1.0 - r3) * v_next)
        base = cal_b

    adv = (target - base) * a3
    if scale in ("group", "batch") and mode in ("naive", "td"):
        # these estimators' target is per attempt: scale by the std of their own target over
        # the active attempts (of the group, or the batch); std(R) would be 0 in groups where
        # every R agrees while the per-attempt targets differ
        if scale == "group":
            cnt = a3.sum(dim=(1, 2), keepdim=True)
            mean = (target * a3).sum(dim=(1, 2), keepdim=True) / cnt.clamp(min=1)
            var = (((target - mean) * a3) ** 2).sum(dim=(1, 2), keepdim=True) / \
                (cnt - 1).clamp(min=1)
        else:
            cnt = a3.sum()
            mean = (target * a3).sum() / cnt.clamp(min=1)
            var = (((target - mean) * a3) ** 2).sum() / (cnt - 1).clamp(min=1)
        adv = adv / (var.sqrt() + eps)
    elif scale == "group":
        adv = adv / (big_r.view(n // g, g).std(dim=1).view(-1, 1, 1).nan_to_num(0.0) + eps)
    elif scale == "batch":
        sd = big_r.std() if n > 1 else torch.zeros((), dtype=dt)
        adv = adv / (sd.nan_to_num(0.0) + eps)
    elif scale == "position":
        cnt = a3.sum(dim=1, keepdim=True)
        mean = (target * a3).sum(dim=1, keepdim=True) / cnt.clamp(min=1)
        var = (((target - mean) * a3) ** 2).sum(dim=1, keepdim=True) / (cnt - 1).clamp(min=1)
        gsd = big_r.view(n // g, g).std(dim=1).view(-1, 1, 1).nan_to_num(0.0)
        sd = var.sqrt().where(cnt > 1, gsd)
        adv = adv / (sd + eps)
    return adv.reshape(n, k)


def token_advantages(advantages: Any, attempt_index: Any) -> Any:
    """Broadcast per-attempt advantages ``[N, K]`` to tokens: ``attempt_index[N, L]`` holds the
    attempt (0-based) each token belongs to, or ``-1`` for prompt, feedback and padding tokens,
    which get advantage 0. Returns ``[N, L]``, the shape TRL's loss accepts as advantages."""
    import torch

    adv = _as_tensor(advantages, "advantages")
    idx = _as_tensor(attempt_index, "attempt_index").to(torch.long)
    if adv.dim() != 2 or idx.dim() != 2 or adv.shape[0] != idx.shape[0]:
        raise ValueError(f"advantages {tuple(adv.shape)} and attempt_index {tuple(idx.shape)} "
                         "must be [N, K] and [N, L] with the same N")
    if bool((idx >= adv.shape[1]).any()):
        raise ValueError("attempt_index has an attempt >= K: it must be in -1..K-1")
    out = torch.gather(adv, 1, idx.clamp(min=0))
    return out * (idx >= 0).to(out.dtype)
