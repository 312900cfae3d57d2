"""Typed configs, one per capability. Field names are the CLI's --set keys and match the
Python API's argument names."""

from __future__ import annotations

from dataclasses import dataclass

from icml import option
from icml_cal_grpo.advantages import BASELINES, MODES, SCALES

_MODES = MODES


@dataclass
class AdvantageConfig:
    """The advantage estimator's settings: what :func:`~icml_cal_grpo.attempt_advantages`,
    :class:`~icml_cal_grpo.AttemptGRPOConfig` (``advantage=``) and
    :class:`~icml_cal_grpo.CALGRPOTrainer` (``cal_advantage=``) take, and the ``advantage.*``
    section of the train config. The estimator itself (``mode``) is chosen per run."""

    lam: float = option(1.0, help="td mode: weight of the Monte Carlo return (1 = CAL)",
                        ge=0, le=1)
    scale: str = option("none", help="advantage scaling: none (CAL's), group (TRL's "
                        "scale_rewards='group'), batch, position", choices=SCALES)
    baseline: str = option("loo", help="group baseline: loo (leave-one-out, unbiased) or mean "
                           "(incl. the rollout itself, as TRL)", choices=BASELINES)

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise ValueError(f"scale {self.scale!r} is not known: use one of "
                             f"{', '.join(SCALES)}")
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline {self.baseline!r} is not known: use one of "
                             f"{', '.join(BASELINES)}")
        if not 0.0 <= float(self.lam) <= 1.0:
            raise ValueError(f"lam must be in [0, 1], got {self.lam}")


@dataclass
class TrainConfig:
    model: str = option("", help="model to train: packaged name | local HF folder | previous "
                        "run folder (icml.compose.load_model); empty = built-in tiny model")
    arch: str = option("qwen2", help="architecture of the built-in tiny model",
                       choices=("qwen2", "llama"))
    hidden_size: int = option(64, help="hidden size of the built-in tiny model", ge=8)
    modes: list[str] = option(["naive", "trajectory", "cal"],
                              help="advantage estimators to train and compare "
                                   "(cal, trajectory, naive, td)")
    seeds: int = option(3, help="seeds per estimator (run seed, seed+1, ...)", ge=1)
    steps: int = option(40, help="policy updates per run", ge=1)
    num_generations: int = option(8, help="rollouts per prompt (group size G)", ge=2)
    prompts_per_step: int = option(2, help="prompts (groups) per update", ge=1)
    max_attempts: int = option(3, help="attempts per rollout (K)", ge=1)
    learning_rate: float = option(3e-3, help="AdamW learning rate", gt=0)
    advantage: AdvantageConfig = option(default_factory=AdvantageConfig,
                                        help="the advantage estimator's settings "
                                        "(AdvantageConfig: lam, scale, baseline)")
    loss_type: str = option("dapo", help="token aggregation of the clipped loss",
                            choices=("grpo", "bnpo", "dapo", "dr_grpo"))
    epsilon: float = option(0.2, help="PPO clip range", gt=0)
    num_iterations: int = option(1, help="optimizer steps per rollout batch", ge=1)
    target: float = option(0.85, help="Ver@K target for steps-to-target", gt=0, le=1)
    p_guess: float = option(0.3, help="probe task: success prob. of the guess arm", ge=0, le=1)
    p_exploit: float = option(0.9, help="probe task: exploit success after a probe", ge=0, le=1)
    estimator_groups: int = option(4000, help="0 skips the estimator table; any other value "
                                   "computes it (bias and variance exact by enumeration at "
                                   "G = num_generations; the value is no longer a sample "
                                   "count)", ge=0)
    save_model: bool = option(True, help="save the last CAL-trained model (the last mode's "
                              "without cal) to <run>/model for other plugins (icml.compose)")

    def __post_init__(self) -> None:
        _check_model(self.model)
        bad = [m for m in self.modes if m not in _MODES]
        if bad or not self.modes:
            raise ValueError(f"modes {self.modes!r}: each must be one of {', '.join(_MODES)}")


@dataclass
class InferConfig:
    model: str = option("", help="model: packaged name | local HF folder | previous run "
                        "folder; empty = built-in tiny model")
    verifier: str = option("probe", help="'probe' (built-in probe task) or 'module:function' "
                           "taking (prompt, attempt, earlier) -> bool")
    prompts: list[str] = option([], help="prompts; empty = the probe task's prompt")
    num_generations: int = option(4, help="rollouts per prompt", ge=1)
    max_attempts: int = option(3, help="attempts per rollout (K)", ge=1)
    feedback: str = option("", help="text appended after a failed attempt; empty = task default")
    max_attempt_tokens: int = option(32, help="token limit per attempt (probe task: 1)", ge=1)
    on_length: str = option("fail", help="an attempt cut by the limit: fail or verify",
                            choices=("fail", "verify"))
    temperature: float = option(1.0, help="sampling temperature", gt=0)
    backend: str = option("cache", help="rollout sampler: cache (ours, one KV cache across "
                          "attempts) or generate (transformers generate per attempt)",
                          choices=("cache", "generate"))

    def __post_init__(self) -> None:
        _check_model(self.model)


@dataclass
class EvaluateConfig(InferConfig):
    """The infer settings with many more rollouts, for Ver@K estimates."""

    num_generations: int = option(256, help="rollouts per prompt", ge=1)

def _check_model(model: str) -> None:
    """``model`` names a packaged model, a local folder or a run folder (cheap: no loading)."""
    from icml.compose import is_model_spec

    if model and not is_model_spec(model):
        from icml.pretrained import PACKAGED_MODELS

        raise ValueError(f"model={model!r} is not a packaged model name "
                         f"({', '.join(sorted(PACKAGED_MODELS))}), a local transformers folder "
                         "or a previous run folder")
