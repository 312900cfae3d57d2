"""A minimal multi-attempt GRPO training loop on ``accelerate``: rollout -> per-attempt
advantages -> clipped policy-gradient loss over attempt spans -> optimizer step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from icml_cal_grpo.advantages import BASELINES, MODES, SCALES, attempt_advantages, token_advantages
from icml_cal_grpo.loss import LOSS_TYPES, clipped_pg_loss, sequence_logprobs
from icml_cal_grpo.metrics import attempt_metrics
from icml_cal_grpo.rollout import MultiAttemptConfig, Verifier, multi_attempt_rollout


@dataclass
class AttemptGRPOConfig:
    """Optimisation settings (names follow TRL's ``GRPOConfig`` where they exist)."""

    mode: str = "cal"
    lam: float = 1.0
    scale: str = "none"
    baseline: str = "loo"
    num_generations: int = 8
    prompts_per_step: int = 1
    learning_rate: float = 1e-3
    epsilon: float = 0.2
    epsilon_high: float | None = None
    loss_type: str = "dapo"
    num_iterations: int = 1
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        for name, value, allowed in (("mode", self.mode, MODES), ("scale", self.scale, SCALES),
                                     ("baseline", self.baseline, BASELINES),
                                     ("loss_type", self.loss_type, LOSS_TYPES)):
            if value not in allowed:
                raise ValueError(f"{name} {value!r} is not known: use one of {', '.join(allowed)}")
        if self.num_generations < 2:
            raise ValueError("num_generations must be >= 2 (a group baseline needs two rollouts)")
        if self.prompts_per_step < 1 or self.num_iterations < 1:
            raise ValueError("prompts_per_step and num_iterations must be >= 1")


class AttemptGRPOTrainer:
    """Train ``model`` on ``prompts`` with a verifier, using per-attempt advantages.

    ``trainer.step()`` runs one rollout + update and returns its metrics; ``trainer.train(n)``
    runs ``n`` steps. The device comes from ``accelerate`` (``cpu=True`` forces CPU).
    """

    def __init__(self, model: Any, tokenizer: Any, verifier: Verifier, prompts: Sequence[str],
                 args: AttemptGRPOConfig | None = None, rollout: MultiAttemptConfig | None = None,
                 *, cpu: bool | None = None, seed: int = 0,
                 optimizer: Any = None) -> None:
        import torch
        from accelerate import Accelerator

        self.args = args or AttemptGRPOConfig()
        self.rollout_config = rollout or MultiAttemptConfig()
        self.prompts = list(prompts)
        if not self.prompts:
            raise ValueError("prompts is empty: pass at least one training prompt")
        self.tokenizer = tokenizer
        self.verifier = verifier
        if cpu is None:
            cpu = next(model.parameters()).device.type == "cpu"
        self.accelerator = Accelerator(cpu=cpu)
        opt = optimizer or torch.optim.AdamW(model.parameters(), lr=self.args.learning_rate,
                                             weight_decay=self.args.weight_decay)
        self.model, self.optimizer = self.accelerator.prepare(model, opt)
        self.generator = torch.Generator(device=self.accelerator.device).manual_seed(seed)
        self._cursor = 0
        self.global_step = 0

    def _next_prompts(self) -> list[str]:
        out = []
        for _ in range(self.args.prompts_per_step):
            out.append(self.prompts[self._cursor % len(self.prompts)])
            self._cursor += 1
        return out

    def step(self) -> dict[str, float]:
        import torch

        a = self.args
        model = self.accelerator.unwrap_model(self.model)
        batch = multi_attempt_rollout(model, self.tokenizer, self._next_prompts(), self.verifier,
                                      self.rollout_config, num_generations=a.num_generations,
                                      generator=self.generator)
        adv = attempt_advantages(batch.rewards, batch.reached, group_size=a.num_generations,
                                 mode=a.mode, lam=a.lam, scale=a.scale, baseline=a.baseline)
        dev = self.accelerator.device
        ids = batch.input_ids.to(dev)
        att = batch.attention_mask.to(dev)
        tok_adv = token_advantages(adv, batch.attempt_index)[:, 1:].to(dev)
        mask = (batch.attempt_index[:, 1:] >= 0).to(dev)
        temp = self.rollout_config.temperature
        allowed = self.rollout_config.allowed_token_ids    # score of the sampling distribution
        self.model.train()
        with torch.no_grad():
            old = sequence_logprobs(self.model, ids, att, temp, allowed)
        stats: dict[str, float] = {}
        for _ in range(a.num_iterations):
            logps = sequence_logprobs(self.model, ids, att, temp, allowed)
            loss, stats = clipped_pg_loss(logps, old, tok_adv, mask, epsilon=a.epsilon,
                                          epsilon_high=a.epsilon_high, loss_type=a.loss_type)
            self.optimizer.zero_grad()
            self.accelerator.backward(loss)
            if a.max_grad_norm > 0:
                self.accelerator.clip_grad_norm_(self.model.parameters(), a.max_grad_norm)
            self.optimizer.step()
        self.global_step += 1
        out = attempt_metrics(batch.rewards, batch.reached)
        out.update(loss=float(loss.detach()), adv_abs_mean=float(adv.abs().mean()), **stats)
        return out

    def train(self, steps: int, callback: Callable[[int, dict[str, float]], Any] | None = None,
              progress: Callable[[Any], Any] | None = None) -> list[dict[str, float]]:
        """Run ``steps`` updates; ``callback(step, metrics)`` after each one (return True to
        stop early); ``progress`` wraps the step iterator (e.g. a progress bar)."""
        history = []
        it = range(steps)
        for i in (progress(it) if progress else it):
            m = self.step()
            history.append(m)
            if callback is not None and callback(i, m):
                break
        return history
