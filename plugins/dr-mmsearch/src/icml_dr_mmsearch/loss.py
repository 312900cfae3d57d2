"""Token log-probs of trajectories and the GRPO loss: PPO clipping, the low-variance KL to a
reference policy (veRL's ``low_var_kl``, MMSearch-R1's ``kl_loss_type``), and the loss mask that
keeps prompt and tool-output tokens out of the gradient."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from icml_dr_mmsearch.config import AGGREGATIONS  # noqa: E402,F401


def token_logprobs(model: Any, input_ids: Any, attention_mask: Any, *,
                   prefixes: Sequence[Any] | None = None, temperature: float = 1.0) -> Any:
    """``log p(x_t | x_<t)`` for ``t = 1..L-1`` of right-padded ``[N, L]`` sequences, as a
    float32 ``[N, L-1]`` tensor (entry ``t-1`` scores token ``t``). ``prefixes``: per row an
    optional ``[P, H]`` embedding block placed before the tokens (the VLM adapter's image
    prefix; ``None`` rows get none -- all rows of one call must share ``P`` or have none)."""
    import torch

    n, width = input_ids.shape
    if prefixes is not None and any(p is not None for p in prefixes):
        ks = {int(p.shape[0]) for p in prefixes if p is not None}
        k = max(ks)
        emb = model.get_input_embeddings()(input_ids)
        full = torch.zeros((n, k + width, emb.shape[-1]), dtype=emb.dtype, device=emb.device)
        mask = torch.zeros((n, k + width), dtype=attention_mask.dtype,
                           device=attention_mask.device)
        pos = torch.zeros((n, k + width), dtype=torch.long, device=input_ids.device)
        for i, p in enumerate(prefixes):
            pk = 0 if p is None else int(p.shape[0])
            off = k - pk                       # left-pad the prefix block
            if pk:
                full[i, off:k] = p.to(emb.dtype)
                mask[i, off:k] = 1
            full[i, k:] = emb[i]
            mask[i, k:] = attention_mask[i]
            pos[i, off:] = torch.arange(k + width - off, device=input_ids.device)
        logits = model(inputs_embeds=full, attention_mask=mask, position_ids=pos).logits
        logits = logits[:, k:-1].float()
    else:
        pos = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        logits = model(input_ids=input_ids, attention_mask=attention_mask,
                       position_ids=pos).logits[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return torch.gather(logp, 2, input_ids[:, 1:, None]).squeeze(2)


def low_var_kl(logps: Any, ref_logps: Any) -> Any:
    """Schulman's k3 estimator ``exp(r) - r - 1`` with ``r = ref - logp`` (>= 0), clamped to
    [-10, 10] as veRL does."""
    import torch

    r = torch.clamp(ref_logps - logps, -20, 20)
    return torch.clamp(torch.exp(r) - r - 1, -10, 10)


def grpo_loss(logps: Any, old_logps: Any, advantages: Any, mask: Any, *,
              ref_logps: Any = None, beta: float = 0.001, epsilon: float = 0.2,
              epsilon_high: float | None = None,
              aggregation: str = "token-mean") -> tuple[Any, dict[str, float]]:
    """The clipped GRPO objective with a KL penalty, over ``[N, T]`` token tensors.

    ``advantages`` is ``[N]`` (one per trajectory, broadcast to its tokens) or ``[N, T]``;
    ``mask`` is 1 on model tokens and 0 on prompt, tool outputs and padding -- masked tokens get
    exactly zero gradient. ``aggregation``: ``"token-mean"`` (veRL's default) or
    ``"seq-mean"``. Returns ``(loss, stats)``."""
    import torch

    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation {aggregation!r} is not known: use one of "
                         f"{', '.join(AGGREGATIONS)}")
    if advantages.ndim == 1:
        advantages = advantages[:, None].expand_as(logps)
    if not (logps.shape == old_logps.shape == advantages.shape == mask.shape):
        raise ValueError(f"shapes differ: logps {tuple(logps.shape)}, old {tuple(old_logps.shape)}"
                         f", advantages {tuple(advantages.shape)}, mask {tuple(mask.shape)}")
    m = mask.to(logps.dtype)
    eps_hi = epsilon if epsilon_high is None else epsilon_high
    log_ratio = torch.where(m > 0, logps - old_logps.detach(), torch.zeros_like(logps))
    ratio = torch.exp(log_ratio)
    adv = advantages.to(logps.dtype).detach()
    per_tok = -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + eps_hi) * adv)
    kl = torch.zeros_like(logps)
    if ref_logps is not None and beta:
        kl = low_var_kl(torch.where(m > 0, logps, ref_logps.detach()), ref_logps.detach())
        per_tok = per_tok + beta * kl
    per_tok = per_tok * m
    if aggregation == "token-mean":
        loss = per_tok.sum() / m.sum().clamp(min=1)
    else:
        loss = (per_tok.sum(dim=1) / m.sum(dim=1).clamp(min=1)).mean()
    with torch.no_grad():
        clipped = ((ratio < 1 - epsilon) & (adv < 0)) | ((ratio > 1 + eps_hi) & (adv > 0))
        denom = m.sum().clamp(min=1)
        stats = {"clip_fraction": float((clipped.to(m.dtype) * m).sum() / denom),
                 "kl": float((kl * m).sum() / denom)}
    return loss, stats
