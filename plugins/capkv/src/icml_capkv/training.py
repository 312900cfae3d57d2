"""The one training loop behind the benchmarks' tiny models (recall task and grammar LM)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch


def train_tiny_lm(next_batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]], *,
                  vocab_size: int, max_positions: int, steps: int, lr: float,
                  arch: str = "llama", hidden_size: int = 64, num_layers: int = 2,
                  num_heads: int = 4, num_kv_heads: int = 2, seed: int = 0, device: Any = "cpu",
                  progress: Any = None) -> tuple[Any, dict]:
    """Train a tiny Llama/Qwen2 from scratch on ``next_batch(step) -> (input_ids, labels)``
    (AdamW with weight decay 0.01, one-cycle schedule with 10% warm-up, gradient clipping at 1).
    Returns ``(model, stats)`` with the final training loss and wall time; ``progress`` wraps
    the step iterator."""
    from icml.models import tiny_causal_lm

    model = tiny_causal_lm(arch, seed=seed, device=device, hidden_size=hidden_size,
                           num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads,
                           vocab_size=vocab_size, max_positions=max_positions)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=max(steps, 1),
                                                pct_start=0.1)
    model.train()
    t0 = time.perf_counter()
    loss_val = float("nan")
    it = range(steps)
    for step in (progress(it) if progress else it):
        ids, labels = next_batch(step)
        out = model(input_ids=ids.to(device), labels=labels.to(device))
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_val = float(out.loss.detach())
    model.eval()
    return model, {"train_loss": loss_val, "train_s": time.perf_counter() - t0}
