"""A minimal multi-attempt GRPO training loop on ``accelerate``: rollout -> per-attempt
advantages -> clipped policy-gradient loss over attempt spans (+ optional k3 KL to a frozen
reference) -> optimizer step, with gradient accumulation over micro-batches of rollouts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from icml_cal_grpo.advantages import MODES, attempt_advantages, token_advantages
from icml_cal_grpo.config import AdvantageConfig
from icml_cal_grpo.loss import LOSS_TYPES, clipped_pg_loss, sequence_logprobs
from icml_cal_grpo.metrics import attempt_metrics
from icml_cal_grpo.rollout import MultiAttemptConfig, Verifier, multi_attempt_rollout


@dataclass
class AttemptGRPOConfig:
    """Optimisation settings (names follow TRL's ``GRPOConfig`` where they exist)."""

    mode: str = "cal"
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)  # lam, scale, baseline
    num_generations: int = 8
    prompts_per_step: int = 1
    learning_rate: float = 1e-3
    epsilon: float = 0.2
    epsilon_high: float | None = None
    loss_type: str = "dapo"
    num_iterations: int = 1
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    beta: float = 0.0                      # k3 KL to the frozen reference (TRL's beta)
    gradient_accumulation_steps: int = 1   # micro-batches per update (same gradient as one)
    logprob_chunk_size: int | None = 64    # positions per output-layer chunk (None: one pass)

    def __post_init__(self) -> None:
        if not isinstance(self.advantage, AdvantageConfig):
            raise TypeError(f"advantage must be an AdvantageConfig, got {self.advantage!r}")
        for name, value, allowed in (("mode", self.mode, MODES),
                                     ("loss_type", self.loss_type, LOSS_TYPES)):
            if value not in allowed:
                raise ValueError(f"{name} {value!r} is not known: use one of {', '.join(allowed)}")
        if self.num_generations < 2:
            raise ValueError("num_generations must be >= 2 (a group baseline needs two rollouts)")
        if self.prompts_per_step < 1 or self.num_iterations < 1:
            raise ValueError("prompts_per_step and num_iterations must be >= 1")
        if self.beta < 0:
            raise ValueError(f"beta (KL coefficient) must be >= 0, got {self.beta}")
        n = self.num_generations * self.prompts_per_step
        if not 1 <= self.gradient_accumulation_steps <= n:
            raise ValueError(f"gradient_accumulation_steps must be in 1..{n} (the rollouts per "
                             f"update), got {self.gradient_accumulation_steps}")
        if self.logprob_chunk_size is not None and self.logprob_chunk_size < 1:
            raise ValueError("logprob_chunk_size must be >= 1 or None")


def _nullcontext() -> Any:
    import contextlib

    return contextlib.nullcontext()


