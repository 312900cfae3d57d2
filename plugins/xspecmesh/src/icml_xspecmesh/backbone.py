"""The autoregressive backbone: a small Llama- (or Qwen2-) style transformers causal LM over
mesh tokens, trained in-process by next-token cross-entropy (the CPU stand-in for BPT)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from icml_xspecmesh.dataset import PrimitiveDataset, pad_collate
from icml_xspecmesh.tokenizer import MeshTokenizer


def build_backbone(tokenizer: MeshTokenizer, *, arch: str = "llama", hidden_size: int = 96,
                   num_layers: int = 4, num_heads: int = 4, num_kv_heads: int = 2,
                   max_positions: int = 256, seed: int = 0, device: Any = "cpu",
                   dtype: Any = None) -> Any:
    """A randomly initialised causal LM whose vocabulary is the tokenizer's."""
    from icml.models import tiny_causal_lm

    return tiny_causal_lm(arch, seed=seed, device=device, dtype=dtype,
                          hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
                          num_kv_heads=num_kv_heads, vocab_size=tokenizer.vocab_size,
                          max_positions=max_positions)


def train_backbone(model: Any, data: PrimitiveDataset, *, steps: int = 400, batch_size: int = 32,
                   lr: float = 3e-3, warmup: int = 20, seed: int = 0,
                   progress: Callable[..., Iterable[Any]] | None = None) -> list[float]:
    """Next-token training with the core's loop (:func:`icml.training.train_lm`: AdamW with
    weight decay 0.01, gradient norm clipped at 1, ``warmup`` linear warm-up steps, then a
    cosine decay to 0 over the remaining steps). Each step draws ``batch_size`` sequences
    (uniform, with replacement, seeded by ``seed``), right-padded. Returns the losses."""
    from icml.training import TrainSettings, train_lm

    if len(data) == 0:
        raise ValueError("the dataset is empty: nothing to train the backbone on")
    gen = torch.Generator().manual_seed(seed)

    def batch(step: int) -> dict[str, Any]:
        idx = torch.randint(0, len(data), (batch_size,), generator=gen)
        return pad_collate([data.sequences[i] for i in idx.tolist()], pad_id=0)

    settings = TrainSettings(steps=steps, lr=lr, weight_decay=0.01, max_grad_norm=1.0,
                             schedule="cosine", warmup=max(warmup, 1), batch_size=batch_size,
                             seed=seed)
    wrap = None if progress is None else (
        lambda it, desc="training backbone": progress(it, desc=desc, total=steps))
    return train_lm(model, batch, settings, progress=wrap, desc="training backbone").losses
