"""``generate``-compatible decoding: LED, DoLa and plain sampling behind one interface.

Each class is a callable for ``model.generate(..., custom_generate=<instance>)``: transformers
prepares the inputs, the attention mask, the KV cache, the logits processors and the stopping
criteria, then calls the instance, which runs the token loop with hidden states switched on::

    out = model.generate(ids, do_sample=True, temperature=0.6, max_new_tokens=64,
                         custom_generate=LEDDecoding(LEDConfig(depth=4)))

``do_sample=False`` selects greedy mode. LED replaces the sampling warpers (temperature is kept,
top-k / top-p / min-p are bypassed, as in the official code); other logits processors (repetition
penalty, min length, bad words, ...) act on the final layer. DoLa and plain sampling apply the
full processor list. Sampling uses the instance's ``torch.Generator`` when given.
"""

from __future__ import annotations

import inspect
from typing import Any

from icml_led.config import LEDConfig
from icml_led.led import sample_sorted

_WARPERS = ("TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper",
            "MinPLogitsWarper", "TypicalLogitsWarper", "EpsilonLogitsWarper",
            "EtaLogitsWarper", "TopHLogitsWarper")


def think_state(input_ids: Any, start_id: int | None, end_id: int | None) -> Any:
    """Bool ``(B,)``: whether each sequence is inside the thinking span after ``input_ids``.

    Inside when the last start id comes after the last end id; with ``start_id=None`` the span
    is open from the beginning until ``end_id`` appears.
    """
    import torch

    B, T = input_ids.shape
    pos = torch.arange(T, device=input_ids.device).expand(B, T)

    def last(tok: int | None, absent: int) -> Any:
        if tok is None:
            return torch.full((B,), absent, device=input_ids.device)
        hit = torch.where(input_ids == tok, pos, torch.full_like(pos, -10))
        v = hit.max(-1).values
        return torch.where(v < 0, torch.full_like(v, absent), v)

    last_start = last(start_id, -1) if start_id is None else last(start_id, -3)
    last_end = last(end_id, -2)
    return last_start > last_end


def apply_processors(logits_processor: Any, input_ids: Any, scores: Any) -> Any:
    """``logits_processor(input_ids, scores)``, with transformers' ``TopPLogitsWarper`` replaced
    by :func:`top_p_small_support` where that gives the same tensor (tested against the
    warper): after top-k only a few scores are finite, and the warper's sort of the whole
    vocabulary is most of a sampling step's decoder cost."""
    import inspect

    for proc in logits_processor:
        if type(proc).__name__ == "TopPLogitsWarper" and type(proc).__module__.startswith(
                "transformers."):
            fast = top_p_small_support(scores, proc.top_p, proc.filter_value,
                                       proc.min_tokens_to_keep,
                                       fallback=lambda rows, p=proc: p(input_ids, rows))
            scores = proc(input_ids, scores) if fast is None else fast
        elif len(inspect.signature(proc.__call__).parameters) > 2:
            scores = type(logits_processor)([proc])(input_ids, scores)   # let it raise/handle
        else:
            scores = proc(input_ids, scores)
    return scores


def top_p_small_support(scores: Any, top_p: float, filter_value: float = -float("inf"),
                        min_tokens_to_keep: int = 1, max_fraction: float = 0.125,
                        fallback: Any = None) -> Any:
    """transformers' top-p filter computed from the finite scores only; None when that could
    differ from the warper (then call it).

    The warper sorts the whole row ascending, takes ``softmax(sorted).cumsum()`` and removes
    the positions whose cumulative probability is ``<= 1 - top_p`` (keeping the last
    ``min_tokens_to_keep``). When a row holds few finite scores, its sorted form is ``-inf``
    everywhere except the finite scores in ascending order at the end: this function builds
    that row without sorting the vocabulary and applies the same softmax and cumulative sum to
    it, so the numbers are the same. Equal scores (common after a bfloat16 forward) are fine
    unless the cut falls inside a group of them: then the warper's unstable sort decides which
    of the tied tokens survive: such rows go through ``fallback(rows)`` (the warper on those
    rows only; each row's result depends on that row alone), or without ``fallback`` the
    function declines (None). It also declines on NaN or
    ``+inf``, when
    more than ``max_fraction`` of the vocabulary is finite, when ``min_tokens_to_keep`` exceeds
    a row's finite count, for a finite ``filter_value``, and off CPU (the equality with the
    warper rests on CPU's sequential cumulative sum; tested on CPU only).
    """
    import torch

    if scores.dim() != 2 or filter_value != -float("inf") or scores.device.type != "cpu":
        return None                        # (accelerators sort fast; their scans differ by size)
    B, V = scores.shape
    fin = torch.isfinite(scores)
    count = fin.sum(-1)
    n = int(count.max()) if B else 0
    if (B == 0 or int(count.min()) < max(1, int(min_tokens_to_keep)) or n > max_fraction * V
            or not bool(torch.isfinite(scores.amax()))):              # NaN or +inf somewhere
        return None
    key = torch.where(fin, torch.arange(V, device=scores.device), V)
    cols = key.topk(n, dim=-1, largest=False, sorted=True).values   # finite columns, ascending
    valid = cols < V
    cols = cols.clamp_max(V - 1)
    ninf = torch.full((), -float("inf"), dtype=scores.dtype, device=scores.device)
    vals = torch.where(valid, scores.gather(1, cols), ninf)
    sv, order = torch.sort(vals, dim=-1, stable=True)               # -inf padding first
    row = scores.new_full((B, V), -float("inf"))
    row[:, V - n:] = sv
    cum = row.softmax(dim=-1)[:, V - n:].cumsum(dim=-1)   # the prefix of the row sums to 0
    drop = cum <= (1 - top_p)
    drop[..., -int(min_tokens_to_keep):] = False
    # Equal scores have equal probabilities, so the sorted values, their cumulative sums and
    # the removal mask by sorted position are the same whatever order the warper's unstable
    # sort gives tied scores; only which tied column sits where can differ. That matters only
    # when the cut falls inside a group of equal scores (some removed, some kept): decline.
    tied = (sv[:, 1:] == sv[:, :-1]) & torch.isfinite(sv[:, 1:])
    split = (tied & (drop[:, 1:] != drop[:, :-1])).any(1)
    if bool(split.any()) and fallback is None:
        return None
    where = torch.where(valid, cols, V).gather(1, order)             # padding -> spare column V
    remove = torch.cat([~fin, fin.new_zeros(B, 1)], dim=1)
    remove.scatter_(1, where, drop & torch.isfinite(sv))
    out = scores.masked_fill(remove[:, :V], filter_value)
    if bool(split.any()):          # those rows from the warper itself (rows are independent)
        bad = split.nonzero().squeeze(1)
        out[bad] = fallback(scores[bad])
    return out


