"""Beyond Log Likelihood (ICML 2026): probability-based SFT objectives as losses for HF/TRL
trainers and accelerate loops, plus the model-capability diagnostic.

Importing this package loads no torch/transformers: names are resolved lazily (PEP 562).
"""

from __future__ import annotations

from icml.lazy import lazy_exports
from icml_beyond_nll.objectives import OFFICIAL_KEYS, ProbObjective, parse_objectives

__getattr__, __dir__, _lazy_all = lazy_exports(__name__, {
    "prob_objective_loss": "loss", "ProbObjectiveLoss": "loss", "make_compute_loss_func": "loss",
    "shift_for_causal_lm": "loss", "LossStats": "loss", "NORMALIZE": "config",
    "LossSettings": "config",
    "token_logprobs": "logprobs",
    "ProbObjectiveTrainer": "trainers", "ProbObjectiveMixin": "trainers",
    "make_trainer": "trainers", "prob_objective_trainer_class": "trainers",
    "sft_trainer_class": "trainers",
    "train_loop": "loop", "batch_iterator": "loop", "LoopResult": "loop",
    "prior_strength": "diagnostic", "PriorReport": "diagnostic", "classify": "diagnostic",
    "make_examples": "tasks", "encode": "tasks", "exact_match": "tasks",
    "gradient_check": "job",
})
__all__ = ["OFFICIAL_KEYS", "ProbObjective", "parse_objectives", *_lazy_all]
