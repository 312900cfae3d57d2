"""The clipped policy-gradient loss over attempt spans (GRPO / DAPO / Dr. GRPO aggregation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")


def _backbone_and_head(model: Any) -> tuple[Any, Any] | None:
    """``(decoder, lm_head)`` when the logits are exactly ``lm_head(decoder(...))`` (no logit
    soft-capping or scaling), else ``None``. Works through PEFT wrappers (LoRA layers are
    injected in place)."""
    cfg = getattr(model, "config", None)
    for attr in ("final_logit_softcapping", "logit_scale", "output_multiplier_scale"):
        if getattr(cfg, attr, None) not in (None, 1, 1.0):
            return None
    try:
        dec, head = model.get_decoder(), model.get_output_embeddings()
    except (AttributeError, NotImplementedError, TypeError):
        return None
    if dec is None or head is None or dec is model:
        return None
    return dec, head


def _chunk_logps(head: Any, hidden: Any, targets: Any, temperature: float,
                 allowed: Any) -> Any:
    import torch

    logits = head(hidden).float()
    if temperature != 1.0:
        logits = logits / temperature
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    tok = torch.gather(logits, 2, targets[:, :, None]).squeeze(2) - logits.logsumexp(dim=-1)
    if allowed is not None:
        tok = tok.masked_fill(~allowed[targets], 0.0)
    return tok


def sequence_logprobs(model: Any, input_ids: Any, attention_mask: Any,
                      temperature: float = 1.0,
                      allowed_token_ids: Sequence[int] | None = None,
                      chunk_size: int | None = 64, positions: Any = None) -> Any:
    """``log p(token_t | tokens_<t)`` for ``t = 1..L-1`` of right-padded sequences: ``[N, L-1]``
    (float32). Position ids follow the attention mask.

    The ``[N, L, V]`` logits are never materialised in fp32: the decoder's hidden states go
    through the output layer ``chunk_size`` positions at a time (each chunk recomputed in the
    backward pass by activation checkpointing when gradients are on), so the peak is one
    ``[N, chunk_size, V]`` fp32 block. ``chunk_size=None`` (or a model whose logits are not
    ``lm_head(hidden)``, e.g. with soft-capping) uses one full forward.

    ``allowed_token_ids``: the rollout's constrained decoding set
    (:attr:`MultiAttemptConfig.allowed_token_ids`). The log-probs are then those of the
    distribution the rollout sampled from, the softmax renormalised over the allowed tokens, so
    the score ``grad log p`` is that of the acting policy (the full-vocabulary score adds
    ``grad log P(allowed)``, a bias). Tokens outside the set get 0 (mask them from the loss).

    ``positions`` (bool ``[N, L-1]``, optional): compute the output layer only where it is
    True (the attempt tokens the loss uses), in chunks of ``chunk_size`` selected positions;
    the other entries are 0. The prompt and feedback positions then cost the decoder only, not
    the ``V``-wide output layer (same values and gradients where True; with
    ``chunk_size=None`` or a model without a plain output layer it is applied after the
    full forward)."""
    import torch

    pos = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    targets = input_ids[:, 1:]
    parts = _backbone_and_head(model) if chunk_size else None
    if parts is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask,
                       position_ids=pos).logits[:, :-1]
        vocab = logits.shape[-1]
    else:
        dec, head = parts
        hidden = dec(input_ids=input_ids, attention_mask=attention_mask,
                     position_ids=pos).last_hidden_state[:, :-1]
        vocab = head.weight.shape[0] if hasattr(head, "weight") else None
    allowed = None
    if allowed_token_ids is not None:
        ids = torch.as_tensor(list(allowed_token_ids), dtype=torch.long,
                              device=input_ids.device)
        if vocab is None:
            vocab = int(model.config.vocab_size)
        if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= vocab:
            raise ValueError(f"allowed_token_ids must be non-empty ids in [0, {vocab})")
        allowed = torch.zeros(vocab, dtype=torch.bool, device=input_ids.device)
        allowed[ids] = True
    if parts is None:
        full = _chunk_logps(lambda x: x, logits, targets, temperature, allowed)
        if positions is not None:
            full = full.masked_fill(~positions.to(device=full.device, dtype=torch.bool), 0.0)
        return full
    if positions is not None:
        positions = positions.to(device=hidden.device, dtype=torch.bool)
        if tuple(positions.shape) != tuple(targets.shape):
            raise ValueError(f"positions has shape {tuple(positions.shape)}; it must be "
                             f"{tuple(targets.shape)} (one flag per predicted token)")
        hs, ts = hidden[positions][None], targets[positions][None]       # [1, M, H], [1, M]
        flat = (_chunked_logps(head, hs, ts, temperature, allowed, int(chunk_size))[0]
                if hs.shape[1] else hs.new_zeros(0))
        out_full = torch.zeros(targets.shape, dtype=torch.float32, device=hidden.device)
        return out_full.masked_scatter(positions, flat.float())
    return _chunked_logps(head, hidden, targets, temperature, allowed, int(chunk_size))


def _chunked_logps(head: Any, hidden: Any, targets: Any, temperature: float, allowed: Any,
                   chunk_size: int) -> Any:
    """:func:`_chunk_logps` over ``chunk_size`` positions at a time (checkpointed under
    autograd, so the ``[B, chunk, V]`` logits are recomputed in backward, not kept)."""
    import torch
    from torch.utils.checkpoint import checkpoint

    out = []
    for s in range(0, hidden.shape[1], chunk_size):
        h, t = hidden[:, s:s + chunk_size], targets[:, s:s + chunk_size]
        if torch.is_grad_enabled() and h.requires_grad:
            out.append(checkpoint(_chunk_logps, head, h, t, temperature, allowed,
                                  use_reentrant=False))
        else:
            out.append(_chunk_logps(head, h, t, temperature, allowed))
    return torch.cat(out, dim=1)


def kl_k3(logps: Any, ref_logps: Any) -> Any:
    """Per-token k3 estimate of ``KL(pi || ref)`` at tokens sampled from ``pi`` (Schulman's
    estimator, as TRL/DeepSeekMath): ``exp(ref - logp) - (ref - logp) - 1 >= 0``. Its mean
    under ``pi`` is ``KL(pi || ref)``; differentiated through ``logp`` only (the samples held
    fixed), its mean gradient is ``grad KL(ref || pi)`` (both tested by enumeration)."""
    import torch

    d = ref_logps.detach() - logps
    return torch.exp(d) - d - 1.0


def clipped_pg_loss(logps: Any, old_logps: Any, advantages: Any, mask: Any, *,
                    epsilon: float = 0.2, epsilon_high: float | None = None,
                    loss_type: str = "dapo", ref_logps: Any = None, beta: float = 0.0,
                    num_items: float | None = None) -> tuple[Any, dict[str, float]]:
    """PPO-clip token loss ``-min(rho * A, clip(rho, 1 - eps, 1 + eps_high) * A)``.

    ``logps``/``old_logps``/``advantages``/``mask`` are ``[N, T]`` (token advantages from
    :func:`~icml_cal_grpo.advantages.token_advantages`; ``mask`` is 1 on attempt tokens, 0 on
    prompt, feedback and padding). Aggregation: ``"grpo"`` (mean per sequence, then over
    sequences), ``"bnpo"``/``"dapo"`` (mean over all unmasked tokens), ``"dr_grpo"`` (sum over
    tokens / (N * T)). Masked tokens get exactly zero gradient.

    ``beta > 0`` adds ``beta * kl_k3(logps, ref_logps)`` to every token's loss (KL to a frozen
    reference; ``ref_logps`` ``[N, T]``), aggregated like the policy term.

    ``num_items`` (gradient accumulation): the whole batch's normaliser, so that the losses of
    micro-batches *sum* to the big batch's loss: its number of unmasked tokens
    (``bnpo``/``dapo``), of sequences (``grpo``) or ``N * T`` (``dr_grpo``; ``T`` is the big
    batch's width). ``None``: this batch's own.
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
    per_tok = -torch.minimum(unclipped, clipped)
    kl = None
    if beta:
        if ref_logps is None or ref_logps.shape != logps.shape:
            raise ValueError("beta > 0 needs ref_logps of the same shape as logps (the frozen "
                             "reference model's log-probs of the same tokens)")
        kl = kl_k3(logps, torch.where(m > 0, ref_logps, logps.detach()))
        per_tok = per_tok + beta * kl
    per_tok = per_tok * m
    if loss_type == "grpo":
        den = per_tok.shape[0] if num_items is None else num_items
        loss = (per_tok.sum(dim=1) / m.sum(dim=1).clamp(min=1)).sum() / den
    elif loss_type in ("bnpo", "dapo"):
        den = m.sum().clamp(min=1) if num_items is None else num_items
        loss = per_tok.sum() / den
    else:
        den = per_tok.shape[0] * per_tok.shape[1] if num_items is None else num_items
        loss = per_tok.sum() / den
    with torch.no_grad():
        was_clipped = ((ratio < 1 - epsilon) & (adv < 0)) | ((ratio > 1 + eps_hi) & (adv > 0))
        frac = float((was_clipped.to(m.dtype) * m).sum() / m.sum().clamp(min=1))
        stats = {"clip_fraction": frac}
        if kl is not None:
            stats["kl"] = float((kl * m).sum() / m.sum().clamp(min=1))
    return loss, stats
