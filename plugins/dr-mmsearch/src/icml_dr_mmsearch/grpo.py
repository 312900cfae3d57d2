"""The GRPO loop on ``accelerate``: group sampling -> multi-turn rollout -> reward ->
advantage (group or structural-proximity) -> clipped loss with KL to a frozen reference, over
model tokens only. Plus the gold-trajectory warm start (SFT) used before RL."""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from icml_dr_mmsearch.advantages import group_advantages, structural_proximity_advantages
from icml_dr_mmsearch.config import AdvantageConfig, GRPOConfig, RewardConfig, WarmStartConfig
from icml_dr_mmsearch.env import SearchEnv
from icml_dr_mmsearch.knowledge import Question
from icml_dr_mmsearch.loss import grpo_loss, token_logprobs
from icml_dr_mmsearch.metrics import agent_metrics
from icml_dr_mmsearch.rewards import (
    TurnTarget,
    answer_correct,
    gaussian_turn_reward,
    mmsearch_r1_reward,
)
from icml_dr_mmsearch.rollout import RolloutConfig, Trajectory, agent_rollout, trajectory_batch


class TrajectoryReward:
    """Callable ``reward(trajectories) -> list[float]`` for a :class:`RewardConfig`; for the
    Gaussian reward it owns the :class:`TurnTarget` and updates its EMA after each batch."""

    def __init__(self, config: RewardConfig,
                 tool_limits: dict[str, int] | None = None) -> None:
        self.config = config
        self.tool_limits = tool_limits
        c = self.config
        self.target = TurnTarget(c.mu, c.mu_init, c.mu_momentum)

    def __call__(self, trajs: Sequence[Trajectory]) -> list[float]:
        c = self.config
        out = []
        for t in trajs:
            if c.kind == "mmsearch_r1":
                out.append(mmsearch_r1_reward(
                    t.responses, t.question.answer, search_penalty=c.search_penalty,
                    format_weight=c.format_weight, per_call_penalty=c.per_call_penalty,
                    match=c.match, format_mode=c.format_mode, tool_limits=self.tool_limits))
            else:
                out.append(gaussian_turn_reward(
                    t.responses, t.question.answer, mu=self.target.mu(t.question),
                    sigma_pos=c.sigma_pos, sigma_neg=c.sigma_neg, gamma=c.gamma,
                    gamma_neg=c.gamma_neg, format_weight=c.format_weight, match=c.match,
                    format_mode=c.format_mode, tool_limits=self.tool_limits,
                    search_penalty=c.search_penalty if c.gaussian_penalty else 0.0,
                    per_call_penalty=c.per_call_penalty))
        if c.kind == "gaussian":
            self.target.update([t.turns for t in trajs],
                               [answer_correct(t.responses, t.question.answer, c.match)
                                for t in trajs])
        return out


def compute_advantages(rewards: Sequence[float], trajs: Sequence[Trajectory],
                       config: AdvantageConfig, max_turns: int | None = None) -> Any:
    """``[N]`` advantages of a batch under ``config``."""
    groups = [t.group for t in trajs]
    if config.kind == "group":
        return group_advantages(rewards, group_ids=groups, scale=config.scale)
    return structural_proximity_advantages(
        rewards, [t.structure for t in trajs], group_ids=groups, tau=config.tau, eta=config.eta,
        kappa=config.kappa, length_weight=config.length_weight, max_turns=max_turns,
        scale=config.scale)


def sample_questions(pool: Sequence[Question], k: int, rng: random.Random,
                     hop_mix: Sequence[float] = (0.5, 0.25, 0.25)) -> list[Question]:
    """``k`` questions: a hop depth drawn with weights ``hop_mix`` (for depths 1, 2, 3, ...;
    depths absent from the pool are skipped), then a question of that depth uniformly."""
    by: dict[int, list[Question]] = {}
    for q in pool:
        by.setdefault(q.hops, []).append(q)
    if not by:
        raise ValueError("the question pool is empty")
    hops = sorted(by)
    weights = [hop_mix[h - 1] if h - 1 < len(hop_mix) else 0.0 for h in hops]
    if sum(weights) <= 0:
        weights = [1.0] * len(hops)
    out = []
    for _ in range(k):
        h = rng.choices(hops, weights=weights)[0]
        out.append(rng.choice(by[h]))
    return out


@dataclass
class StepLog:
    """What one GRPO step measured."""

    step: int
    metrics: dict[str, float] = field(default_factory=dict)


