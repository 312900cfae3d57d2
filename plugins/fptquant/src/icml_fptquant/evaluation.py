"""Quality metrics: perplexity, KL divergence and logit error against a reference model."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F


@torch.no_grad()
def logits_of(model: Any, data: Any, batch_size: int = 8) -> list[torch.Tensor]:
    from icml_fptquant.quantize import as_batches

    device = next(model.parameters()).device
    return [model(b.to(device), use_cache=False).logits.float().cpu()
            for b in as_batches(data, batch_size)]


@torch.no_grad()
def perplexity(model: Any, data: Any, batch_size: int = 8) -> float:
    """exp(mean next-token NLL) of ``model`` on token-id sequences ``data``."""
    from icml_fptquant.quantize import as_batches

    nll, count = 0.0, 0
    device = next(model.parameters()).device
    for b in as_batches(data, batch_size):
        b = b.to(device)
        logits = model(b, use_cache=False).logits[:, :-1].float()
        nll += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                     b[:, 1:].reshape(-1), reduction="sum"))
        count += b[:, 1:].numel()
    if count == 0:
        raise ValueError("perplexity needs sequences of at least 2 tokens")
    return math.exp(nll / count)


@torch.no_grad()
def compare_logits(model: Any, data: Any, reference: list[torch.Tensor],
                   batch_size: int = 8) -> dict[str, float]:
    """KL(reference || model) per token and max |logit difference| against reference logits
    (from :func:`logits_of` on the same data and batch size)."""
    kl, n, err = 0.0, 0, 0.0
    for out, ref in zip(logits_of(model, data, batch_size), reference):
        t, s = F.log_softmax(ref, -1), F.log_softmax(out, -1)
        kl += float((t.exp() * (t - s)).sum(-1).sum())
        n += ref.shape[0] * ref.shape[1]
        d = float((out - ref).abs().max())
        err = math.nan if math.isnan(d) or math.isnan(err) else max(err, d)  # nan is sticky
    return {"kl": kl / n, "max_logit_err": err}


@torch.no_grad()
def check_function_preservation(model_a: Any, model_b: Any, input_ids: torch.Tensor) -> float:
    """Max |logit difference| of two models on ``input_ids``."""
    dev_a, dev_b = next(model_a.parameters()).device, next(model_b.parameters()).device
    a = model_a(input_ids.to(dev_a), use_cache=False).logits.cpu()
    b = model_b(input_ids.to(dev_b), use_cache=False).logits.cpu()
    return float((a.double() - b.double()).abs().max())
