"""Inference-time OOD mixer: weigh the personal against the shared subspace per prompt from the
perplexity similarity between the prompt and the client's local training prompts."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from icml_het_cpflora.adapters import lora_layers
from icml_het_cpflora.config import PPL_NORMS
from icml_het_cpflora.ranks import ClientRankSpec


def prompt_ppl(model: Any, input_ids: Any, attention_mask: Any = None, *,
               norm: str = "official", batch_size: int = 64) -> Any:
    """Per-prompt score exp(mean NLL) / n, the mean NLL taken over the n_tok - 1 predicted
    tokens (the model's own loss with ``labels=input_ids``), and n:

    - ``"official"``: n = n_tok, every token of the prompt as the tokenizer encodes it (BOS
      included where the tokenizer adds one), as the official ``calculate_perplexity`` does
      (``perplexity / len(tokenizer.encode(text))``);
    - ``"predicted"``: n = n_tok - 1, the predicted tokens (this plugin's score up to 0.1.4);
    - ``"none"``: n = 1, the plain perplexity.

    ``n_tok`` is the number of positions with ``attention_mask == 1`` (all of them without a
    mask)."""
    import torch

    if norm not in PPL_NORMS:
        raise ValueError(f"norm={norm!r}: use one of {PPL_NORMS}")
    outs = []
    with torch.no_grad():
        for s in range(0, input_ids.shape[0], batch_size):
            ids = input_ids[s:s + batch_size]
            mask = (attention_mask[s:s + batch_size] if attention_mask is not None
                    else torch.ones_like(ids))
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:],
                                                    reduction="none")
            m = (mask[:, 1:] * mask[:, :-1]).float()
            npred = m.sum(1).clamp_min(1)
            ppl = torch.exp((nll * m).sum(1) / npred)
            if norm == "official":
                ppl = ppl / mask.float().sum(1).clamp_min(1)
            elif norm == "predicted":
                ppl = ppl / npred
            outs.append(ppl)
    return torch.cat(outs)


def similarity(ppl_x: float, reference: Sequence[float]) -> float:
    """s(x) = mean_j [1 - |ppl(x) - ppl_j| / max(ppl(x), ppl_j)] in [0, 1]."""
    if len(reference) == 0:
        raise ValueError("the OOD mixer has no reference prompts: fit it on the client's local "
                         "training prompts first")
    terms = [1.0 - abs(ppl_x - r) / max(ppl_x, r) if max(ppl_x, r) > 0 else 1.0
             for r in reference]
    return sum(terms) / len(terms)


def mixer_weights(s: float, spec: ClientRankSpec) -> tuple[float, float]:
    """(w_s, w_p) with w_p = s · max(r_s, r_p) / (r_s + r_p) and w_s = 1 - w_p."""
    if not 0.0 <= s <= 1.0:
        raise ValueError(f"similarity {s} must lie in [0, 1]")
    w_p = s * max(spec.r_shared, spec.r_personal) / spec.rank
    return 1.0 - w_p, w_p


@dataclass
class OODMixer:
    """Reference scores of one client's local prompts; gives (w_s, w_p) for a new prompt."""

    reference: list[float]
    spec: ClientRankSpec
    norm: str = "official"

    @classmethod
    def fit(cls, model: Any, input_ids: Any, spec: ClientRankSpec, attention_mask: Any = None,
            *, norm: str = "official") -> OODMixer:
        """Score the client's local prompts (``norm``: see :func:`prompt_ppl`)."""
        ref = prompt_ppl(model, input_ids, attention_mask, norm=norm).tolist()
        return cls(ref, spec, norm)

    def weights_for_ppl(self, ppl_x: float) -> tuple[float, float]:
        return mixer_weights(similarity(ppl_x, self.reference), self.spec)

    def weights(self, model: Any, input_ids: Any,
                attention_mask: Any = None) -> list[tuple[float, float]]:
        """(w_s, w_p) per prompt (one extra forward pass each, with the unweighted adapter)."""
        ppl = prompt_ppl(model, input_ids, attention_mask, norm=self.norm)
        return [self.weights_for_ppl(float(p)) for p in ppl]


@contextlib.contextmanager
def subspace_weights(model: Any, name: str, spec: ClientRankSpec, w_s: float,
                     w_p: float) -> Iterator[None]:
    """Scale A_s by w_s and A_p by w_p of adapter ``name`` in place, so that
    ΔW = (α/r)(w_s B_s A_s + w_p B_p A_p); restores the exact original factors on exit."""
    import torch

    layers = lora_layers(model, name)
    saved = {p: m.lora_A[name].weight.detach().clone() for p, m in layers.items()}
    try:
        with torch.no_grad():
            for m in layers.values():
                W = m.lora_A[name].weight
                if W.shape[0] != spec.rank:
                    raise ValueError(f"adapter {name!r} has rank {W.shape[0]}, spec says "
                                     f"{spec.rank}")
                W[:spec.r_shared] *= w_s
                W[spec.r_shared:] *= w_p
        yield
    finally:
        with torch.no_grad():
            for p, m in layers.items():
                m.lora_A[name].weight.copy_(saved[p])


@contextlib.contextmanager
def per_prompt_subspace_weights(model: Any, name: str, spec: ClientRankSpec,
                                weights: Sequence[tuple[float, float]]) -> Iterator[None]:
    """Batched :func:`subspace_weights`: row b of every forward pass gets its own
    ``weights[b] = (w_s, w_p)``, so prompts with different OOD weights share one padded batch
    (one ``generate`` call instead of one per prompt).

    Why it is the same adapter: scaling the rows of A by a diagonal D gives
    B (D A) x = B (D (A x)), so multiplying the r_s shared and r_p personal components of the
    ``lora_A`` output by (w_s, w_p) per row equals scaling A_s, A_p in place (up to float
    rounding order). Implemented as forward hooks on adapter ``name``'s ``lora_A`` layers
    (peft's vanilla LoRA: ``lora_B(lora_A(dropout(x))) * scaling``); removed on exit, the
    factors are never touched. Every forward inside the block must have ``len(weights)`` rows
    (greedy ``generate`` keeps the batch size)."""
    import torch

    layers = lora_layers(model, name)
    if not weights:
        raise ValueError("per_prompt_subspace_weights needs one (w_s, w_p) per batch row")
    handles = []

    def hook(module: Any, args: Any, out: Any) -> Any:
        if out.shape[0] != len(weights):
            raise ValueError(f"batch of {out.shape[0]} rows but {len(weights)} weight pairs")
        scale = torch.tensor([[w_s] * spec.r_shared + [w_p] * spec.r_personal
                              for w_s, w_p in weights], dtype=out.dtype, device=out.device)
        return out * scale.view(out.shape[0], *([1] * (out.dim() - 2)), spec.rank)

    try:
        for m in layers.values():
            A = m.lora_A[name]
            if A.weight.shape[0] != spec.rank:
                raise ValueError(f"adapter {name!r} has rank {A.weight.shape[0]}, spec says "
                                 f"{spec.rank}")
            handles.append(A.register_forward_hook(hook))
        yield
    finally:
        for h in handles:
            h.remove()
