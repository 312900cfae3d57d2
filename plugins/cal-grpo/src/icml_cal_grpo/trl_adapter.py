"""TRL adapter: CAL advantages inside TRL's ``GRPOTrainer`` (tested with trl 1.16).

TRL's reward functions return one scalar per completion, which cannot give different attempts of
one completion different advantages. Two pieces close the gap:

* :func:`make_rollout_func` turns :func:`~icml_cal_grpo.rollout.multi_attempt_rollout` into a
  TRL ``rollout_func``: the completion is ``attempt 1, feedback, attempt 2, ...``, feedback tokens
  are masked through TRL's ``env_mask``, and the per-attempt verdicts and token spans travel to
  the trainer as extra fields.
* :class:`CALGRPOTrainer` subclasses ``GRPOTrainer`` and, after TRL scored the batch, replaces
  the scalar advantages by per-token ``[B, T]`` advantages from
  :func:`~icml_cal_grpo.advantages.attempt_advantages` (TRL's loss accepts that shape). The
  clipped loss, KL, ``loss_type`` and the rest of TRL stay as configured.

Which TRL surface is used, and why. Generation goes through the public ``rollout_func``
argument, the verdict through a public reward function, feedback masking through the
``rollout_func`` contract's ``env_mask``. One private method is overridden:
``_generate_and_score_completions``, and only to replace one entry of its output
(``"advantages"``) after calling it unchanged. It is the only place where a whole generation
batch is visible: TRL gathers rewards across processes there, and right after it shuffles the
batch and splits it into micro-batches, so the public ``compute_loss`` never sees a whole group,
which CAL's baseline needs. TRL's ``_compute_loss`` accepts ``[B, T]`` advantages from
subclasses (its comment says so). Across processes the attempt verdicts are gathered with
``accelerator.gather`` (TRL's group layout: the process-ordered concatenation holds whole groups)
and each process keeps its own rows. The ``trl`` extra pins ``trl>=1.16,<1.17``.

Defaults are CAL's own, not TRL's: no std scaling (``cal_scale="none"``) and a leave-one-out
baseline, whatever ``GRPOConfig.scale_rewards`` says (TRL's own scalar advantages are discarded).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

try:
    import trl
    from trl import GRPOTrainer
except ImportError as exc:  # the package exports CALGRPOTrainer lazily: say what to install
    raise ImportError(f"icml_cal_grpo.trl_adapter needs TRL ({exc}): pip install "
                      "'icml-cal-grpo[trl]'") from exc

from icml_cal_grpo.advantages import attempt_advantages
from icml_cal_grpo.config import AdvantageConfig
from icml_cal_grpo.rollout import MultiAttemptConfig, Verifier, multi_attempt_rollout

TESTED_TRL = "1.16"
if not trl.__version__.startswith(TESTED_TRL + "."):
    warnings.warn(f"icml_cal_grpo.trl_adapter was tested with trl {TESTED_TRL}.x, found "
                  f"{trl.__version__}: CALGRPOTrainer overrides a private GRPOTrainer method; "
                  "check its advantages (tests/test_trl_adapter.py) before relying on it",
                  stacklevel=2)


def make_rollout_func(verifier: Verifier, config: MultiAttemptConfig | None = None,
                      seed: int = 0) -> Callable[[list[str], Any], dict[str, Any]]:
    """A TRL ``rollout_func(prompts, trainer)``: one multi-attempt rollout per prompt entry."""
    cfg = config or MultiAttemptConfig()
    state: dict[str, Any] = {}

    def rollout_func(prompts: list[str], trainer: Any) -> dict[str, Any]:
        if prompts and not isinstance(prompts[0], str):
            raise ValueError("the CAL rollout needs plain-text prompts; apply the chat template "
                             "to the dataset's 'prompt' column first")
        model = trainer.accelerator.unwrap_model(trainer.model)
        tok = trainer.processing_class
        dev = next(model.parameters()).device
        if "gen" not in state:
            # one stream per process, or a group split across processes repeats its samples
            rank = trainer.accelerator.process_index
            state["gen"] = torch.Generator(device=dev).manual_seed(seed + 1_000_003 * rank)
        batch = multi_attempt_rollout(model, tok, prompts, verifier, cfg, num_generations=1,
                                      generator=state["gen"])
        prompt_ids, completion_ids, env_mask, logprobs, spans, verdicts = [], [], [], [], [], []
        for i in range(len(prompts)):
            ids = batch.input_ids[i][batch.attention_mask[i].bool()].tolist()
            lab = batch.attempt_index[i][batch.attention_mask[i].bool()].tolist()
            start = next(j for j, x in enumerate(lab) if x >= 0)
            prompt_ids.append(ids[:start])
            completion_ids.append(ids[start:])
            env_mask.append([int(x >= 0) for x in lab[start:]])
            lab_c = lab[start:]
            flat = iter([x for lp in batch.attempt_logprobs[i] for x in lp])
            logprobs.append([next(flat) if x >= 0 else 0.0 for x in lab_c])
            row_spans = []
            for k in range(len(batch.attempt_ids[i])):
                pos = [j for j, x in enumerate(lab_c) if x == k]
                row_spans.append((pos[0], pos[-1] + 1) if pos else (0, 0))
            spans.append(row_spans)
            verdicts.append(batch.rewards[i, :len(batch.attempt_ids[i])].tolist())
        state["last"] = (verdicts, spans)     # read by CALGRPOTrainer for these same rows
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs,
                "env_mask": env_mask, "attempt_rewards": verdicts, "attempt_spans": spans}

    rollout_func.state = state  # type: ignore[attr-defined]

    return rollout_func


def verification_reward_func(prompts: list[Any], completions: list[Any],
                        attempt_rewards: list[list[float]] | None = None,
                        **kwargs: Any) -> list[float]:
    """TRL reward function: Verification@K of each completion (1 if some attempt passed)."""
    if attempt_rewards is None:
        raise ValueError("verification_reward_func needs the 'attempt_rewards' field from "
                         "make_rollout_func; use it with CALGRPOTrainer")
    return [float(any(r > 0.5 for r in rs)) for rs in attempt_rewards]


class CALGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with multi-attempt rollouts and per-attempt (CAL) advantages.

    Extra arguments: ``verifier(prompt, attempt, earlier) -> bool``, ``rollout_config``
    (:class:`MultiAttemptConfig`), ``cal_mode`` (``"cal"``, ``"trajectory"``, ``"naive"``,
    ``"td"``), ``cal_advantage`` (:class:`~icml_cal_grpo.config.AdvantageConfig`: ``lam``,
    ``baseline`` ``"loo"`` default or ``"mean"`` as TRL, ``scale`` ``"none"`` default or
    ``"group"``/``"batch"``/``"position"``); ``cal_lam``, ``cal_baseline`` and ``cal_scale``
    override single settings of it. TRL's
    ``scale_rewards`` has no effect on the advantages used (they are replaced).
    ``reward_funcs`` defaults to :func:`verification_reward_func`. Runs in one or several
    processes (``accelerate launch``); groups may straddle processes.
    """

    def __init__(self, model: Any, reward_funcs: Any = None, args: Any = None,
                 train_dataset: Any = None, *, verifier: Verifier,
                 rollout_config: MultiAttemptConfig | None = None, cal_mode: str = "cal",
                 cal_advantage: AdvantageConfig | None = None, cal_lam: float | None = None,
                 cal_baseline: str | None = None, cal_scale: str | None = None,
                 **kwargs: Any) -> None:
        from icml_cal_grpo.advantages import MODES, advantage_config

        if cal_mode not in MODES:
            raise ValueError(f"cal_mode {cal_mode!r} is not known: use one of {', '.join(MODES)}")
        try:
            self.cal_advantage = advantage_config(cal_advantage, lam=cal_lam,
                                                  baseline=cal_baseline, scale=cal_scale)
        except ValueError as exc:
            raise ValueError(f"cal_{exc}") from None
        if "rollout_func" in kwargs:
            raise ValueError("CALGRPOTrainer builds its own rollout_func from verifier and "
                             "rollout_config; do not pass one")
        self.rollout_config = rollout_config or MultiAttemptConfig()
        self.cal_mode = cal_mode
        seed = getattr(args, "seed", 0) if args is not None else 0
        self._cal_rollout = make_rollout_func(verifier, self.rollout_config, seed)
        super().__init__(model=model, reward_funcs=reward_funcs or [verification_reward_func],
                         args=args, train_dataset=train_dataset,
                         rollout_func=self._cal_rollout, **kwargs)

    @property
    def cal_lam(self) -> float:
        return self.cal_advantage.lam

    @property
    def cal_scale(self) -> str:
        return self.cal_advantage.scale

    @property
    def cal_baseline(self) -> str:
        return self.cal_advantage.baseline

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        verdicts, spans = self._cal_rollout.state.pop("last")
        mode = "train" if self.model.training else "eval"
        g = self.num_generations if mode == "train" else self.num_generations_eval
        k_max = self.rollout_config.max_attempts
        n = len(verdicts)
        dev = out["completion_ids"].device
        rewards = torch.zeros((n, k_max), dtype=torch.float32, device=dev)
        reached = torch.zeros((n, k_max), dtype=torch.bool, device=dev)
        for i, rs in enumerate(verdicts):
            rewards[i, :len(rs)] = torch.tensor(rs, dtype=torch.float32)
            reached[i, :len(rs)] = True
        # whole groups: the process-ordered concatenation (the layout TRL's own baseline uses)
        all_r = self.accelerator.gather(rewards).double().cpu()
        all_reached = self.accelerator.gather(reached.to(torch.int64)).bool().cpu()
        adv_all = attempt_advantages(all_r, all_reached, group_size=g, mode=self.cal_mode,
                                     config=self.cal_advantage)
        start = self.accelerator.process_index * n
        adv = adv_all[start:start + n]
        t = out["completion_ids"].shape[1]
        tok_adv = torch.zeros((n, t), dtype=torch.float32)
        for i, row_spans in enumerate(spans):
            for k, (s, e) in enumerate(row_spans):
                tok_adv[i, s:min(e, t)] = float(adv[i, k])
        out["advantages"] = tok_adv.to(dev)
        success = all_reached & (all_r > 0.5)
        self._metrics[mode]["cal/ver_at_k"].append(float(success.any(1).float().mean()))
        self._metrics[mode]["cal/mean_attempts"].append(float(all_reached.sum(1).float().mean()))
        return out
