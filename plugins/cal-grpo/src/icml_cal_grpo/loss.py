"""The clipped policy-gradient loss over attempt spans (GRPO / DAPO / Dr. GRPO aggregation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")


def sequence_logprobs(model: Any, input_ids: Any, attention_mask: Any,
                      temperature: float = 1.0,
                      allowed_token_ids: Sequence[int] | None = None) -> Any:
    """``log p(token_t | tokens_<t)`` for ``t = 1..L-1`` of right-padded sequences: ``[N, L-1]``
    (float32). Position ids follow the attention mask.

    ``allowed_token_ids``: the rollout's constrained decoding set
    (:attr:`MultiAttemptConfig.allowed_token_ids`). The log-probs are then those of the
    distribution the rollout sampled from, the softmax renormalised over the allowed tokens, so
    the score ``grad log p`` is that of the acting policy (the full-vocabulary score adds
    ``grad log P(allowed)``, a bias). Tokens outside the set get 0 (mask them from the loss)."""
    import torch

    pos = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask,
                   position_ids=pos).logits[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, 1:]
    if allowed_token_ids is None:
        logp = torch.log_softmax(logits, dim=-1)
        return torch.gather(logp, 2, targets[:, :, None]).squeeze(2)
    ids = torch.as_tensor(list(allowed_token_ids), dtype=torch.long, device=logits.device)
    if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= logits.shape[-1]:
        raise ValueError(f"allowed_token_ids must be non-empty ids in [0, {logits.shape[-1]})")
    allowed = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
    allowed[ids] = True
    logp = torch.log_softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
    tok = torch.gather(logp, 2, targets[:, :, None]).squeeze(2)
    return tok.masked_fill(~allowed[targets], 0.0)


def clipped_pg_loss(logps: Any, old_logps: Any, advantages: Any, mask: Any, *,
                    epsilon: float = 0.2, epsilon_high: float | None = None,
                    loss_type: str = "dapo") -> tuple[Any, dict[str, float]]:
    """PPO-clip token loss ``-min(rho * A, clip(rho, 1 - eps, 1 + eps_high) * A)``.

    ``logps``/``old_logps``/``advantages``/``mask`` are ``[N, T]`` (token advantages from
    :func:`~icml_cal_grpo.advantages.token_advantages`; ``mask`` is 1 on attempt tokens, 0 on
    prompt, feedback and padding). Aggregation: ``"grpo"`` (mean per sequence, then over
    sequences), ``"bnpo"``/``"dapo"`` (mean over all unmasked tokens), ``"dr_grpo"`` (sum over
    tokens / (N * T)). Masked tokens get exactly zero gradient.
    """
    import torch

    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type {loss_type!r} is not known: use one of "
                         f"{', '.join(LOSS_TYPES)}")
    if not (logps.shape == old_logps.shape == advantages.shape == mask.shape):
        raise ValueError(f"shapes differ: logps {tuple(logps.shape)}, old_logps "
                         f"{tuple(old_logps.shape)}, advantages {tuple(advantages.shape)}, "
                         f"mask {tuple(mask.shape)}")
    eps_hi = epsilon if epsilon_high is None else epsilon_high
    m = mask.to(logps.dtype)
    # zero the log-ratio on masked tokens *before* exp so no NaN/inf can leak through them
    log_ratio = torch.where(m > 0, logps - old_logps.detach(), torch.zeros_like(logps))
    ratio = torch.exp(log_ratio)
    adv = advantages.to(logps.dtype).detach()
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - epsilon, 1.0 + eps_hi) * adv
    per_tok = -torch.minimum(unclipped, clipped) * m
    if loss_type == "grpo":
        loss = (per_tok.sum(dim=1) / m.sum(dim=1).clamp(min=1)).mean()
    elif loss_type in ("bnpo", "dapo"):
        loss = per_tok.sum() / m.sum().clamp(min=1)
    else:
        loss = per_tok.sum() / (per_tok.shape[0] * per_tok.shape[1])
    with torch.no_grad():
        was_clipped = ((ratio < 1 - epsilon) & (adv < 0)) | ((ratio > 1 + eps_hi) & (adv > 0))
        frac = float((was_clipped.to(m.dtype) * m).sum() / m.sum().clamp(min=1))
    return loss, {"clip_fraction": frac}
