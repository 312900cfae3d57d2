"""Tabular multi-attempt environments and exact enumeration: the ground truth for the estimators.

A tabular softmax policy picks one of ``A`` arms per attempt; the success probability of an arm
may depend on the earlier (failed) arms. Because every trajectory can be enumerated, the exact
Verification@K objective, its exact gradient, and the *exact* mean and variance of any
advantage estimator over groups of rollouts can be computed -- no Monte Carlo noise.

Environments:

* :func:`probe_env` -- arms ``guess`` (succeeds w.p. ``p_guess``), ``probe`` (always fails) and
  ``exploit`` (succeeds w.p. ``p_exploit`` only after a probe). The myopic policy guesses
  (Ver@3 = 1 - 0.7^3 = 0.657); probe-then-exploit reaches 0.99.
* :func:`memoryless_env` -- success depends on the arm only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from icml_cal_grpo.advantages import attempt_advantages


@dataclass(frozen=True)
class TabularEnv:
    """``arms`` names; ``success(arm, history) -> prob`` where ``history`` is the tuple of earlier
    arm indices (all failed, as generation stops at the first success)."""

    arms: tuple[str, ...]
    success: Callable[[int, tuple[int, ...]], float]
    name: str = "env"


def probe_env(p_guess: float = 0.3, p_exploit: float = 0.9, p_cold: float = 0.0) -> TabularEnv:
    """Probe environment: a failed ``probe`` makes a later ``exploit`` succeed w.p. ``p_exploit``
    (``p_cold`` without a probe before it)."""
    def success(arm: int, history: tuple[int, ...]) -> float:
        if arm == 0:
            return p_guess
        if arm == 1:
            return 0.0
        return p_exploit if 1 in history else p_cold

    return TabularEnv(("guess", "probe", "exploit"), success, "probe")


def memoryless_env(probs: Sequence[float] = (0.3, 0.5, 0.1)) -> TabularEnv:
    """Success probability depends on the arm only."""
    ps = tuple(float(p) for p in probs)
    return TabularEnv(tuple(f"arm{i}" for i in range(len(ps))), lambda a, h: ps[a], "memoryless")


@dataclass
class Trajectories:
    """All trajectories of ``K`` attempts (stop at first success), as padded arrays."""

    arms: Any        # [T, K] long, -1 where not reached
    states: Any      # [T, K] long, policy state index of each attempt, -1 where not reached
    rewards: Any     # [T, K] float64
    reached: Any     # [T, K] bool
    env_prob: Any    # [T] float64, product of the environment's outcome probabilities
    n_states: int
    n_arms: int
    state_keys: list[tuple[int, ...]] = field(default_factory=list)


def policy_states(n_arms: int, k: int, shared: bool) -> list[tuple[int, ...]]:
    """State keys: every history of earlier arms (``shared=False``) or one state (``True``)."""
    if shared:
        return [()]
    return [h for m in range(k) for h in itertools.product(range(n_arms), repeat=m)]


def enumerate_trajectories(env: TabularEnv, max_attempts: int,
                           shared: bool = False) -> Trajectories:
    """Every (arms, outcomes) path with its environment probability; zero-probability paths
    are dropped."""
    import torch

    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    n_arms = len(env.arms)
    keys = policy_states(n_arms, max_attempts, shared)
    index = {h: i for i, h in enumerate(keys)}
    rows: list[tuple[list[int], list[int], list[float], float]] = []

    def walk(hist: tuple[int, ...], prob: float) -> None:
        k = len(hist)
        for a in range(n_arms):
            p = float(env.success(a, hist))
            for ok, q in ((1, p), (0, 1.0 - p)):
                if q <= 0.0:
                    continue
                new = hist + (a,)
                if ok or k + 1 == max_attempts:
                    rows.append((list(new), [0] * k + [ok], [0.0] * k + [float(ok)], prob * q))
                else:
                    walk(new, prob * q)

    walk((), 1.0)
    t = len(rows)
    arms = torch.full((t, max_attempts), -1, dtype=torch.long)
    states = torch.full((t, max_attempts), -1, dtype=torch.long)
    rewards = torch.zeros((t, max_attempts), dtype=torch.float64)
    for i, (a, _, r, _) in enumerate(rows):
        for k, ak in enumerate(a):
            arms[i, k] = ak
            states[i, k] = 0 if shared else index[tuple(a[:k])]
            rewards[i, k] = r[k]
    env_prob = torch.tensor([row[3] for row in rows], dtype=torch.float64)
    return Trajectories(arms, states, rewards, arms >= 0, env_prob, len(keys), n_arms, keys)


def trajectory_logprob(logits: Any, tr: Trajectories) -> Any:
    """``log pi(trajectory)`` for a ``[n_states, n_arms]`` logit table (differentiable)."""
    import torch

    logp = torch.log_softmax(logits, dim=-1)
    s = tr.states.clamp(min=0)
    a = tr.arms.clamp(min=0)
    per = logp[s, a] * tr.reached.to(logp.dtype)
    return per.sum(dim=1)


def exact_objective(logits: Any, tr: Trajectories) -> Any:
    """Verification@K = P(some attempt succeeds), exactly, differentiable in ``logits``."""
    import torch

    prob = torch.exp(trajectory_logprob(logits, tr)) * tr.env_prob
    return (prob * tr.rewards.sum(dim=1)).sum()


def exact_gradient(logits: Any, tr: Trajectories) -> Any:
    """The exact gradient of Verification@K with respect to the logit table (autograd)."""
    import torch

    x = logits.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(exact_objective(x, tr), x)
    return g


def score_vectors(logits: Any, tr: Trajectories) -> Any:
    """``grad log pi(a_k | h_{k-1})`` for each trajectory and attempt: ``[T, K, S*A]``."""
    import torch

    pi = torch.softmax(logits.detach(), dim=-1)
    t, k = tr.arms.shape
    s_count, a_count = pi.shape
    out = torch.zeros((t, k, s_count, a_count), dtype=pi.dtype)
    s = tr.states.clamp(min=0)
    a = tr.arms.clamp(min=0)
    out[torch.arange(t)[:, None], torch.arange(k)[None, :], s] -= pi[s]
    onehot = torch.nn.functional.one_hot(a, a_count).to(pi.dtype)
    out[torch.arange(t)[:, None], torch.arange(k)[None, :], s] += onehot
    out = out * tr.reached[:, :, None, None].to(pi.dtype)
    return out.reshape(t, k, s_count * a_count)


def group_gradients(logits: Any, tr: Trajectories, idx: Any, adv: Any, group_size: int) -> Any:
    """Per-group estimates ``(1/G) sum_i sum_k A[i, k] grad log pi(a_{i,k} | h_{i,k-1})`` for
    trajectories ``idx`` (consecutive groups of ``group_size``): ``[num_groups, S*A]``."""
    import torch

    pi = torch.softmax(logits.detach(), dim=-1)
    s_count, a_count = pi.shape
    n, k = adv.shape
    rows = (torch.arange(n) // group_size)[:, None].expand(n, k)
    st = tr.states[idx].clamp(min=0)
    ar = tr.arms[idx].clamp(min=0)
    a = adv.to(pi.dtype) * tr.reached[idx].to(pi.dtype)
    out = torch.zeros((n // group_size, s_count, a_count), dtype=pi.dtype)
    out.index_put_((rows.reshape(-1), st.reshape(-1), ar.reshape(-1)), a.reshape(-1),
                   accumulate=True)
    neg = a[:, :, None] * pi[st]                                  # [n, k, A]
    out.index_put_((rows.reshape(-1), st.reshape(-1)), -neg.reshape(-1, a_count),
                   accumulate=True)
    return out.reshape(n // group_size, s_count * a_count) / group_size


def expected_estimator(logits: Any, tr: Trajectories, group_size: int,
                       weights: Callable[[Any, Any, int], Any] | None = None,
                       **adv_kwargs: Any) -> tuple[Any, Any]:
    """Exact mean and total variance of a group's policy-gradient estimate
    ``g = (1/G) sum_i sum_k A[i, k] grad log pi(a_{i,k} | h_{i,k-1})`` over all ``T^G`` groups.

    ``weights(rewards, reached, group_size) -> A`` defaults to
    :func:`attempt_advantages` with ``adv_kwargs``. Returns ``(mean [S, A], total variance)``.
    Cost grows as ``T^G``: keep ``G <= 3``.
    """
    import torch

    t = tr.arms.shape[0]
    probs = torch.exp(trajectory_logprob(logits.detach(), tr)) * tr.env_prob
    combos = torch.cartesian_prod(*[torch.arange(t)] * group_size) if group_size > 1 \
        else torch.arange(t)[:, None]
    combos = combos.reshape(-1, group_size)
    w = probs[combos].prod(dim=1)                                 # [C]
    flat = combos.reshape(-1)
    r = tr.rewards[flat]
    reached = tr.reached[flat]
    if weights is None:
        adv = attempt_advantages(r, reached, group_size=group_size, **adv_kwargs)
    else:
        adv = weights(r, reached, group_size)
    g = group_gradients(logits, tr, flat, adv, group_size)
    mean = (w[:, None] * g).sum(dim=0)
    second = (w * (g * g).sum(dim=1)).sum()
    var = second - (mean * mean).sum()
    return mean.reshape(logits.shape), var


def _compositions(n: int, m: int) -> list[tuple[int, ...]]:
    """Every way to put ``n`` identical items into ``m`` bins (count vectors)."""
    out = []
    for combo in itertools.combinations_with_replacement(range(m), n):
        c = [0] * m
        for t in combo:
            c[t] += 1
        out.append(tuple(c))
    return out


def exact_estimator_moments(logits: Any, tr: Trajectories, group_size: int,
                            weights: Callable[[Any, Any, int], Any] | None = None,
                            **adv_kwargs: Any) -> tuple[Any, Any]:
    """Exact mean and total variance of the group estimate (as :func:`expected_estimator`) at
    any group size, by enumeration over *outcome types* instead of whole groups.

    A rollout's advantages depend on the other rollouts only through their verdict rows
    ``(rewards, reached)``, of which there are few (``K + 1`` with stop-at-first-success). By
    exchangeability ``E g = E f_1`` and ``E||g||^2 = E||f_1||^2 / G + (G-1)/G E<f_1, f_2>`` with
    ``f_i = sum_k A[i, k] grad log pi(a_{i,k})``; the others enter through multinomial counts
    of types, so the cost is ``types^2 * C(G + types - 3, types - 1)`` advantage rows.
    """
    import math

    import torch

    k_max = tr.rewards.shape[1]
    probs = torch.exp(trajectory_logprob(logits.detach(), tr)) * tr.env_prob    # [M]
    key = torch.cat([tr.rewards, tr.reached.to(tr.rewards.dtype)], dim=1)
    uniq, inv = torch.unique(key, dim=0, return_inverse=True)
    n_types = uniq.shape[0]
    t_rew, t_reach = uniq[:, :k_max], uniq[:, k_max:] > 0.5
    p_type = torch.zeros(n_types, dtype=probs.dtype).index_add_(0, inv, probs)
    sc = score_vectors(logits, tr)                                               # [M, K, D]
    onehot = torch.nn.functional.one_hot(inv, n_types).to(probs.dtype) * probs[:, None]
    big_s = torch.einsum("mt,mkd->tkd", onehot, sc)                             # E[1{t} s_k]
    big_q = torch.einsum("mt,mkd,mjd->tkj", onehot, sc, sc)                      # E[1{t} s_k.s_j]

    def adv_for(groups: list[list[int]]) -> Any:
        idx = torch.tensor([t for grp in groups for t in grp], dtype=torch.long)
        r, re = t_rew[idx], t_reach[idx]
        if weights is None:
            a = attempt_advantages(r, re, group_size=group_size, **adv_kwargs)
        else:
            a = weights(r, re, group_size)
        return a.to(probs.dtype).view(len(groups), group_size, k_max) * \
            re.view(len(groups), group_size, k_max).to(probs.dtype)

    def comp_prob(c: tuple[int, ...]) -> float:
        n = sum(c)
        coef = math.factorial(n)
        for x in c:
            coef //= math.factorial(x)
        return coef * float(torch.prod(p_type ** torch.tensor(c, dtype=probs.dtype)))

    def expand(c: tuple[int, ...]) -> list[int]:
        return [t for t, x in enumerate(c) for _ in range(x)]

    comps1 = _compositions(group_size - 1, n_types)
    groups, meta = [], []
    for t1 in range(n_types):
        for c in comps1:
            groups.append([t1] + expand(c))
            meta.append((t1, comp_prob(c)))
    a = adv_for(groups)[:, 0]                                                   # [C, K]
    t1s = torch.tensor([m[0] for m in meta])
    w = torch.tensor([m[1] for m in meta], dtype=probs.dtype)
    mean = torch.einsum("c,ck,ckd->d", w, a, big_s[t1s])
    sq1 = torch.einsum("c,ck,cj,ckj->", w, a, a, big_q[t1s])
    cross = torch.zeros((), dtype=probs.dtype)
    if group_size > 1:
        comps2 = _compositions(group_size - 2, n_types)
        groups, meta = [], []
        for t1 in range(n_types):
            for t2 in range(n_types):
                for c in comps2:
                    groups.append([t1, t2] + expand(c))
                    meta.append((t1, t2, comp_prob(c)))
        a2 = adv_for(groups)
        t1s = torch.tensor([m[0] for m in meta])
        t2s = torch.tensor([m[1] for m in meta])
        w = torch.tensor([m[2] for m in meta], dtype=probs.dtype)
        u = torch.einsum("ck,ckd->cd", a2[:, 0], big_s[t1s])
        v = torch.einsum("ck,ckd->cd", a2[:, 1], big_s[t2s])
        cross = (w * (u * v).sum(dim=1)).sum()
    g = group_size
    second = sq1 / g + (g - 1) / g * cross
    return mean.reshape(logits.shape), second - (mean * mean).sum()


def expected_baselines(logits: Any, tr: Trajectories, group_size: int,
                       mode: str = "cal") -> Any:
    """``E[b_k]``, the expectation of the leave-one-out baseline at each attempt ``k`` over the
    other ``G - 1`` rollouts (``[K]``; without scaling). Trajectory GRPO: ``E[R]`` everywhere.
    CAL: its baseline averages the ``m ~ Binomial(G-1, q_k)`` others that reached ``k``
    (``q_k = P(reach k)``), whose mean is ``E[R | reach k]``, and falls back to the mean of all
    others when ``m = 0``, whose ``R`` then has mean ``E[R | not reach k]``, so
    ``E[b_k] = (1 - (1-q_k)^(G-1)) E[R | reach k] + (1-q_k)^(G-1) E[R | not reach k]``."""
    import torch

    if mode not in ("cal", "trajectory"):
        raise ValueError(f"mode {mode!r}: expected_baselines knows 'cal' and 'trajectory'")
    p = torch.exp(trajectory_logprob(logits.detach(), tr)) * tr.env_prob
    reach = tr.reached.to(p.dtype)
    big_r = (tr.rewards.to(p.dtype) * reach).amax(dim=1)
    mean_r = (p * big_r).sum()
    if mode == "trajectory":
        return mean_r.expand(reach.shape[1]).clone()
    q = (p[:, None] * reach).sum(dim=0)
    r_reach = (p[:, None] * reach * big_r[:, None]).sum(dim=0) / q.clamp(min=1e-300)
    r_not = (p[:, None] * (1 - reach) * big_r[:, None]).sum(dim=0) / (1 - q).clamp(min=1e-300)
    none = (1 - q).clamp(min=0) ** (group_size - 1)
    return (1 - none) * r_reach + torch.where(none > 0, none * r_not, torch.zeros_like(none))


def variance_split(logits: Any, tr: Trajectories, group_size: int,
                   mode: str = "cal") -> dict[str, float]:
    """The exact total variance of the group estimate (no scaling, leave-one-out baseline)
    split into ``centred`` -- the variance with every baseline ``b_k`` replaced by its
    expectation ``E[b_k]`` (:func:`expected_baselines`) -- and ``noise = total - centred``,
    the cost of estimating the baseline from the other rollouts.

    The split is exact: ``b_k - E[b_k]`` is built from rollouts other than the one it
    baselines, and a score ``grad log pi(a_k | h_k)`` has mean zero given everything but that
    rollout's own action, so every cross term vanishes and ``noise`` is the variance of
    ``(1/G) sum_i sum_k (b_ik - E[b_k]) grad log pi(a_ik | h_ik)`` (>= 0). ``centred`` falls as
    ``1/G``; ``noise`` roughly as ``1/G^2``."""
    beta = expected_baselines(logits, tr, group_size, mode)

    def fixed(r: Any, reached: Any, g: int) -> Any:
        re = reached.to(r.dtype)
        return ((r * re).amax(dim=1)[:, None] - beta[None, :].to(r.dtype)) * re

    total = float(exact_estimator_moments(logits, tr, group_size, mode=mode)[1])
    centred = float(exact_estimator_moments(logits, tr, group_size, weights=fixed)[1])
    return {"total": total, "centred": centred, "noise": total - centred}


def sample_trajectories(logits: Any, env: TabularEnv, tr: Trajectories, n: int,
                        generator: Any = None) -> Any:
    """Indices of ``n`` trajectories sampled from the policy (by exact trajectory probability)."""
    import torch

    probs = torch.exp(trajectory_logprob(logits.detach(), tr)) * tr.env_prob
    return torch.multinomial(probs / probs.sum(), n, replacement=True, generator=generator)


def monte_carlo_estimator(logits: Any, env: TabularEnv, tr: Trajectories, group_size: int,
                          num_groups: int, generator: Any = None,
                          **adv_kwargs: Any) -> tuple[Any, Any]:
    """Monte Carlo mean and total variance of the group estimate over ``num_groups`` groups."""

    idx = sample_trajectories(logits, env, tr, num_groups * group_size, generator)
    adv = attempt_advantages(tr.rewards[idx], tr.reached[idx], group_size=group_size,
                             **adv_kwargs)
    g = group_gradients(logits, tr, idx, adv, group_size)
    mean = g.mean(dim=0)
    var = ((g - mean) ** 2).sum(dim=1).mean()
    return mean.reshape(logits.shape), var


def train_tabular(env: TabularEnv, mode: str, *, max_attempts: int = 3, group_size: int = 8,
                  steps: int = 200, lr: float = 0.5, seed: int = 0, shared: bool = False,
                  keep: list[Any] | None = None, **adv_kwargs: Any) -> list[float]:
    """Plain policy-gradient ascent of a tabular policy with the chosen estimator; returns the
    exact Verification@K after each step (``keep``: a list that receives the final logits)."""
    import torch

    tr = enumerate_trajectories(env, max_attempts, shared)
    gen = torch.Generator().manual_seed(seed)
    logits = torch.zeros((tr.n_states, tr.n_arms), dtype=torch.float64)
    curve = []
    for _ in range(steps):
        idx = sample_trajectories(logits, env, tr, group_size, gen)
        adv = attempt_advantages(tr.rewards[idx], tr.reached[idx], group_size=group_size,
                                 mode=mode, **adv_kwargs)
        g = group_gradients(logits, tr, idx, adv, group_size)[0]
        logits = logits + lr * g.reshape(logits.shape)
        curve.append(float(exact_objective(logits, tr)))
    if keep is not None:
        keep.append(logits)
    return curve
