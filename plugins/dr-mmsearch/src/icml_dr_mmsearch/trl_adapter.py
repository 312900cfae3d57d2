"""TRL adapter (tested with trl 1.16): our multi-turn search rollout and rewards inside TRL's
``GRPOTrainer``.

What TRL's API allows, and what it does not:

* **Multi-turn rollouts in the baseline's tag format**: TRL's own tool loop (``tools=`` /
  ``environment_factory=``) speaks the chat template's tool-call format, not MMSearch-R1's
  ``<search><img></search>`` / ``<text_search>`` tags, so we plug our rollout in through TRL's
  experimental ``rollout_func`` (:func:`make_rollout_func`): the completion is ``turn 1, tool
  result, turn 2, ...``; tool results are masked through ``env_mask``; the turns, tool sequence
  and gold answer travel to the reward functions as extra fields. Our rollout runs on the
  unwrapped model with its KV cache across turns (not vLLM).
* **Rewards**: :func:`mmsearch_r1_reward_func` and :class:`GaussianTurnRewardFunc` (which keeps
  the EMA of ``mu`` across calls) are ordinary TRL reward functions.
* **The structural-proximity advantage is batch-level**: TRL normalises rewards per group and has
  no hook for a batch baseline, so :class:`ProximityGRPOTrainer` overrides two *private* methods
  (``_calculate_rewards`` to keep the rewards, ``_generate_and_score_completions`` to replace the
  advantages). This is why the module warns on any trl other than 1.16.x (the extra has a
  lower bound only). Single process only (the batch must be whole).
* **Images**: on the ``rollout_func`` path TRL forwards no images to its loss, so the VLM prefix
  adapter (:class:`~icml_dr_mmsearch.vision.VisionPrefix`) cannot be used with TRL; use
  :class:`~icml_dr_mmsearch.grpo.SearchGRPOTrainer` for it.

Prompts carry the question id as a ``<q:ID>`` marker (:func:`question_dataset`) because image
questions share their text and TRL hands ``rollout_func`` only the prompt strings; the marker is
stripped, never shown to the model.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

try:
    import trl
    from trl import GRPOTrainer
except ImportError as _exc:  # one line with the fix, not a bare ModuleNotFoundError
    raise ImportError(f"icml_dr_mmsearch.trl_adapter needs TRL ({_exc}): pip install "
                      "'icml-dr-mmsearch[trl]'") from _exc

from icml_dr_mmsearch.advantages import Structure, structural_proximity_advantages
from icml_dr_mmsearch.config import AdvantageConfig, RewardConfig
from icml_dr_mmsearch.env import SearchEnv
from icml_dr_mmsearch.knowledge import Question
from icml_dr_mmsearch.rewards import (
    TurnTarget,
    answer_correct,
    gaussian_turn_reward,
    mmsearch_r1_reward,
)
from icml_dr_mmsearch.rollout import RolloutConfig, agent_rollout

TESTED_TRL = "1.16"
if not trl.__version__.startswith(TESTED_TRL + "."):
    warnings.warn(f"icml_dr_mmsearch.trl_adapter was tested with trl {TESTED_TRL}.x, found "
                  f"{trl.__version__}: ProximityGRPOTrainer overrides private GRPOTrainer "
                  "methods; run tests/test_trl_adapter.py before relying on it", stacklevel=2)

_MARK = re.compile(r"^<q:(\d+)>")


def question_dataset(env: SearchEnv, questions: Sequence[Question]) -> Any:
    """A ``datasets.Dataset`` with a ``prompt`` column (``<q:ID>`` + the question's prompt) for
    :func:`make_rollout_func`."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [f"<q:{q.id}>" + env.prompt(q) for q in questions]})


def make_rollout_func(env: SearchEnv, config: RolloutConfig | None = None,
                      seed: int = 0) -> Callable[[list[str], Any], dict[str, Any]]:
    """A TRL ``rollout_func(prompts, trainer)``: one multi-turn rollout per prompt entry (TRL
    already repeats each prompt ``num_generations`` times)."""
    by_id = {q.id: q for q in env.kb.questions}
    state: dict[str, Any] = {}

    def rollout_func(prompts: list[str], trainer: Any) -> dict[str, Any]:
        qs = []
        for p in prompts:
            m = _MARK.match(p) if isinstance(p, str) else None
            if m is None or int(m.group(1)) not in by_id:
                raise ValueError("the search rollout needs prompts from question_dataset(env, "
                                 f"questions) (a '<q:ID>' marker), got {str(p)[:60]!r}")
            qs.append(by_id[int(m.group(1))])
        model = trainer.accelerator.unwrap_model(trainer.model)
        tok = trainer.processing_class
        dev = next(model.parameters()).device
        if "gen" not in state:
            state["gen"] = torch.Generator(device=dev).manual_seed(seed)
        trajs = agent_rollout(model, tok, env, qs, num_generations=1, config=config,
                              generator=state["gen"])
        out: dict[str, list[Any]] = {k: [] for k in (
            "prompt_ids", "completion_ids", "logprobs", "env_mask", "responses", "answer",
            "turns", "actions", "model_tokens", "required_searches", "question_text")}
        for t in trajs:
            ids, mask = t.token_ids, t.loss_mask
            start = len(t.segments[0][0])
            lps = iter(t.logprobs)
            out["prompt_ids"].append(ids[:start])
            out["completion_ids"].append(ids[start:])
            out["env_mask"].append(mask[start:])
            out["logprobs"].append([next(lps) if m else 0.0 for m in mask[start:]])
            out["responses"].append(list(t.responses))
            out["answer"].append(t.question.answer)
            out["turns"].append(t.turns)
            out["actions"].append(t.actions)
            out["model_tokens"].append(t.length)
            out["required_searches"].append(t.question.required_searches)
            out["question_text"].append(t.question.text)
        return out

    return rollout_func


def _need(name: str, value: Any) -> Any:
    if value is None:
        raise ValueError(f"this reward function needs the {name!r} field from make_rollout_func")
    return value


def mmsearch_r1_reward_func(prompts: Any, completions: Any, responses: Any = None,
                            answer: Any = None, **kwargs: Any) -> list[float]:
    """TRL reward function: MMSearch-R1's reward of each rollout (default constants)."""
    return [mmsearch_r1_reward(r, a) for r, a in zip(_need("responses", responses),
                                                      _need("answer", answer), strict=True)]


class GaussianTurnRewardFunc:
    """TRL reward function: the differentiated Gaussian turn reward (reconstructed) with the
    dynamic ``mu`` of a :class:`~icml_dr_mmsearch.grpo.RewardConfig` (the EMA persists across
    calls)."""

    __name__ = "gaussian_turn_reward"

    def __init__(self, config: RewardConfig | None = None,
                 tool_limits: dict[str, int] | None = None) -> None:
        self.config = config or RewardConfig(kind="gaussian")
        self.tool_limits = tool_limits
        self.target = TurnTarget(self.config.mu, self.config.mu_init, self.config.mu_momentum)

    def __call__(self, prompts: Any, completions: Any, responses: Any = None, answer: Any = None,
                 required_searches: Any = None, question_text: Any = None,
                 **kwargs: Any) -> list[float]:
        c = self.config
        rs, golds = _need("responses", responses), _need("answer", answer)
        if required_searches is None and c.mu == "hop":
            raise ValueError("mu='hop' needs the dataset column required_searches (the "
                             "rollout_func of make_rollout_func provides it), or use mu='ema'")
        if question_text is None and c.mu == "question":
            raise ValueError("mu='question' needs the column question_text (the rollout_func "
                             "of make_rollout_func provides it), or use mu='ema'")
        req = required_searches or [0] * len(rs)
        texts = question_text or [""] * len(rs)
        out = []
        for r, a, k, x in zip(rs, golds, req, texts, strict=True):
            q = Question(-1, x, a, hops=k, required_searches=k)
            out.append(gaussian_turn_reward(
                r, a, mu=self.target.mu(q), sigma_pos=c.sigma_pos, sigma_neg=c.sigma_neg,
                gamma=c.gamma, gamma_neg=c.gamma_neg, format_weight=c.format_weight,
                match=c.match, format_mode=c.format_mode, tool_limits=self.tool_limits,
                search_penalty=c.search_penalty if c.gaussian_penalty else 0.0,
                per_call_penalty=c.per_call_penalty))
        self.target.update([len(r) for r in rs], [answer_correct(r, a, c.match)
                                                  for r, a in zip(rs, golds, strict=True)])
        return out


class ProximityGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with our multi-turn search rollout and (optionally) the
    structural-proximity advantage.

    Extra arguments: ``env`` (:class:`~icml_dr_mmsearch.env.SearchEnv`), ``rollout_config``,
    ``advantage`` (:class:`~icml_dr_mmsearch.grpo.AdvantageConfig`; ``kind="group"`` keeps TRL's
    own advantages). ``reward_funcs`` defaults to :func:`mmsearch_r1_reward_func`; the train
    dataset must come from :func:`question_dataset`."""

    def __init__(self, model: Any, reward_funcs: Any = None, args: Any = None,
                 train_dataset: Any = None, *, env: SearchEnv,
                 rollout_config: RolloutConfig | None = None,
                 advantage: AdvantageConfig | None = None, **kwargs: Any) -> None:
        self.search_env = env
        self.advantage_config = advantage or AdvantageConfig(kind="proximity")
        seed = getattr(args, "seed", 0) if args is not None else 0
        super().__init__(model=model, reward_funcs=reward_funcs or [mmsearch_r1_reward_func],
                         args=args, train_dataset=train_dataset,
                         rollout_func=make_rollout_func(env, rollout_config, seed), **kwargs)
        if self.accelerator.num_processes > 1:
            raise ValueError("ProximityGRPOTrainer runs in a single process (the proximity "
                             "baseline needs the whole batch); use SearchGRPOTrainer")
        self._last_rewards: Any = None

    def _calculate_rewards(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        rewards = super()._calculate_rewards(inputs, *args, **kwargs)
        self._last_rewards = rewards
        return rewards

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        a = self.advantage_config
        if a.kind != "proximity":
            return out
        mode = "train" if self.model.training else "eval"
        g = self.num_generations if mode == "train" else self.num_generations_eval
        w = self.reward_weights.to(self._last_rewards.device)
        rewards = (self._last_rewards * w.unsqueeze(0)).nansum(dim=1).double()
        structs = [Structure(int(x["turns"]), str(x["actions"]), int(x["model_tokens"]))
                   for x in inputs]
        adv = structural_proximity_advantages(
            rewards, structs, group_ids=[i // g for i in range(len(inputs))], tau=a.tau,
            eta=a.eta, kappa=a.kappa, length_weight=a.length_weight,
            max_turns=self.search_env.max_rounds, scale=a.scale)
        out["advantages"] = adv.to(device=out["advantages"].device,
                                   dtype=out["advantages"].dtype)
        self._metrics[mode]["search/mean_turns"].append(
            sum(s.turns for s in structs) / len(structs))
        return out
