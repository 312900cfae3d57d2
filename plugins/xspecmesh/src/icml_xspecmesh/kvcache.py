"""KV-cache plumbing across transformers versions: the cache argument was renamed from
``past_key_values`` to ``cache`` (5.2x), and ``DynamicCache.crop`` went from "crop to this
length" to "remove this many tokens" (a negative count works in both)."""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=64)
def _cache_kwarg(forward: Any) -> str | None:
    try:
        params = inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    if "cache" in params:
        return "cache"
    if "past_key_values" in params:
        return "past_key_values"
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return "past_key_values"
    return None


def forward_with_cache(model: Any, input_ids: Any, cache: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``model(input_ids, <cache kwarg>=cache, use_cache=True, output_hidden_states=True)``;
    returns the output and the cache it holds. Raises ``TypeError`` for a model without one."""
    name = _cache_kwarg(type(model).forward)
    if name is None:
        raise TypeError(f"{type(model).__name__}.forward takes no KV cache: speculative decoding "
                        "verifies drafts against a KV cache, so the backbone must be a "
                        "transformers causal LM with use_cache support")
    extra = {} if cache is None else {name: cache}
    out = model(input_ids=input_ids, use_cache=True, output_hidden_states=True, **extra, **kwargs)
    new = getattr(out, "cache", None)
    if new is None:
        new = getattr(out, "past_key_values", None)
    if new is None:
        raise TypeError(f"{type(model).__name__} returned no KV cache: speculative decoding "
                        "verifies drafts against a KV cache, so the backbone must be a "
                        "transformers causal LM with use_cache support (and use_cache not "
                        "disabled)")
    if getattr(out, "hidden_states", None) is None:
        raise TypeError(f"{type(model).__name__} returned no hidden_states: the draft heads "
                        "read the last hidden state (output_hidden_states=True)")
    if not hasattr(new, "crop") or not hasattr(new, "get_seq_length"):
        raise TypeError(f"the backbone's cache ({type(new).__name__}) cannot be cropped: use a "
                        "transformers DynamicCache (the default cache of causal LMs)")
    return out, new


def crop_cache(cache: Any, length: int) -> None:
    """Keep the first ``length`` positions of ``cache``."""
    remove = cache.get_seq_length() - length
    if remove < 0:
        raise ValueError(f"cannot crop a cache of {cache.get_seq_length()} positions to {length}")
    if remove:
        cache.crop(-remove)
