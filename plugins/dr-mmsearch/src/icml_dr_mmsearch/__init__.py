"""DR-MMSearchAgent: structural-proximity advantages and differentiated Gaussian turn rewards for
multimodal search agents, on top of a faithful MMSearch-R1 baseline (reward, tag formats, rollout
rules) and an offline search environment.

The public API. Nothing heavy is imported here: torch, transformers, PIL and bm25s load with the
functions that need them.
"""

from __future__ import annotations

from icml.lazy import lazy_exports

_EXPORTS = {
    # environment
    "KnowledgeBase": "knowledge", "Question": "knowledge", "Entity": "knowledge",
    "Fact": "knowledge",
    "TextSearch": "tools", "ImageSearch": "tools", "ToolResult": "tools",
    "format_text_results": "tools", "format_image_results": "tools",
    "SearchEnv": "env", "Episode": "env", "parse_action": "env", "TAGS": "env",
    "STOP_STRINGS": "env",
    "word_tokenizer": "tokenizer", "check_tokenizer": "tokenizer",
    # rollout
    "agent_rollout": "rollout", "RolloutConfig": "config", "Trajectory": "rollout",
    "trajectory_batch": "rollout",
    "VisionPrefix": "vision",
    # rewards and advantages
    "normalize_answer": "rewards", "em_check": "rewards", "subem_check": "rewards",
    "extract_answer": "rewards", "format_check": "rewards", "answer_correct": "rewards",
    "mmsearch_r1_reward": "rewards", "gaussian_turn_reward": "rewards", "gaussian": "rewards",
    "TurnTarget": "rewards",
    "Structure": "advantages", "levenshtein": "advantages", "group_advantages": "advantages",
    "structure_distances": "advantages", "proximity_baseline": "advantages",
    "structural_proximity_advantages": "advantages",
    # training
    "token_logprobs": "loss", "grpo_loss": "loss", "low_var_kl": "loss",
    "SearchGRPOTrainer": "grpo", "GRPOConfig": "config", "RewardConfig": "config",
    "AdvantageConfig": "config", "WorldConfig": "config", "TrainConfig": "config",
    "WarmStartConfig": "config",
    "TrajectoryReward": "grpo", "compute_advantages": "grpo",
    "warm_start": "grpo", "gold_trajectory": "grpo", "sample_questions": "grpo",
    # metrics and experiments
    "agent_metrics": "metrics", "diverse_rate": "metrics",
    "ARMS": "experiment", "build_world": "experiment", "run_arms": "experiment",
    "evaluate_policy": "experiment", "warm_start_policy": "experiment", "train_arm": "experiment",
    "save_policy": "experiment", "load_policy": "experiment",
    "check_policy_folder": "experiment",
    # TRL
    "ProximityGRPOTrainer": "trl_adapter", "make_rollout_func": "trl_adapter",
    "question_dataset": "trl_adapter", "mmsearch_r1_reward_func": "trl_adapter",
    "GaussianTurnRewardFunc": "trl_adapter",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
