"""CAL-GRPO: calibrated attempt-level GRPO for multi-attempt reasoning.

The public API. Nothing heavy is imported here: torch is loaded by the functions that need it.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "attempt_advantages": "advantages",
    "token_advantages": "advantages",
    "derive_reached": "advantages",
    "active_attempts": "advantages",
    "verification_reward": "advantages",
    "MODES": "advantages",
    "SCALES": "advantages",
    "MultiAttemptConfig": "rollout",
    "RolloutBatch": "rollout",
    "VerifierError": "rollout",
    "multi_attempt_rollout": "rollout",
    "clipped_pg_loss": "loss",
    "sequence_logprobs": "loss",
    "kl_k3": "loss",
    "AttemptGRPOConfig": "trainer",
    "AttemptGRPOTrainer": "trainer",
    "verification_at_k": "metrics",
    "per_attempt_pass_rate": "metrics",
    "correction_rate": "metrics",
    "attempt_metrics": "metrics",
    "ProbeTask": "tasks",
    "ChatQATask": "tasks",
    "ArithmeticChoiceTask": "tasks",
    "probe_env": "tabular",
    "memoryless_env": "tabular",
    "enumerate_trajectories": "tabular",
    "exact_gradient": "tabular",
    "expected_estimator": "tabular",
    "exact_estimator_moments": "tabular",
    "CALGRPOTrainer": "trl_adapter",
    "make_rollout_func": "trl_adapter",
    "verification_reward_func": "trl_adapter",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        try:
            module = import_module(f"icml_cal_grpo.{_EXPORTS[name]}")
        except ImportError as exc:
            if _EXPORTS[name] == "trl_adapter":
                raise ImportError(f"{name} needs TRL ({exc}): pip install "
                                  "'icml-cal-grpo[trl]'") from exc
            raise
        return getattr(module, name)
    raise AttributeError(f"module 'icml_cal_grpo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
