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


def _batches(n: int, batch_size: int, steps: int, gen: torch.Generator) -> Iterable[torch.Tensor]:
    for _ in range(steps):
        yield torch.randint(0, n, (batch_size,), generator=gen)


def train_backbone(model: Any, data: PrimitiveDataset, *, steps: int = 400, batch_size: int = 32,
                   lr: float = 3e-3, warmup: int = 20, seed: int = 0,
                   progress: Callable[..., Iterable[Any]] | None = None) -> list[float]:
    """Next-token training (AdamW, linear warm-up then cosine decay). Returns the losses."""
    if len(data) == 0:
        raise ValueError("the dataset is empty: nothing to train the backbone on")
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(warmup, 1)) *
        0.5 * (1 + torch.cos(torch.tensor(torch.pi * min(s, steps) / max(steps, 1))).item()))
    model.train()
    losses = []
    it = _batches(len(data), batch_size, steps, gen)
    for idx in (progress(it, desc="training backbone", total=steps) if progress else it):
        batch = pad_collate([data.sequences[i] for i in idx.tolist()], pad_id=0)
        batch = {k: v.to(device) for k, v in batch.items()}
        loss = model(**batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses
