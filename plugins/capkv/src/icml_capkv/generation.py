"""``generate`` and teacher-forced scoring on a compressed cache.

The context is prefilled (and compressed) once; the continuation (a question, then generated
tokens) runs on the compressed cache with the positions it would have had without eviction.
"""

from __future__ import annotations

from typing import Any

import torch

from icml_capkv.cache import CapKVCache
from icml_capkv.presses import KVPress

__all__ = ["continuation_logits", "generate_with_press", "prefill"]


def _check_ids(name: str, ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               model: Any = None) -> None:
    if not isinstance(ids, torch.Tensor) or ids.ndim != 2 or ids.shape[1] == 0:
        raise ValueError(f"{name} must be a (batch, length) LongTensor with length >= 1")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    vocab = _vocab_size(model)
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or (vocab is not None and hi >= vocab):
        bad = lo if lo < 0 else hi
        raise ValueError(f"{name} holds token id {bad}, outside the model's vocabulary "
                         f"0..{(vocab or 0) - 1 if vocab else 'V-1'}: tokenize with the model's "
                         "own tokenizer")
    if attention_mask is not None and not bool(attention_mask.bool().all()):
        raise ValueError("padded batches are not supported: eviction scores and positions are "
                         "per sequence; pass equal-length sequences (or one at a time)")


def _vocab_size(model: Any) -> int | None:
    """Rows of the input embedding (the ids the model accepts), if the model exposes them."""
    get = getattr(model, "get_input_embeddings", None)
    emb = get() if callable(get) else None
    weight = getattr(emb, "weight", None)
    if weight is not None and getattr(weight, "ndim", 0) == 2:
        return int(weight.shape[0])
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    return int(size) if isinstance(size, int) else None


@torch.no_grad()
def prefill(model: Any, context_ids: torch.Tensor, press: KVPress | None = None,
            attention_mask: torch.Tensor | None = None) -> CapKVCache:
    """Run the context through ``model`` into a fresh :class:`CapKVCache`, compressed by
    ``press`` (None = full cache)."""
    _check_ids("context_ids", context_ids, attention_mask, model)
    cache = CapKVCache()
    kw: dict = {"input_ids": context_ids, "cache": cache, "use_cache": True}
    if _takes_logits_to_keep(model):
        kw["logits_to_keep"] = 1  # only the cache is kept: no (T, vocab) logits in memory
    if press is None:
        model(**kw)
    else:
        with press(model):
            model(**kw)
    return cache


def _takes_logits_to_keep(model: Any) -> bool:
    import inspect

    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


@torch.no_grad()
def continuation_logits(model: Any, cache: CapKVCache, continuation_ids: torch.Tensor,
                        press: KVPress | None = None) -> torch.Tensor:
    """Logits ``(B, n, V)`` of the continuation tokens, teacher-forced on the (compressed) cache.
    Positions continue from the cache's logical length."""
    _check_ids("continuation_ids", continuation_ids, model=model)
    if press is None:
        return model(input_ids=continuation_ids, cache=cache, use_cache=True).logits
    with press(model):
        return model(input_ids=continuation_ids, cache=cache, use_cache=True).logits


@torch.no_grad()
def generate_with_press(model: Any, input_ids: torch.Tensor, press: KVPress | None,
                        max_new_tokens: int = 16, question_ids: torch.Tensor | None = None,
                        attention_mask: torch.Tensor | None = None,
                        **generate_kwargs: Any) -> torch.Tensor:
    """Compress the context ``input_ids`` with ``press``, then ``model.generate`` the answer to
    ``question_ids`` (optional) on the compressed cache. Returns the generated tokens only,
    ``(B, n_new)``. Works with greedy and sampling ``generate`` options."""
    _check_ids("input_ids", input_ids, attention_mask, model)
    if question_ids is not None:
        _check_ids("question_ids", question_ids, model=model)
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    # Prefill all but the last context token, so generate always has >= 1 new token to run.
    ctx, tail = input_ids[:, :-1], input_ids[:, -1:]
    if ctx.shape[1] == 0:
        raise ValueError("the context needs at least 2 tokens")
    cache = prefill(model, ctx, press)
    full = torch.cat([input_ids] + ([question_ids] if question_ids is not None else []), 1)
    del tail
    kwargs = dict(max_new_tokens=max_new_tokens, cache=cache, use_cache=True,
                  attention_mask=torch.ones_like(full))
    kwargs.setdefault("do_sample", False)
    kwargs.update(generate_kwargs)
    if press is not None and press.layer_ratios is not None:
        with press(model):
            out = model.generate(full, **kwargs)
    else:
        out = model.generate(full, **kwargs)
    return out[:, full.shape[1]:]