class SearchGRPOTrainer:
    """GRPO for a search agent: ``trainer.step()`` runs one group-sampled rollout batch and
    ``num_iterations`` optimizer steps, and returns its metrics; ``trainer.train(n)`` runs ``n``.

    ``ref_model`` defaults to a frozen copy of ``model`` at construction (the KL reference).
    The device comes from ``accelerate`` (``cpu=True`` forces CPU; default: the model's
    device). ``adapter`` (optional, trained jointly) is the VLM image-prefix module."""

    def __init__(self, model: Any, tokenizer: Any, env: SearchEnv, questions: Sequence[Question],
                 *, reward: RewardConfig | Callable[[Sequence[Trajectory]], list[float]] | None
                 = None, advantage: AdvantageConfig | None = None, args: GRPOConfig | None = None,
                 rollout: RolloutConfig | None = None, ref_model: Any = None, seed: int = 0,
                 adapter: Any = None, cpu: bool | None = None) -> None:
        import torch
        from accelerate import Accelerator

        self.args = args or GRPOConfig()
        self.rollout_config = rollout or RolloutConfig()
        self.advantage = advantage or AdvantageConfig()
        self.questions = list(questions)
        if not self.questions:
            raise ValueError("questions is empty: pass at least one training question")
        if reward is None or isinstance(reward, RewardConfig):
            self.reward: Any = TrajectoryReward(reward or RewardConfig(), env.limits)
        elif callable(reward):
            self.reward = reward
        else:
            raise ValueError("reward must be a RewardConfig or a callable(trajectories)")
        self.tokenizer, self.env, self.adapter = tokenizer, env, adapter
        if cpu is None:
            cpu = next(model.parameters()).device.type == "cpu"
        self.accelerator = Accelerator(cpu=cpu)
        params = list(model.parameters()) + (list(adapter.parameters()) if adapter else [])
        opt = torch.optim.AdamW(params, lr=self.args.learning_rate,
                                weight_decay=self.args.weight_decay)
        self.model, self.optimizer = self.accelerator.prepare(model, opt)
        self.ref_model = ref_model
        if self.ref_model is None and self.args.beta:
            self.ref_model = copy.deepcopy(self.accelerator.unwrap_model(self.model))
        if self.ref_model is not None:
            self.ref_model.eval().requires_grad_(False)
        self.ref_adapter = copy.deepcopy(adapter) if adapter is not None else None
        self.device = self.accelerator.device
        self.rng = random.Random(seed)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else \
            tokenizer.eos_token_id
        self.global_step = 0
        self.history: list[StepLog] = []

    def _prefixes(self, trajs: Sequence[Trajectory], adapter: Any) -> list[Any] | None:
        if adapter is None:
            return None
        return [adapter.embed_image(t.image) if t.image is not None else None for t in trajs]

    def step(self) -> dict[str, float]:
        import torch

        a = self.args
        qs = sample_questions(self.questions, a.prompts_per_step, self.rng, a.hop_mix)
        model = self.accelerator.unwrap_model(self.model)
        trajs = agent_rollout(model, self.tokenizer, self.env, qs,
                              num_generations=a.num_generations, config=self.rollout_config,
                              generator=self.generator, adapter=self.adapter)
        rewards = list(self.reward(trajs))
        adv = compute_advantages(rewards, trajs, self.advantage, self.env.max_rounds)
        batch = trajectory_batch(trajs, self.pad_id, self.device)
        mask = batch["loss_mask"][:, 1:]
        temp = self.rollout_config.temperature
        with torch.no_grad():
            old = token_logprobs(self.model, batch["input_ids"], batch["attention_mask"],
                                 prefixes=self._prefixes(trajs, self.adapter), temperature=temp)
            ref = None
            if self.ref_model is not None:
                ref = token_logprobs(self.ref_model, batch["input_ids"], batch["attention_mask"],
                                     prefixes=self._prefixes(trajs, self.ref_adapter),
                                     temperature=temp)
        adv_t = adv.to(device=self.device, dtype=torch.float32)
        self.model.train()
        stats: dict[str, float] = {}
        for _ in range(a.num_iterations):
            logps = token_logprobs(self.model, batch["input_ids"], batch["attention_mask"],
                                   prefixes=self._prefixes(trajs, self.adapter), temperature=temp)
            loss, stats = grpo_loss(logps, old, adv_t, mask, ref_logps=ref, beta=a.beta,
                                    epsilon=a.epsilon, epsilon_high=a.epsilon_high,
                                    aggregation=a.aggregation)
            self.optimizer.zero_grad(set_to_none=True)
            self.accelerator.backward(loss)
            if a.max_grad_norm:
                self.accelerator.clip_grad_norm_(self.model.parameters(), a.max_grad_norm)
            self.optimizer.step()
            stats["loss"] = float(loss.detach())
        self.model.eval()
        self.global_step += 1
        m = agent_metrics(trajs, rewards, format_mode=getattr(self.reward, "config",
                                                              RewardConfig()).format_mode,
                          tool_limits=self.env.limits)
        m.update(stats)
        m["advantage_abs"] = float(adv.abs().mean())
        if hasattr(self.reward, "target"):
            m["mu"] = float(self.reward.target.value)
        self.history.append(StepLog(self.global_step, m))
        return m

    def train(self, steps: int, callback: Callable[[int, dict[str, float]], None] | None = None
              ) -> list[StepLog]:
        """Run ``steps`` GRPO steps; ``callback(step, metrics)`` after each."""
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        for _ in range(steps):
            m = self.step()
            if callback is not None:
                callback(self.global_step, m)
        return self.history


