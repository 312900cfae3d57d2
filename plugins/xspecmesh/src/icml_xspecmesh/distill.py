"""Head training by distillation from the backbone (the paper's strategy, reconstructed):

    L = sum_k decay^k * KL( p_backbone(. | x_<=t+k)  ||  q_k(. | h_t) )

with teacher distributions from one teacher-forced backbone pass (on dataset sequences or on the
backbone's own samples). ``loss="ce"`` is the Medusa-1 ablation: cross-entropy of head k against
the ground-truth token x_{t+k+1}. The backbone and the shared lm_head stay frozen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch.nn import functional as F

from icml_xspecmesh.dataset import pad_collate

LOSSES = ("kl", "ce")


def distillation_loss(head_logits: torch.Tensor, teacher_logits: torch.Tensor,
                      attention_mask: torch.Tensor | None = None, *, loss: str = "kl",
                      input_ids: torch.Tensor | None = None, decay: float = 0.8,
                      temperature: float = 1.0) -> torch.Tensor:
    """Weighted head loss. ``head_logits``: ``(B, T, K, V)`` from hidden states at every
    position; ``teacher_logits``: ``(B, T, V)`` of the backbone on the same sequences (position
    t predicts token t+1). Head k (1-based) at position t is scored against the teacher at
    position t+k (``kl``) or the token at t+k+1 (``ce``, needs ``input_ids``); positions whose
    target token is padding are skipped."""
    if loss not in LOSSES:
        raise ValueError(f"loss={loss!r}: use one of {', '.join(LOSSES)}")
    if head_logits.dim() != 4 or teacher_logits.dim() != 3:
        raise ValueError(f"head_logits must be (B, T, K, V) and teacher_logits (B, T, V), got "
                         f"{tuple(head_logits.shape)} and {tuple(teacher_logits.shape)}")
    B, T, K, V = head_logits.shape
    if loss == "ce" and input_ids is None:
        raise ValueError("loss='ce' needs input_ids (the ground-truth tokens)")
    mask = (torch.ones(B, T, dtype=torch.bool, device=head_logits.device)
            if attention_mask is None else attention_mask.bool())
    total = head_logits.new_zeros((), dtype=torch.float32)
    for k in range(1, K + 1):
        n = T - k - 1
        if n <= 0:
            continue
        valid = mask[:, k + 1:T]
        if not valid.any():
            continue
        logq = F.log_softmax(head_logits[:, :n, k - 1].float() / temperature, dim=-1)
        if loss == "kl":
            logp = F.log_softmax(teacher_logits[:, k:T - 1].float() / temperature, dim=-1)
            per = (logp.exp() * (logp - logq)).sum(-1)
        else:
            per = -logq.gather(-1, input_ids[:, k + 1:T, None]).squeeze(-1)
        total = total + decay ** k * per[valid].mean()
    return total


def _as_sequences(data: Any) -> list[list[int]]:
    if hasattr(data, "sequences"):
        seqs = data.sequences
    elif isinstance(data, torch.Tensor):
        seqs = data.tolist()
    else:
        seqs = list(data)
    seqs = [list(map(int, s)) for s in seqs]
    if not seqs:
        raise ValueError("no training sequences: pass a dataset, a list of id lists or a "
                         "(N, T) tensor")
    return seqs


@torch.no_grad()
def teacher_pass(model: Any, input_ids: torch.Tensor,
                 attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Last hidden states ``(B, T, D)`` and logits ``(B, T, V)`` of one teacher-forced pass."""
    out = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True,
                use_cache=False)
    return out.hidden_states[-1], out.logits


@torch.no_grad()
def self_samples(model: Any, prefixes: Sequence[Sequence[int]], *, max_new_tokens: int,
                 top_k: int = 0, seed: int = 0, batch_size: int = 32,
                 pad_token_id: int = 0) -> list[list[int]]:
    """The backbone's own samples continuing each prefix (for distillation on model outputs)."""
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    out: list[list[int]] = []
    eos = model.generation_config.eos_token_id
    for i in range(0, len(prefixes), batch_size):
        chunk = [list(p) for p in prefixes[i:i + batch_size]]
        L = max(map(len, chunk))
        ids = torch.full((len(chunk), L), pad_token_id, dtype=torch.long, device=device)
        mask = torch.zeros_like(ids)
        for j, p in enumerate(chunk):  # left padding
            ids[j, L - len(p):] = torch.tensor(p, device=device)
            mask[j, L - len(p):] = 1
        gen = model.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                             top_k=top_k or None,
                             max_new_tokens=max_new_tokens, pad_token_id=pad_token_id)
        for j, p in enumerate(chunk):
            row = gen[j, L:].tolist()
            if eos is not None and eos in row:
                row = row[:row.index(eos) + 1]
            out.append(list(p) + row)
    return out


def distill_heads(model: Any, heads: Any, data: Any, *, loss: str = "kl", steps: int = 300,
                  lr: float = 1e-3, batch_size: int = 32, decay: float = 0.8,
                  temperature: float = 1.0, condition_len: int = 2, source: str = "data",
                  sample_top_k: int = 0, max_length: int | None = None, seed: int = 0,
                  progress: Callable[..., Iterable[Any]] | None = None) -> list[float]:
    """Train ``heads`` on ``data`` against the frozen ``model``. Returns the loss per step.

    ``source="data"`` distils on the given sequences, ``"samples"`` on the backbone's own
    continuations of their first ``condition_len`` tokens. With cross-attention heads the
    condition is the hidden states of those first ``condition_len`` tokens (the prompt).
    ``max_length`` crops long sequences (text)."""
    if loss not in LOSSES:
        raise ValueError(f"loss={loss!r}: use one of {', '.join(LOSSES)}")
    if source not in ("data", "samples"):
        raise ValueError(f"source={source!r}: use 'data' or 'samples'")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    seqs = _as_sequences(data)
    if max_length:
        seqs = [s[:max_length] for s in seqs]
    if source == "samples":
        longest = max(map(len, seqs))
        seqs = self_samples(model, [s[:condition_len] for s in seqs],
                            max_new_tokens=longest - condition_len, top_k=sample_top_k,
                            seed=seed)
    device = next(model.parameters()).device
    model.eval()
    heads.train()
    opt = torch.optim.AdamW(heads.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    it = range(steps)
    for _ in (progress(it, desc=f"distilling heads ({loss})", total=steps) if progress else it):
        idx = torch.randint(0, len(seqs), (batch_size,), generator=gen).tolist()
        batch = pad_collate([seqs[i] for i in idx])
        ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
        hidden, teacher = teacher_pass(model, ids, mask)
        cond = hidden[:, :condition_len] if heads.cross_attention else None
        cmask = mask[:, :condition_len] if heads.cross_attention else None
        hl = heads(hidden.detach(), cond, cmask)
        value = distillation_loss(hl, teacher, mask, loss=loss, input_ids=ids, decay=decay,
                                  temperature=temperature)
        opt.zero_grad(set_to_none=True)
        value.backward()
        opt.step()
        losses.append(float(value.detach()))
    heads.eval()
    return losses
