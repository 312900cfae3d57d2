"""Per-layer sentence representations, as in the paper: run each sentence alone (batched here,
with right padding so no real token sees a pad), clip each sentence's hidden states at a layer
to that sentence's [5%, 95%] quantiles over tokens x dimensions (tames massive activations),
and pool the last ``n`` tokens by mean (or concatenation).

Layer ``l`` is ``hidden_states[l]`` of a transformers model: 0 is the embedding output, 1..L the
blocks. Works with causal LMs and encoder models (anything returning ``hidden_states``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any


def num_layers(model: Any) -> int:
    """The number of blocks L (so valid layers are 0..L)."""
    cfg = model.config
    cfg = getattr(cfg, "get_text_config", lambda: cfg)()
    n = getattr(cfg, "num_hidden_layers", None)
    if not isinstance(n, int):
        raise ValueError(f"cannot read num_hidden_layers from {type(model).__name__}.config: "
                         "pass layers explicitly")
    return n


def default_layers(n_layers: int) -> list[int]:
    """About half of the blocks 1..L, evenly spaced, always with the first and the last (the
    paper's layer subset)."""
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    count = max(2, math.ceil(n_layers / 2)) if n_layers > 1 else 1
    return sorted({round(1 + i * (n_layers - 1) / max(count - 1, 1)) for i in range(count)})


def resolve_layers(layers: Sequence[int] | None, n_layers: int) -> list[int]:
    """Validate ``layers`` against 0..L (negative values count from the end, -1 = L); ``None`` or
    empty gives :func:`default_layers`."""
    if not layers:
        return default_layers(n_layers)
    out = []
    for layer in layers:
        real = layer + n_layers + 1 if layer < 0 else layer
        if not 0 <= real <= n_layers:
            raise ValueError(f"layer {layer} is out of range: this model has hidden states "
                             f"0..{n_layers} (0 = embeddings, -1 = last)")
        out.append(real)
    return sorted(set(out))


def quantile_bounds(hidden: Any, mask: Any, q: tuple[float, float]) -> tuple[Any, Any]:
    """``(low, high)``, each ``[B]``: the ``q`` quantiles of ``hidden[b]`` ([B, T, D]) over its
    valid tokens x dims (``mask`` [B, T] is 1 on real tokens), with ``torch.quantile``'s linear
    interpolation. Padding never enters a quantile. Uses partial selection (``topk``) instead of
    a full sort."""
    import torch

    lo_q, hi_q = q
    if not 0.0 <= lo_q < hi_q <= 1.0:
        raise ValueError(f"clip quantiles must satisfy 0 <= low < high <= 1, got {q}")
    b, t, d = hidden.shape
    flat = hidden.float().reshape(b, t * d)
    valid = mask.bool()[:, :, None].expand(b, t, d).reshape(b, t * d)
    n = valid.sum(1)
    bounds = []
    for qq in (lo_q, hi_q):
        pos = qq * (n - 1).double()
        lo, hi = pos.floor().long(), pos.ceil().long()
        frac = (pos - lo).to(flat.dtype)
        if qq <= 0.5:  # the smallest values: ranks lo, hi from the bottom
            ranks = (lo, hi)
            fill, largest = float("inf"), False
        else:  # the largest values: ranks from the top
            ranks = (n - 1 - lo, n - 1 - hi)
            fill, largest = float("-inf"), True
        k = int(torch.maximum(ranks[0], ranks[1]).max()) + 1
        vals = flat.masked_fill(~valid, fill).topk(k, dim=1, largest=largest).values
        v_lo = vals.gather(1, ranks[0][:, None])[:, 0]
        v_hi = vals.gather(1, ranks[1][:, None])[:, 0]
        bounds.append(v_lo + frac * (v_hi - v_lo))
    return bounds[0], bounds[1]


def clip_quantiles(hidden: Any, mask: Any, q: tuple[float, float]) -> Any:
    """Clip ``hidden[b]`` (shape [B, T, D]) to the ``q`` quantiles of its valid tokens x dims
    (see :func:`quantile_bounds`); float32 out."""
    import torch

    lo, hi = quantile_bounds(hidden, mask, q)
    return torch.maximum(torch.minimum(hidden.float(), hi[:, None, None]), lo[:, None, None])


def is_causal(model: Any) -> bool:
    """Whether every attention module of ``model`` declares ``is_causal=True`` (transformers
    attention modules carry that flag). Then right padding needs no attention mask: a real token
    only attends to earlier, real tokens. Unknown (no flag) counts as not causal."""
    flags = [m.is_causal for m in model.modules() if isinstance(getattr(m, "is_causal", None),
                                                                 bool)]
    return bool(flags) and all(flags)


def tokenize(tokenizer: Any, sentences: Sequence[str], add_special_tokens: bool = False
             ) -> list[list[int]]:
    """Token ids of each sentence (no padding)."""
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of strings, not one string")
    if len(sentences) == 0:
        return []
    enc = tokenizer(list(sentences), add_special_tokens=add_special_tokens)
    return [list(ids) for ids in enc["input_ids"]]


def extract_sentence_reps(model: Any, tokenizer: Any, sentences: Sequence[str], *,
                          layers: Sequence[int] | None = None, last_n: int = 3,
                          pool: str = "mean", clip_q: tuple[float, float] | None = (0.05, 0.95),
                          batch_size: int = 32, add_special_tokens: bool = False,
                          device: Any = None,
                          progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None
                          ) -> Any:
    """Sentence representations ``[len(layers), N, D]`` (``[.., N, last_n * D]`` for
    ``pool="concat"``), float32 on CPU.

    Raises ``ValueError`` when a sentence has fewer than ``last_n`` tokens (filter such sentences
    or lower ``last_n``), when a layer is out of range, or when ``sentences`` is empty.
    """
    import torch

    if pool not in ("mean", "concat"):
        raise ValueError(f"pool must be 'mean' or 'concat', got {pool!r}")
    if last_n < 1:
        raise ValueError(f"last_n must be >= 1, got {last_n}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    ids = tokenize(tokenizer, sentences, add_special_tokens)
    if not ids:
        raise ValueError("no sentences given: pass at least one sentence")
    short = [i for i, x in enumerate(ids) if len(x) < last_n]
    if short:
        i = short[0]
        raise ValueError(
            f"sentence {i} ({sentences[i]!r}) has {len(ids[i])} tokens, fewer than last_n={last_n}"
            f" ({len(short)} such sentences): lower last_n or drop sentences shorter than last_n "
            "tokens (the paper keeps sentences with >= 3 tokens)")
    layer_ids = resolve_layers(layers, num_layers(model))
    if device is None:
        device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    base = getattr(model, "base_model", model)
    # a causal model with right padding needs no mask (and runs the faster is_causal attention)
    causal = is_causal(base)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    out: torch.Tensor | None = None
    for batch in (progress(batches) if progress else batches):
        lengths = torch.tensor([len(ids[i]) for i in batch])
        t = int(lengths.max())
        input_ids = torch.full((len(batch), t), pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), t), dtype=torch.long)
        for row, i in enumerate(batch):
            input_ids[row, :len(ids[i])] = torch.tensor(ids[i])
            mask[row, :len(ids[i])] = 1
        mask = mask.to(device)
        padded = bool((lengths < t).any())
        with torch.inference_mode():
            res = base(input_ids=input_ids.to(device),
                       attention_mask=mask if padded and not causal else None,
                       output_hidden_states=True)
        hs = res.hidden_states
        pos = (lengths[:, None] - last_n + torch.arange(last_n)[None, :]).to(device)  # [B, n]
        for li, layer in enumerate(layer_ids):
            h = hs[layer]
            last = torch.gather(h, 1, pos[:, :, None].expand(-1, -1, h.shape[-1])).float()
            if clip_q is not None:  # bounds from all real tokens, applied to the pooled ones
                lo, hi = quantile_bounds(h, mask, clip_q)
                last = torch.maximum(torch.minimum(last, hi[:, None, None]), lo[:, None, None])
            rep = last.mean(1) if pool == "mean" else last.reshape(len(batch), -1)
            if out is None:
                out = torch.empty((len(layer_ids), len(ids), rep.shape[-1]))
            out[li, torch.tensor(batch)] = rep.float().cpu()
    assert out is not None
    return out


def load_model(name_or_path: str, *, device: Any = "cpu", dtype: Any = None
               ) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a local folder (or a hub name when online): a causal LM when
    the checkpoint has one, else the bare encoder (``AutoModel``, e.g. BERT). Raises
    ``ValueError`` naming the fix when nothing loads."""
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(name_or_path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"could not load a tokenizer from {name_or_path!r}: {exc}. Pass a folder "
                         "written by save_pretrained() (model and tokenizer)") from None
    model = None
    errors = []
    for cls in (AutoModelForCausalLM, AutoModel):
        try:
            model = cls.from_pretrained(name_or_path, dtype=dtype)
            break
        except (OSError, ValueError, KeyError) as exc:
            errors.append(str(exc).splitlines()[0])
    if model is None:
        raise ValueError(f"could not load a transformers model from {name_or_path!r}: "
                         f"{'; '.join(errors)}. Pass a folder written by save_pretrained()")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token or tok.unk_token
    return model.to(device).eval(), tok
