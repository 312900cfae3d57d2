"""CAL-GRPO: calibrated attempt-level GRPO for multi-attempt reasoning.

The public API. Nothing heavy is imported here: torch is loaded by the functions that need it.
"""

from __future__ import annotations

from icml.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "attempt_advantages": "advantages",
    "token_advantages": "advantages",
    "derive_reached": "advantages",
    "active_attempts": "advantages",
    "verification_reward": "advantages",
    "MODES": "advantages",
    "SCALES": "advantages",
    "AdvantageConfig": "config",
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
})