class _Decoding:
    """The shared token loop; subclasses implement :meth:`choose`."""

    needs_hidden_states = True

    def __init__(self, generator: Any = None) -> None:
        self.generator = generator
        self.stats: dict[str, Any] = {}
        self._active: Any = None

    # -- subclass interface ------------------------------------------------------------------
    def setup(self, model: Any, input_ids: Any, generation_config: Any) -> None:
        """Called once before the loop."""

    def choose(self, model: Any, input_ids: Any, outputs: Any, logits_processor: Any,
               generation_config: Any) -> tuple[Any, Any]:
        """Return ``(next_tokens (B,), scores (B, V))`` for one step."""
        raise TypeError("use LEDDecoding, DoLaDecoding or SamplingDecoding")

    def advance(self, next_tokens: Any) -> None:
        """Called after each step with the appended tokens."""

    def finish(self) -> None:
        """Called once after the loop (release per-call buffers)."""

    # -- the loop ----------------------------------------------------------------------------
    def __call__(self, model: Any, input_ids: Any, logits_processor: Any = None,
                 stopping_criteria: Any = None, generation_config: Any = None,
                 synced_gpus: bool = False, streamer: Any = None, **model_kwargs: Any) -> Any:
        import torch
        from transformers.generation import LogitsProcessorList, StoppingCriteriaList

        if generation_config is None:
            raise ValueError("call this through model.generate(..., custom_generate=<instance>) "
                             "so transformers prepares the generation config")
        if getattr(model.config, "is_encoder_decoder", False):
            raise ValueError("LED/DoLa decoding supports decoder-only models (Llama, Qwen2, ...)")
        if getattr(generation_config, "prefill_chunk_size", None) is not None:
            raise ValueError("prefill_chunk_size is not supported by LED/DoLa decoding: leave it "
                             "unset")
        takes_next_len = check_generate_api(model)
        logits_processor = logits_processor or LogitsProcessorList()
        stopping_criteria = stopping_criteria or StoppingCriteriaList()
        has_eos = any(hasattr(c, "eos_token_id") for c in stopping_criteria)
        pad = generation_config.pad_token_id
        if isinstance(pad, (list, tuple)):
            pad = pad[0] if pad else None
        if has_eos and pad is None:
            raise ValueError("generation has an eos token but no pad token: set pad_token_id")
        B = input_ids.shape[0]
        unfinished = torch.ones(B, dtype=torch.long, device=input_ids.device)
        model_kwargs["output_hidden_states"] = self.needs_hidden_states
        use_cache = model_kwargs.get("use_cache", True)
        return_dict = generation_config.return_dict_in_generate
        keep_scores = return_dict and generation_config.output_scores
        keep_logits = return_dict and generation_config.output_logits
        scores: tuple = ()
        raw: tuple = ()
        self.stats = {"steps": 0, "explored": 0, "think_tokens": 0, "tokens": 0,
                      "deep_rows": 0}
        self.setup(model, input_ids, generation_config)
        # a cache handed in by the caller may already hold a prefix of input_ids
        cache = model_kwargs.get("cache")
        past = int(cache.get_seq_length()) if cache is not None and hasattr(
            cache, "get_seq_length") else 0
        step_len = input_ids.shape[1] - past if past else None
        first = True
        while True:
            if not use_cache:
                step_len = None
            if takes_next_len:
                inputs = model.prepare_inputs_for_generation(
                    input_ids, next_sequence_length=step_len, is_first_iteration=first,
                    **model_kwargs)
            else:  # pragma: no cover - older signature: slice ourselves
                ids = input_ids if step_len is None else input_ids[:, -step_len:]
                inputs = model.prepare_inputs_for_generation(ids, **model_kwargs)
            outputs = model(**inputs, return_dict=True)
            first = False
            step_len = 1
            model_kwargs = advance_model_kwargs(outputs, model_kwargs)
            self._active = unfinished.bool()
            next_tokens, step_scores = self.choose(model, input_ids, outputs, logits_processor,
                                                   generation_config)
            if keep_scores:
                scores += (step_scores,)
            if keep_logits:
                raw += (outputs.logits[:, -1].float(),)
            if has_eos:
                next_tokens = next_tokens * unfinished + pad * (1 - unfinished)
            self.stats["steps"] += 1
            self.stats["tokens"] += int(unfinished.sum())
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            if streamer is not None:
                streamer.put(next_tokens.cpu())
            self.advance(next_tokens)
            unfinished = unfinished & ~stopping_criteria(input_ids, scores or None)
            del outputs
            if unfinished.max() == 0:
                break
        self.finish()
        if streamer is not None:
            streamer.end()
        if return_dict:
            from transformers.generation.utils import GenerateDecoderOnlyOutput

            return GenerateDecoderOnlyOutput(sequences=input_ids, scores=scores or None,
                                             logits=raw or None,
                                             cache=model_kwargs.get("cache"))
        return input_ids


#: the parameters of ``prepare_inputs_for_generation`` (a public, per-model hook) this loop uses
PREPARE_INPUTS_PARAMS = ("next_sequence_length", "cache", "attention_mask",
                         "is_first_iteration")


def check_generate_api(model: Any) -> bool:
    """Check the transformers API the token loop relies on; True when
    ``prepare_inputs_for_generation`` slices inputs itself (``next_sequence_length``).

    The loop uses only public pieces: ``prepare_inputs_for_generation`` (the hook each model
    overrides), the forward pass, and the model kwargs ``generate`` hands to a
    ``custom_generate`` callable (``cache``, ``attention_mask``, ``position_ids``). A missing
    ``cache`` parameter means transformers renamed the cache again: fail loudly.
    """
    params = inspect.signature(model.prepare_inputs_for_generation).parameters
    has_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if "cache" not in params and "past_key_values" in params:
        raise RuntimeError("this transformers version passes the KV cache as past_key_values, "
                           "not cache (transformers <= 5.23): LED's loop needs transformers >= "
                           "5.24 (tested on 5.24 and 5.25); upgrade transformers")
    if not has_kwargs and "cache" not in params:
        raise RuntimeError("prepare_inputs_for_generation takes no cache argument: this "
                           "transformers version is not supported by LED's loop (tested on "
                           "5.24 and 5.25)")
    return "next_sequence_length" in params


