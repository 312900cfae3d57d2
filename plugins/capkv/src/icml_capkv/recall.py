"""A tiny associative-recall task with planted redundancy, and a trainer for a tiny model on it.

Sequence (token ids): ``BOS`` then a context of ``context_len - 1`` tokens in which ``n_pairs``
key/value pairs sit at random places among *filler* tokens drawn from a small set (the planted
redundancy: many duplicated entries in the KV cache). Training appends ``n_queries`` questions
``? k_j v_j`` (loss on the answers ``v_j`` only); at evaluation the context is prefilled (and
compressed) and the question ``? k_j`` must be answered with ``v_j``.

Two layouts of a pair in the context:

* ``"split"``: two adjacent tokens ``k v`` (recall needs an induction circuit: the value's cache
  entry must learn which key preceded it). A tiny 2-layer model does *not* learn this within a
  CPU minute (about 0.2-0.45 accuracy after 400-800 steps in our trials);
* ``"fused"``: one token per pair whose id encodes ``(k, v)`` (``n_keys * n_values`` pair
  tokens); the question ``? k`` must find the pair token of ``k`` and read ``v`` from it, which
  the same model learns to >= 0.99 accuracy in 400 steps (8 keys, 8 values, 8 pairs). Each
  pair is then exactly one cache entry among ~``context_len`` filler duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["RecallTask", "train_recall_model"]

PAD, BOS, QUERY = 0, 1, 2


@dataclass
class RecallTask:
    """Vocabulary layout: 0 pad, 1 BOS, 2 query marker, 3 unused, then keys, values, pair tokens
    (``layout="fused"`` only: id ``pair0 + k * n_values + v``), fillers."""

    context_len: int = 64
    n_pairs: int = 8
    n_keys: int = 32
    n_values: int = 32
    n_fillers: int = 4
    n_queries: int = 4
    layout: str = "split"

    def __post_init__(self) -> None:
        if self.layout not in ("split", "fused"):
            raise ValueError(f"layout must be 'split' (k v tokens) or 'fused' (one token per "
                             f"pair), got {self.layout!r}")
        if self.n_pairs > self.n_keys:
            raise ValueError(f"n_pairs ({self.n_pairs}) must be <= n_keys ({self.n_keys}): keys "
                             "are distinct within a context")
        if self.n_pairs * (2 if self.layout == "split" else 1) > self.context_len - 1:
            raise ValueError(f"context_len {self.context_len} is too short for {self.n_pairs} "
                             f"{self.layout} pairs: it needs at least "
                             f"{self.n_pairs * (2 if self.layout == 'split' else 1) + 1} tokens")
        if min(self.n_keys, self.n_values, self.n_fillers, self.n_queries) < 1:
            raise ValueError("n_keys, n_values, n_fillers and n_queries must all be >= 1")

    @property
    def key0(self) -> int:
        return 4

    @property
    def value0(self) -> int:
        return self.key0 + self.n_keys

    @property
    def pair0(self) -> int:
        return self.value0 + self.n_values

    @property
    def filler0(self) -> int:
        return self.pair0 + (self.n_keys * self.n_values if self.layout == "fused" else 0)

    def carries_pair(self, ids: torch.Tensor) -> torch.Tensor:
        """Bool mask of the context tokens that hold pair information (keys and values for
        ``split``, pair tokens for ``fused``); the rest are BOS and fillers."""
        return (ids >= self.key0) & (ids < self.filler0) if self.layout == "split" else (
            (ids >= self.pair0) & (ids < self.filler0))

    @property
    def vocab_size(self) -> int:
        return self.filler0 + self.n_fillers

    def sample(self, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """``context`` (B, context_len), ``keys``/``values`` (B, n_pairs), ``slots`` (B, n_pairs)
        the context positions of the keys (``split``) or of the pair tokens (``fused``)."""
        B, L, P = batch, self.context_len, self.n_pairs
        n_slots = (L - 1) // 2
        ctx = self.filler0 + torch.randint(self.n_fillers, (B, L), generator=generator)
        ctx[:, 0] = BOS
        keys = torch.stack([torch.randperm(self.n_keys, generator=generator)[:P]
                            for _ in range(B)]) + self.key0
        values = torch.randint(self.n_values, (B, P), generator=generator) + self.value0
        rows = torch.arange(B)[:, None]
        if self.layout == "fused":
            pos = 1 + torch.stack([torch.randperm(L - 1, generator=generator)[:P].sort().values
                                   for _ in range(B)])
            ctx[rows, pos] = (self.pair0 + (keys - self.key0) * self.n_values
                              + (values - self.value0))
            return {"context": ctx, "keys": keys, "values": values, "slots": pos}
        slot = torch.stack([torch.randperm(n_slots, generator=generator)[:P].sort().values
                            for _ in range(B)])
        pos = 1 + 2 * slot
        ctx[rows, pos] = keys
        ctx[rows, pos + 1] = values
        return {"context": ctx, "keys": keys, "values": values, "slots": pos}

    def training_batch(self, batch: int, generator: torch.Generator):
        """``(input_ids, labels)`` with loss only on the answers of ``n_queries`` questions."""
        s = self.sample(batch, generator)
        j = torch.randint(self.n_pairs, (batch, self.n_queries), generator=generator)
        k = s["keys"].gather(1, j)
        v = s["values"].gather(1, j)
        q = torch.stack([torch.full_like(k, QUERY), k, v], -1).reshape(batch, -1)
        ids = torch.cat([s["context"], q], 1)
        labels = torch.full_like(ids, -100)
        ans = self.context_len + 3 * torch.arange(self.n_queries) + 2
        labels[:, ans] = v
        return ids, labels

    def eval_batch(self, batch: int, generator: torch.Generator):
        """``(context, question, answer)``: question ``? k_j`` (B, 2), answer ``v_j`` (B,)."""
        s = self.sample(batch, generator)
        j = torch.randint(self.n_pairs, (batch, 1), generator=generator)
        k = s["keys"].gather(1, j)
        question = torch.cat([torch.full_like(k, QUERY), k], 1)
        return s["context"], question, s["values"].gather(1, j)[:, 0]


def train_recall_model(task: RecallTask, *, arch: str = "llama", hidden_size: int = 64,
                       num_layers: int = 2, num_heads: int = 4, num_kv_heads: int = 2,
                       steps: int = 600, batch_size: int = 32, lr: float = 3e-3,
                       seed: int = 0, device: Any = "cpu",
                       progress: Any = None) -> tuple[Any, dict]:
    """Train a tiny Llama/Qwen2 on ``task`` (see :func:`icml_capkv.training.train_tiny_lm`).
    Returns ``(model, stats)`` with ``stats`` = final training loss and wall time. ``progress``
    wraps the step iterator."""
    from icml_capkv.training import train_tiny_lm

    if steps < 0 or batch_size < 1:
        raise ValueError("steps must be >= 0 and batch_size >= 1")
    gen = torch.Generator().manual_seed(seed)
    return train_tiny_lm(lambda step: task.training_batch(batch_size, gen),
                         vocab_size=task.vocab_size,
                         max_positions=max(512, 2 * task.context_len), steps=steps, lr=lr,
                         arch=arch, hidden_size=hidden_size, num_layers=num_layers,
                         num_heads=num_heads, num_kv_heads=num_kv_heads, seed=seed,
                         device=device, progress=progress)
