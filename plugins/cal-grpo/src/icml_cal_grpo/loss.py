"""The clipped policy-gradient loss over attempt spans (GRPO / DAPO / Dr. GRPO aggregation)."""

from __future__ import annotations

from typing import Any

LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")


def sequence_logprobs(model: Any, input_ids: Any, attention_mask: Any,
                      temperature: float = 1.0) -> Any:
    """``log p(token_t | tokens_<t)`` for ``t = 1..L-1`` of right-padded sequences: ``[N, L-1]``
    (float32). Position ids follow the attention mask."""
    import torch

    pos = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask,
                   position_ids=pos).logits[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return torch.gather(logp, 2, input_ids[:, 1:, None]).squeeze(2)


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
