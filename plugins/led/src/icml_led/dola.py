"""DoLa (Chuang et al., 2024), the layer-contrast baseline, re-implemented offline.

transformers moved DoLa out of its core into the Hub repository ``transformers-community/dola``
(reached through ``custom_generate``), which cannot be used without a network. This module follows
that algorithm:

* candidate premature layers (hidden-state indices, ``N`` = number of blocks, ``s`` = 2 when the
  embeddings are tied to the head, else 0): ``"low"`` = ``range(s, N // 2, 2)``, ``"high"`` =
  ``range(N // 2, N, 2)`` (for ``N > 40``: ``range(s, 20, 2)`` / ``range(N - 20, N, 2)``), or an
  explicit list;
* premature logits ``lm_head(h_l)`` without the final norm;
* the premature layer with maximal Jensen-Shannon divergence to the final layer (averaged over the
  batch; transformers' convention ``0.5 * (KL(M || P_final) + KL(M || P_l))`` with the
  per-vocabulary mean, which has the same argmax as the sum);
* relative-top filter: keep tokens with ``log p_final >= log p_max + log(relative_top)``; the
  output is ``log p_final - log p_premature`` there and ``-inf`` elsewhere.
"""

from __future__ import annotations

import math
from typing import Any


def dola_candidate_layers(num_layers: int, dola_layers: str | list[int] | tuple[int, ...] = "high",
                          tie_word_embeddings: bool = False) -> list[int]:
    """Hidden-state indices DoLa contrasts against (see the module docstring)."""
    N = int(num_layers)
    start = 2 if tie_word_embeddings else 0
    if isinstance(dola_layers, str):
        if dola_layers == "low":
            if start == N // 2:
                return [start]
            return list(range(start, N // 2, 2)) if N <= 40 else list(range(start, 20, 2))
        if dola_layers == "high":
            return list(range(N // 2, N, 2)) if N <= 40 else list(range(N - 20, N, 2))
        raise ValueError(f"dola_layers={dola_layers!r} is not allowed: use 'low', 'high' or a "
                         "list of layer indices")
    layers = [int(i) for i in dola_layers if int(i) < N]
    if not layers:
        raise ValueError(f"dola_layers={list(dola_layers)} has no index below the model's "
                         f"{N} layers: pass indices in 0..{N - 1}")
    return layers


def relative_top_filter(final_logits: Any, base_logits: Any, relative_top: float = 0.1,
                        filter_value: float = -math.inf, base_filter_value: float = -1e-3,
                        min_tokens_to_keep: int = 1) -> tuple[Any, Any]:
    """Log-softmax both, and mask tokens whose final log-prob is below
    ``max(log p) + log(relative_top)`` (keeping at least ``min_tokens_to_keep``)."""
    import torch

    final = torch.log_softmax(final_logits.float(), dim=-1)
    base = torch.log_softmax(base_logits.float(), dim=-1)
    kth = final.topk(min_tokens_to_keep, dim=-1).values[..., -1]
    thresh = torch.minimum(kth, final.max(-1).values + math.log(relative_top)).unsqueeze(-1)
    drop = final < thresh
    return final.masked_fill(drop, filter_value), base.masked_fill(drop, base_filter_value)


def js_divergence(final_logits: Any, premature_logits: Any) -> Any:
    """transformers' DoLa divergence between ``final (B, V)`` and each of ``premature (n, B, V)``,
    averaged over the batch: a tensor ``(n,)``.

    The value is bit for bit that of the vectorised formula (softmax, ``m = (p + q) / 2``,
    ``mean_v m (log m - log p)`` and the same for ``q``; tested), computed one candidate layer at
    a time in four reused ``(B, V)`` buffers on CPU: the vectorised form allocates about ten
    ``(n, B, V)`` temporaries per step (100 MB each for SmolLM2 at batch 64), whose page faults
    cost more than the arithmetic. ``premature_logits`` may be in a lower precision (a
    bfloat16 model's read-out): each layer is converted into a reused float32 buffer, the same
    values as ``.float()``. Other devices and inputs that need gradients get the vectorised
    formula itself."""
    import torch

    f = final_logits.float()
    p = torch.softmax(f, -1)
    lf = torch.log_softmax(f, -1)
    if premature_logits.device.type != "cpu" or torch.is_grad_enabled() and (
            final_logits.requires_grad or premature_logits.requires_grad):
        # the plain formula: differentiable, and on accelerators (a caching allocator, no page
        # faults) exactly what 0.2.1 computed
        q = torch.softmax(premature_logits.float(), -1)
        m = 0.5 * (p[None] + q)
        logm = torch.log(m)
        kl1 = (m * (logm - lf[None])).mean(-1)
        kl2 = (m * (logm - torch.log_softmax(premature_logits.float(), -1))).mean(-1)
        return (0.5 * (kl1 + kl2)).mean(-1)
    n = premature_logits.shape[0]
    q, lq, logm, tmp = (torch.empty_like(p) for _ in range(4))
    kl1 = p.new_empty(n, p.shape[0])
    kl2 = p.new_empty(n, p.shape[0])
    x = premature_logits[0] if premature_logits.dtype == torch.float32 else torch.empty_like(p)
    for i in range(n):
        if premature_logits.dtype == torch.float32:
            x = premature_logits[i]
        else:                          # bfloat16 / float16 read-outs: the exact float32 values
            x.copy_(premature_logits[i])
        torch.softmax(x, -1, out=q)
        torch.log_softmax(x, -1, out=lq)
        m = q.add_(p).mul_(0.5)                        # m = (p + q) / 2, in place of q
        torch.log(m, out=logm)
        kl1[i] = torch.sub(logm, lf, out=tmp).mul_(m).mean(-1)
        kl2[i] = torch.sub(logm, lq, out=lq).mul_(m).mean(-1)
    return (0.5 * (kl1 + kl2)).mean(-1)


def dola_contrast(final_logits: Any, premature_logits: Any, relative_top: float = 0.1) -> tuple[
        Any, int]:
    """DoLa's next-token scores from ``final (B, V)`` and candidate ``premature (n, B, V)``
    logits. Returns ``(scores (B, V), index of the chosen premature candidate)``."""
    if premature_logits.dim() != 3 or premature_logits.shape[1:] != final_logits.shape:
        raise ValueError(f"premature_logits must be (n_layers, batch, vocab) matching final "
                         f"{tuple(final_logits.shape)}, got {tuple(premature_logits.shape)}")
    if premature_logits.shape[0] == 1:
        chosen = 0
    else:
        chosen = int(js_divergence(final_logits, premature_logits).argmax())
    final, base = relative_top_filter(final_logits, premature_logits[chosen], relative_top)
    return final - base, chosen
