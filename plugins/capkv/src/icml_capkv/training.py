"""The one training loop behind the benchmarks' tiny models (recall task and grammar LM): the
core's seeded loop (:func:`icml.training.train_lm`) with this plugin's settings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def train_tiny_lm(next_batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]], *,
                  vocab_size: int, max_positions: int, steps: int, lr: float,
                  arch: str = "llama", hidden_size: int = 64, num_layers: int = 2,
                  num_heads: int = 4, num_kv_heads: int = 2, seed: int = 0, device: Any = "cpu",
                  progress: Any = None) -> tuple[Any, dict]:
    """Train a tiny Llama/Qwen2 from scratch on ``next_batch(step) -> (input_ids, labels)``
    (:func:`icml.training.train_lm`: AdamW with weight decay 0.01, one-cycle schedule with 10%
    warm-up, gradient clipping at 1). Returns ``(model, stats)`` with the final training loss
    and wall time; ``progress`` wraps the step iterator."""
    from icml.models import tiny_causal_lm
    from icml.training import TrainSettings, train_lm

    model = tiny_causal_lm(arch, seed=seed, device=device, hidden_size=hidden_size,
                           num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads,
                           vocab_size=vocab_size, max_positions=max_positions)
    if steps == 0:
        return model.eval(), {"train_loss": float("nan"), "train_s": 0.0}
    settings = TrainSettings(steps=steps, lr=lr, weight_decay=0.01, schedule="one-cycle",
                             warmup=0.1, max_grad_norm=1.0, seed=seed)
    log = train_lm(model, next_batch, settings,
                   progress=(lambda it, desc="": progress(it)) if progress else None)
    return model, {"train_loss": log.final_loss, "train_s": log.seconds}
