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

from icml_synsem.config import ExtractionOptions


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


def tokenize(tokenizer: Any, sentences: Sequence[str], add_special_tokens: bool
             ) -> list[list[int]]:
    """Token ids of each sentence (no padding)."""
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of strings, not one string")
    if len(sentences) == 0:
        return []
    enc = tokenizer(list(sentences), add_special_tokens=add_special_tokens)
    return [list(ids) for ids in enc["input_ids"]]


def length_batches(lengths: Sequence[int], batch_size: int, batch_tokens: int
                   ) -> list[list[int]]:
    """Length bucketing: the indices of ``lengths`` sorted by length (stable), cut into batches of
    at most ``batch_size`` sentences and at most ``batch_tokens`` padded tokens (rows x longest
    row; 0 = no token limit; a sentence longer than the limit gets a batch of its own). With a
    token limit, a batch that already holds ``batch_tokens // 4`` padded tokens also ends where
    the length grows, so that sentences of different lengths share a batch only when their groups
    are small (matmuls of a few hundred rows are already about as fast per row as larger ones).
    Sorting keeps padding small; the caller writes each result back to its original index."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if batch_tokens < 0:
        raise ValueError(f"batch_tokens must be >= 0 (0 = no limit), got {batch_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:  # ascending: the new sentence is the longest of the batch
        if cur:
            longest = lengths[cur[-1]]
            if (len(cur) >= batch_size
                    or (batch_tokens and (len(cur) + 1) * lengths[i] > batch_tokens)
                    or (batch_tokens and lengths[i] > longest
                        and len(cur) * longest >= batch_tokens // 4)):
                batches.append(cur)
                cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def decoder_blocks(model: Any, n_layers: int) -> Any:
    """The ``nn.ModuleList`` of the ``n_layers`` transformer blocks of ``model`` (``model.layers``
    in Llama/Qwen2, ``encoder.layer`` in BERT, ``h`` in GPT-2), or ``None`` when there is not
    exactly one module list of that length."""
    import torch

    lists = [m for m in model.modules()
             if isinstance(m, torch.nn.ModuleList) and len(m) == n_layers]
    return lists[0] if len(lists) == 1 else None


class _StopForward(Exception):
    """Raised by a hook to end a forward pass once the deepest requested layer is captured."""


class _TruncatedForward:
    """Hidden states ``0..d`` of a model whose blocks are ``blocks``, from forward pre-hooks:
    ``hidden_states[l]`` (l < L) is the input of block ``l``, so the forward stops before block
    ``d`` runs and blocks ``d..L-1`` (and the head) are never computed."""

    def __init__(self, blocks: Any, layers: Sequence[int]) -> None:
        self.blocks, self.layers, self.stop = blocks, list(layers), max(layers)
        self.captured: dict[int, Any] = {}
        self.handles: list[Any] = []
        self.active = False  # hooks only act inside __call__

    def _hook(self, layer: int) -> Callable[..., None]:
        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            if not self.active:
                return
            h = args[0] if args else kwargs.get("hidden_states")
            self.captured[layer] = h[0] if isinstance(h, tuple) else h
            if layer == self.stop:
                raise _StopForward
        return hook

    def __enter__(self) -> _TruncatedForward:
        for layer in self.layers:
            self.handles.append(self.blocks[layer].register_forward_pre_hook(
                self._hook(layer), with_kwargs=True))
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self.handles:
            h.remove()

    def __call__(self, forward: Callable[..., Any], *args: Any) -> dict[int, Any]:
        self.captured, self.active = {}, True
        try:
            forward(*args)
        except _StopForward:
            pass
        finally:
            self.active = False
        if set(self.captured) != set(self.layers):
            raise RuntimeError("the truncated forward did not reach every requested block")
        return self.captured


READER = "synsem: representation extraction"


def forward_dtype(model: Any, dtype: str) -> Any:
    """The ``torch.dtype`` an extraction with ``ExtractionOptions.dtype == dtype`` runs
    ``model`` in: the dtype of its floating parameters for ``"model"``, else the named one."""
    import torch

    if dtype == "model":
        return next((p.dtype for p in model.parameters() if p.is_floating_point()),
                    torch.float32)
    return getattr(torch, dtype)


class cast_parameters:  # noqa: N801 (a context manager used like a function)
    """Run ``model`` with its floating-point parameters in ``dtype`` inside the ``with`` block
    and restore the original tensors (bit for bit) on exit; ``dtype=None`` or the parameters'
    own dtype changes nothing. Buffers (e.g. the rotary ``inv_freq``) keep their dtype, so
    positions are computed as in the original model. Peak memory: the model in both dtypes;
    load the model in ``dtype`` to avoid the copy."""

    def __init__(self, model: Any, dtype: Any) -> None:
        self.model, self.dtype = model, dtype
        self.saved: list[tuple[Any, Any]] = []

    def __enter__(self) -> Any:
        if self.dtype is not None:
            for p in self.model.parameters():
                if p.is_floating_point() and p.dtype != self.dtype:
                    self.saved.append((p, p.data))
                    p.data = p.data.to(self.dtype)
        return self.model

    def __exit__(self, *exc: Any) -> None:
        for p, data in self.saved:
            p.data = data
        self.saved = []


def check_basis(model: Any, layer_ids: Sequence[int], n_layers: int) -> bool:
    """Whether ``model``'s residual stream is in another basis (``icml.compose``: a producer's
    rotation or scaling), so that the states must be mapped with ``to_original``. Refuses, with
    one ``CompositionError`` line naming the pair, a transform without maps, and layer ``L``
    (``hidden_states[L]`` is the final norm's output, whose original scale a re-based model no
    longer holds; layers ``0..L-1`` are mapped)."""
    from icml.compose import CompositionError, require_original_basis, transforms

    changers = [t for t in transforms(model) if t.changes_residual_basis]
    if not changers:
        return False
    if any(not t.maps for t in changers):
        require_original_basis(model, READER)
    if n_layers in layer_ids:
        raise CompositionError(
            f"{READER} at layer {n_layers} (after the final norm) on {changers[0].label()}: "
            f"the re-based model's final-norm output has no map back; use layers 0..{n_layers - 1}")
    return True


def extract_sentence_reps(model: Any, tokenizer: Any, sentences: Sequence[str],
                          options: ExtractionOptions | None = None, *, device: Any = None,
                          progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None
                          ) -> Any:
    """Sentence representations ``[len(layers), N, D]`` (``[.., N, last_n * D]`` for
    ``pool="concat"``), float32 on CPU, in the order of ``sentences``.

    ``options`` (:class:`~icml_synsem.config.ExtractionOptions`, the job's ``extraction``
    section; default ``ExtractionOptions()``) holds every setting: layers, last_n, pooling,
    clipping, batching. Sentences are sorted by token length and cut into batches of at most
    ``batch_size`` sentences and ``batch_tokens`` padded tokens (see :func:`length_batches`);
    the base model runs without its LM head and KV cache, in inference mode, in ``dtype``
    (``"bfloat16"`` casts the floating parameters for the call, see :class:`cast_parameters`;
    quantile bounds, clipping and pooling are computed in float32 from the hidden states). With
    ``stop_early`` and a layer
    subset that does not need the last layer, the forward stops before the first block no
    requested layer needs (checked once per call against a full forward of the shortest
    sentence; if they differ, every batch runs the full forward).

    Raises ``ValueError`` when a sentence has fewer than ``last_n`` tokens (filter such sentences
    or lower ``last_n``), when a layer is out of range, or when ``sentences`` is empty.
    """
    import contextlib
    import inspect

    import torch

    opts = options or ExtractionOptions()  # pool, last_n, ... validated by ExtractionOptions
    last_n, pool, clip_q = opts.last_n, opts.pool, opts.clip_q
    ids = tokenize(tokenizer, sentences, opts.add_special_tokens)
    batches = length_batches([len(x) for x in ids], opts.batch_size, opts.batch_tokens)
    if not ids:
        raise ValueError("no sentences given: pass at least one sentence")
    short = [i for i, x in enumerate(ids) if len(x) < last_n]
    if short:
        i = short[0]
        raise ValueError(
            f"sentence {i} ({sentences[i]!r}) has {len(ids[i])} tokens, fewer than last_n={last_n}"
            f" ({len(short)} such sentences): lower last_n or drop sentences shorter than last_n "
            "tokens (the paper keeps sentences with >= 3 tokens)")
    n_layers = num_layers(model)
    layer_ids = resolve_layers(opts.layers or None, n_layers)
    rebased = check_basis(model, layer_ids, n_layers)
    if device is None:
        device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    # the bare decoder/encoder: no LM head (its logits are never used)
    base = getattr(model, "base_model", model)
    # a causal model with right padding needs no mask (and runs the faster is_causal attention)
    causal = is_causal(base)
    params = inspect.signature(base.forward).parameters
    extra = {"use_cache": False} if "use_cache" in params else {}
    blocks = (decoder_blocks(base, n_layers) if opts.stop_early and max(layer_ids) < n_layers
              else None)
    truncated = _TruncatedForward(blocks, layer_ids) if blocks is not None else None
    def forward(input_ids, mask, padded):
        return base(input_ids=input_ids.to(device),
                    attention_mask=mask if padded and not causal else None,
                    output_hidden_states=True, **extra)

    target = forward_dtype(model, opts.dtype)
    out = None
    with torch.inference_mode(), cast_parameters(model, target), \
            (truncated or contextlib.nullcontext()):
        if truncated is not None:
            # check the truncated forward against the model's own hidden states once, on one
            # sentence (the shortest), so that the check costs about one sentence's forward
            one = torch.tensor([ids[batches[0][0]]])
            ones = torch.ones_like(one).to(device)
            full = forward(one, ones, False).hidden_states
            try:
                hs = truncated(forward, one, ones, False)
                same = all(torch.allclose(hs[li], full[li], rtol=1e-4, atol=1e-5)
                           for li in layer_ids)
            except RuntimeError:
                same = False
            if not same:
                truncated = None  # its hooks stay inactive and are removed on exit
            del full, hs
        for batch in progress(batches) if progress else batches:
            lengths = torch.tensor([len(ids[i]) for i in batch])
            t = int(lengths.max())
            input_ids = torch.full((len(batch), t), pad_id, dtype=torch.long)
            for row, i in enumerate(batch):
                input_ids[row, :len(ids[i])] = torch.tensor(ids[i])
            mask = (torch.arange(t)[None, :] < lengths[:, None]).long().to(device)
            padded = bool((lengths < t).any())
            if truncated is not None:
                hs = truncated(forward, input_ids, mask, padded)
            else:
                hs = forward(input_ids, mask, padded).hidden_states
            if rebased:  # a producer's re-based residual stream, mapped to the original basis
                from icml.compose import to_original

                h = torch.stack([to_original(model, hs[layer].float(), layer, reader=READER)
                                 for layer in layer_ids])
            else:
                h = torch.stack([hs[layer] for layer in layer_ids])  # [nL, B, T, D]
            nl, b, _, d = h.shape
            pos = (lengths[:, None] - last_n + torch.arange(last_n)[None, :]).to(device)  # [B, n]
            last = torch.gather(h, 2, pos[None, :, :, None].expand(nl, -1, -1, d)).float()
            if clip_q is not None:  # bounds from all real tokens, applied to the pooled ones
                lo, hi = quantile_bounds(h.reshape(nl * b, t, d), mask.repeat(nl, 1), clip_q)
                last = torch.maximum(torch.minimum(last, hi.view(nl, b, 1, 1)),
                                     lo.view(nl, b, 1, 1))
            rep = last.mean(2) if pool == "mean" else last.reshape(nl, b, -1)
            if out is None:
                out = torch.empty((nl, len(ids), rep.shape[-1]))
            out[:, torch.tensor(batch)] = rep.cpu()  # back to the original order
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