def advance_model_kwargs(outputs: Any, model_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The model kwargs for the next token: the cache the forward returned, the attention mask
    and explicit position ids (and token type ids) extended by one position. This is what
    transformers' private ``_update_model_kwargs_for_generation`` does for a decoder-only model;
    a test compares the two."""
    import torch

    kw = dict(model_kwargs)
    cache = outputs.get("cache", None) if hasattr(outputs, "get") else None
    if cache is None:
        cache = getattr(outputs, "cache", None)
    if cache is not None:
        kw["cache"] = cache
    if (tt := kw.get("token_type_ids")) is not None:
        kw["token_type_ids"] = torch.cat([tt, tt[:, -1:]], dim=-1)
    if (pos := kw.get("position_ids")) is not None:
        nxt = pos[..., -1:] + 1
        kw["position_ids"] = torch.cat([pos, nxt], dim=-1)
    if (am := kw.get("attention_mask")) is not None:
        kw["attention_mask"] = torch.cat([am, am.new_ones((am.shape[0], 1))], dim=-1)
    return kw


def _greedy(generation_config: Any) -> bool:
    return not bool(generation_config.do_sample)


class LEDDecoding(_Decoding):
    """Latent Exploration Decoding as a ``custom_generate`` callable.

    Temperature comes from ``generation_config.temperature`` (``do_sample=True``) and greedy mode
    from ``do_sample=False``. ``generator``: a ``torch.Generator``, a list of one per row (then
    each row's tokens do not depend on the batch it is decoded in), or None (global stream).

    ``lazy=True`` (default) reads the intermediate layers only for the rows that explore at this
    step: the gate and the base path need only the final layer, so the ``d - 1`` extra
    ``lm_head`` projections are paid for a fraction ``1 - p_top1`` of the tokens. The emitted
    tokens are identical to ``lazy=False`` (the same random numbers are drawn in the same order;
    tested), which computes every layer for every row and keeps the full
    :class:`~icml_led.led.LEDStepInfo` of the last step in ``self.last_info``. After a call,
    ``self.stats`` holds the number of emitted tokens, of tokens inside the thinking span, of
    explored tokens and of rows whose intermediate layers were read (``deep_rows``).
    """

    def __init__(self, config: LEDConfig, generator: Any = None, lazy: bool = True) -> None:
        super().__init__(generator)
        self.config = config
        self.lazy = bool(lazy)
        self._inside = None
        self._indices: list[int] = []
        self.last_info: Any = None

    def setup(self, model: Any, input_ids: Any, generation_config: Any) -> None:
        from icml_led.layers import check_readout, layer_indices, lm_head_of, num_layers_of

        cfg = self.config
        self._indices = layer_indices(num_layers_of(model), cfg.depth, cfg.skip_penultimate,
                                      cfg.layers)
        if len(self._indices) > 1:
            check_readout(model, cfg.use_final_norm)
        vocab = lm_head_of(model).out_features
        if cfg.top_k > vocab:
            raise ValueError(f"top_k={cfg.top_k} is larger than the vocabulary ({vocab} tokens): "
                             f"use top_k <= {vocab}")
        for name, tok in (("think_start_id", cfg.think_start_id),
                          ("think_end_id", cfg.think_end_id)):
            if tok is not None and not 0 <= tok < vocab:
                raise ValueError(f"{name}={tok} is not a token id of this model (vocabulary "
                                 f"{vocab}): pass the id of the think delimiter")
        if isinstance(self.generator, (list, tuple)) and len(self.generator) != input_ids.shape[0]:
            raise ValueError(f"got {len(self.generator)} generators for a batch of "
                             f"{input_ids.shape[0]} rows: pass one per row or a single one")
        if cfg.think_only:
            self._inside = think_state(input_ids, cfg.think_start_id, cfg.think_end_id)
        else:
            self._inside = None

    def choose(self, model: Any, input_ids: Any, outputs: Any, logits_processor: Any,
               generation_config: Any) -> tuple[Any, Any]:
        import torch

        from icml_led.layers import intermediate_logits
        from icml_led.led import draw_uniforms, gate, led_core

        cfg = self.config
        hs = getattr(outputs, "hidden_states", None)
        if hs is None and len(self._indices) > 1:
            raise ValueError("the model's outputs carry no hidden_states: LED needs a model "
                             "whose forward accepts output_hidden_states=True")
        procs = [p for p in logits_processor if type(p).__name__ not in _WARPERS]
        final = outputs.logits[:, -1].float()
        for p in procs:
            final = p(input_ids, final)
        greedy = _greedy(generation_config)
        temp = generation_config.temperature if generation_config.temperature else 1.0
        B, d = final.shape[0], len(self._indices)
        dev = final.device
        u, g = draw_uniforms(B, cfg, d, greedy, self.generator, dev)
        T = 1.0 if greedy else float(temp)
        if not greedy and not T > 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {temp!r}")
        p_top1 = torch.softmax(final / T, dim=-1).max(-1).values
        prob, explore = gate(p_top1, cfg, d, greedy, g, self._inside)
        one = LEDConfig(depth=1, top_k=cfg.top_k, eps=cfg.eps)
        if self.lazy:
            info = led_core(final[:, None], one, T, u, torch.zeros_like(explore), prob, greedy)
            tokens = info.tokens
            rows = explore.nonzero().squeeze(1)
            if rows.numel():
                inter = intermediate_logits(model, hs, self._indices[1:], cfg.use_final_norm,
                                            rows=rows).to(dev)
                lw = torch.cat([final[rows][:, None], inter], dim=1)
                sub = led_core(lw, cfg, T, None if u is None else u[rows],
                               explore[rows], prob[rows], greedy)
                tokens = tokens.clone()
                tokens[rows] = sub.tokens
            self.stats["deep_rows"] += int(rows.numel())
            self.last_info = None
        else:
            inter = intermediate_logits(model, hs, self._indices[1:], cfg.use_final_norm).to(dev)
            lw = torch.cat([final[:, None], inter], dim=1)
            info = led_core(lw, cfg, T, u, explore, prob, greedy)
            tokens = info.tokens
            self.stats["deep_rows"] += B
            self.last_info = info
        active = self._active
        if self._inside is not None:
            self.stats["think_tokens"] += int((self._inside & active).sum())
        else:
            self.stats["think_tokens"] += int(active.sum())
        self.stats["explored"] += int((explore & active).sum())
        return tokens, final

    def advance(self, next_tokens: Any) -> None:
        if self._inside is None:
            return
        cfg = self.config
        if cfg.think_start_id is not None:
            self._inside = self._inside | (next_tokens == cfg.think_start_id)
        if cfg.think_end_id is not None:
            self._inside = self._inside & (next_tokens != cfg.think_end_id)


class DoLaDecoding(_Decoding):
    """DoLa (layer contrast) as a ``custom_generate`` callable: the baseline of the paper.

    ``dola_layers`` is ``"low"``, ``"high"`` or a list of hidden-state indices; the contrast
    scores go through the full logits-processor list (temperature, top-k, top-p, repetition
    penalty ...), then greedy or sampled with the instance's generator.
    """

    def __init__(self, dola_layers: str | list[int] = "high", relative_top: float = 0.1,
                 generator: Any = None) -> None:
        super().__init__(generator)
        if not 0.0 < relative_top <= 1.0:
            raise ValueError(f"relative_top must lie in (0, 1], got {relative_top!r}")
        self.dola_layers = dola_layers
        self.relative_top = relative_top
        self._layers: list[int] = []
        self.chosen_layers: list[int] = []
        self._buf: Any = None

    def setup(self, model: Any, input_ids: Any, generation_config: Any) -> None:
        from icml_led.dola import dola_candidate_layers
        from icml_led.layers import check_readout, num_layers_of

        check_readout(model, False)  # DoLa reads un-normed premature layers
        tied = bool(getattr(model.config, "tie_word_embeddings", False))
        self._layers = dola_candidate_layers(num_layers_of(model), self.dola_layers, tied)
        self.chosen_layers = []
        self._buf = None

    def _premature_logits(self, model: Any, hidden_states: Any, as_float: bool = True) -> Any:
        """``lm_head(h_l)`` at the last position for every candidate layer, ``(n, B, V)``
        float32: one matmul for all layers and rows (layer-major rows), written into a buffer
        reused across the steps of a call (no 100 MB allocation per step) on CPU. Bit for bit
        the values of ``intermediate_logits(...).transpose(0, 1)`` (tested), which is what other
        devices get. ``as_float=False`` returns the buffer in the head's dtype (bfloat16 for a
        bfloat16 model: the same values before their exact conversion to float32), which the
        decoding step converts one layer at a time instead of copying all ``n`` layers."""
        import torch

        from icml_led.layers import changes_basis, intermediate_logits, lm_head_of

        head = lm_head_of(model)
        w = getattr(head, "weight", None)
        if (changes_basis(model) or type(head) is not torch.nn.Linear or head.bias is not None
                or w is None or w.device.type != "cpu"
                or w.requires_grad and torch.is_grad_enabled()):
            # transformed residual bases (mapped), other heads, accelerators (no page faults
            # to save) and autograd: the plain call
            return intermediate_logits(model, hidden_states, self._layers).transpose(0, 1)
        h = torch.stack([hidden_states[i][:, -1] for i in self._layers], dim=0)   # (n, B, H)
        rows = h.shape[0] * h.shape[1]
        shape = (rows, w.shape[0])
        if (self._buf is None or self._buf.shape != shape or self._buf.dtype != w.dtype
                or self._buf.device != w.device):
            self._buf = torch.empty(shape, dtype=w.dtype, device=w.device)
        torch.mm(h.reshape(rows, -1).to(w.dtype), w.t(), out=self._buf)
        out = self._buf.view(h.shape[0], h.shape[1], -1)
        return out.float() if as_float else out

    def finish(self) -> None:
        self._buf = None

    def choose(self, model: Any, input_ids: Any, outputs: Any, logits_processor: Any,
               generation_config: Any) -> tuple[Any, Any]:
        import torch

        from icml_led.dola import dola_contrast

        hs = getattr(outputs, "hidden_states", None)
        if hs is None:
            raise ValueError("the model's outputs carry no hidden_states: DoLa needs them")
        final = outputs.logits[:, -1].float()
        prem = self._premature_logits(model, hs, as_float=False).to(final.device)
        contrast, chosen = dola_contrast(final, prem, self.relative_top)
        self.chosen_layers.append(self._layers[chosen])
        scores = apply_processors(logits_processor, input_ids, contrast)
        probs = torch.softmax(scores, dim=-1)
        return sample_sorted(probs, self.generator, greedy=_greedy(generation_config)), scores


class SamplingDecoding(_Decoding):
    """Plain decoding from the final layer (temperature / top-k / top-p through the usual
    processors, or greedy) with the same random protocol as LED's base path: with
    ``top_k = k``, ``top_p = 1`` it draws exactly what ``LEDDecoding(LEDConfig(depth=1,
    top_k=k))`` draws from the same generator."""

    needs_hidden_states = False

    def choose(self, model: Any, input_ids: Any, outputs: Any, logits_processor: Any,
               generation_config: Any) -> tuple[Any, Any]:
        import torch

        scores = apply_processors(logits_processor, input_ids,
                                  outputs.logits[:, -1].float())
        probs = torch.softmax(scores, dim=-1)
        return sample_sorted(probs, self.generator, greedy=_greedy(generation_config)), scores


def led_decoding(config: LEDConfig | None = None, generator: Any = None) -> LEDDecoding:
    """A ``custom_generate`` callable for LED (see :class:`LEDDecoding`); ``None``: every
    default of :class:`LEDConfig`."""
    return LEDDecoding(config if config is not None else LEDConfig(), generator)


def dola_decoding(dola_layers: str | list[int] = "high", relative_top: float = 0.1,
                  generator: Any = None) -> DoLaDecoding:
    """A ``custom_generate`` callable for DoLa (see :class:`DoLaDecoding`)."""
    return DoLaDecoding(dola_layers, relative_top, generator)


def led_generate(model: Any, input_ids: Any, config: LEDConfig | None = None,
                 generator: Any = None, **generate_kwargs: Any) -> Any:
    """``model.generate(input_ids, custom_generate=LEDDecoding(config, generator), ...)``
    (``config=None``: every default of :class:`LEDConfig`)."""
    return model.generate(input_ids, custom_generate=led_decoding(config, generator),
                          **generate_kwargs)