# ---- gold-trajectory warm start -------------------------------------------------------------
def gold_trajectory(env: SearchEnv, tokenizer: Any, q: Question,
                    responses: Sequence[str] | None = None) -> tuple[list[int], list[int]]:
    """``(token_ids, loss_mask)`` of the gold trajectory of ``q`` (or of the given model turns
    ``responses``), with the tool outputs the environment really returns for its calls (masked:
    0)."""
    ep = env.reset(q)
    ids = list(tokenizer(env.prompt(q), add_special_tokens=False)["input_ids"])
    mask = [0] * len(ids)
    for resp in (env.gold_responses(q) if responses is None else responses):
        r_ids = list(tokenizer(resp, add_special_tokens=False)["input_ids"])
        ids += r_ids
        mask += [1] * len(r_ids)
        obs = env.step(ep, resp)
        if obs is None:
            break
        o_ids = list(tokenizer(obs, add_special_tokens=False)["input_ids"])
        ids += o_ids
        mask += [0] * len(o_ids)
    return ids, mask


def warm_start(model: Any, tokenizer: Any, env: SearchEnv,
               questions: Sequence[Question | tuple[Question, Sequence[str]]],
               config: WarmStartConfig | None = None, *, seed: int = 0,
               callback: Callable[[int, float], None] | None = None,
               **overrides: Any) -> list[float]:
    """Supervised warm start on the gold trajectories of ``questions`` (items may also be
    ``(question, model_turns)`` pairs to imitate other trajectories): cross-entropy on the
    model's turns only (prompt and tool outputs masked). Returns the loss curve.

    Settings come from ``config`` (a :class:`~icml_dr_mmsearch.config.WarmStartConfig`, the
    job configs' ``warm`` section; default: its defaults); keywords ``steps``, ``batch_size``,
    ``learning_rate`` override its fields."""
    import torch

    unknown = set(overrides) - {f.name for f in dataclasses.fields(WarmStartConfig)}
    if unknown:
        raise TypeError(f"warm_start: unknown setting(s) {sorted(unknown)}: use steps, "
                        "batch_size, learning_rate")
    cfg = dataclasses.replace(config or WarmStartConfig(), **overrides)
    steps, batch_size, learning_rate = cfg.steps, cfg.batch_size, cfg.learning_rate
    if not questions:
        raise ValueError("warm_start needs at least one question")
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    seqs = [gold_trajectory(env, tokenizer, *(item if isinstance(item, tuple) else (item,)))
            for item in questions]
    width = max(len(s) for s, _ in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    att = torch.zeros_like(ids)
    lm = torch.zeros_like(ids)
    for i, (s, m) in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        att[i, :len(s)] = 1
        lm[i, :len(s)] = torch.tensor(m)
    ids, att, lm = ids.to(device), att.to(device), lm.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    g = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for step in range(steps):
        b = torch.randint(0, len(seqs), (min(batch_size, len(seqs)),), generator=g).to(device)
        lp = token_logprobs(model, ids[b], att[b])
        m = lm[b][:, 1:].to(lp.dtype)
        loss = -(lp * m).sum() / m.sum().clamp(min=1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if callback is not None:
            callback(step + 1, losses[-1])
    model.eval()
    return losses