class AttemptGRPOTrainer:
    """Train ``model`` on ``prompts`` with a verifier, using per-attempt advantages.

    ``trainer.step()`` runs one rollout + update and returns its metrics; ``trainer.train(n)``
    runs ``n`` steps. The device comes from ``accelerate`` (``cpu=True`` forces CPU).

    With ``args.beta > 0`` the loss adds a k3 KL term to a frozen reference: ``ref_model`` if
    given, else the model with its PEFT adapters disabled (a LoRA model), else a frozen copy
    of the model as it was at construction.
    """

    def __init__(self, model: Any, tokenizer: Any, verifier: Verifier, prompts: Sequence[str],
                 args: AttemptGRPOConfig | None = None, rollout: MultiAttemptConfig | None = None,
                 *, cpu: bool | None = None, seed: int = 0,
                 optimizer: Any = None, ref_model: Any = None) -> None:
        import copy

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
        self.ref_model = None
        self._ref_is_adapter_off = False
        if self.args.beta > 0:
            if ref_model is not None:
                self.ref_model = ref_model
            elif hasattr(model, "disable_adapter") and hasattr(model, "peft_config"):
                self._ref_is_adapter_off = True
            else:
                self.ref_model = copy.deepcopy(model)
            if self.ref_model is not None:
                self.ref_model.eval().requires_grad_(False)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = optimizer or torch.optim.AdamW(params, lr=self.args.learning_rate,
                                             weight_decay=self.args.weight_decay)
        self.model, self.optimizer = self.accelerator.prepare(model, opt)
        if self.ref_model is not None:
            self.ref_model.to(self.accelerator.device)
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

        a = self.args
        model = self.accelerator.unwrap_model(self.model)
        batch = multi_attempt_rollout(model, self.tokenizer, self._next_prompts(), self.verifier,
                                      self.rollout_config, num_generations=a.num_generations,
                                      generator=self.generator)
        adv = attempt_advantages(batch.rewards, batch.reached, group_size=a.num_generations,
                                 mode=a.mode, config=a.advantage)
        stats = self.update(batch.input_ids, batch.attention_mask, batch.attempt_index,
                            token_advantages(adv, batch.attempt_index))
        self.global_step += 1
        out = attempt_metrics(batch.rewards, batch.reached)
        out.update(adv_abs_mean=float(adv.abs().mean()), **stats)
        return out

    def _logps(self, model: Any, ids: Any, att: Any, mask: Any = None) -> Any:
        rc = self.rollout_config
        return sequence_logprobs(model, ids, att, rc.temperature, rc.allowed_token_ids,
                                 chunk_size=self.args.logprob_chunk_size, positions=mask)

    def _ref_logps(self, ids: Any, att: Any, mask: Any = None) -> Any:
        import torch

        with torch.no_grad():
            if self._ref_is_adapter_off:
                model = self.accelerator.unwrap_model(self.model)
                with model.disable_adapter():
                    return self._logps(model, ids, att, mask)
            return self._logps(self.ref_model, ids, att, mask)

    def update(self, input_ids: Any, attention_mask: Any, attempt_index: Any,
               token_adv: Any) -> dict[str, float]:
        """The optimisation part of :meth:`step` on given rollouts (``[N, L]`` tensors as in
        :class:`~icml_cal_grpo.rollout.RolloutBatch`, ``token_adv`` ``[N, L]``): ``num_iterations``
        optimizer steps, each accumulating ``gradient_accumulation_steps`` micro-batches of
        rows normalised by the whole batch, so the gradient equals one big batch's."""
        import torch

        a = self.args
        dev = self.accelerator.device
        n = input_ids.shape[0]
        mask_all = (attempt_index[:, 1:] >= 0)
        width = input_ids.shape[1] - 1
        if a.loss_type in ("bnpo", "dapo"):
            num_items = float(mask_all.sum().clamp(min=1))
        elif a.loss_type == "grpo":
            num_items = float(n)
        else:
            num_items = float(n * width)
        bounds = torch.linspace(0, n, a.gradient_accumulation_steps + 1).round().long().tolist()
        micro = []
        self.model.train()
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            if hi <= lo:
                continue
            att = attention_mask[lo:hi]
            w = int(att.sum(dim=1).max())
            ids = input_ids[lo:hi, :w].to(dev)
            att = att[:, :w].to(dev)
            mb = {"ids": ids, "att": att, "mask": mask_all[lo:hi, :w - 1].to(dev),
                  "adv": token_adv[lo:hi, 1:w].to(dev)}
            if a.num_iterations > 1:         # else the policy is the sampling one: old = logps
                with torch.no_grad():
                    mb["old"] = self._logps(self.model, ids, att, mb["mask"])
            mb["ref"] = self._ref_logps(ids, att, mb["mask"]) if a.beta > 0 else None
            micro.append(mb)
        stats: dict[str, float] = {}
        for _ in range(a.num_iterations):
            self.optimizer.zero_grad()
            total = 0.0
            agg: dict[str, float] = {}
            for i, mb in enumerate(micro):
                sync = i == len(micro) - 1
                ctx = self.accelerator.no_sync(self.model) if not sync else _nullcontext()
                with ctx:
                    logps = self._logps(self.model, mb["ids"], mb["att"], mb["mask"])
                    old = mb["old"] if "old" in mb else logps.detach()
                    loss, st = clipped_pg_loss(logps, old, mb["adv"], mb["mask"],
                                               epsilon=a.epsilon, epsilon_high=a.epsilon_high,
                                               loss_type=a.loss_type, ref_logps=mb["ref"],
                                               beta=a.beta, num_items=num_items)
                    self.accelerator.backward(loss)
                total += float(loss.detach())
                share = float(mb["mask"].sum()) / max(float(mask_all.sum()), 1.0)
                for key, v in st.items():
                    agg[key] = agg.get(key, 0.0) + v * share
            if a.max_grad_norm > 0:
                self.accelerator.clip_grad_norm_(self.model.parameters(), a.max_grad_norm)
            self.optimizer.step()
            stats = {"loss": total, **agg}
        return stats

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
