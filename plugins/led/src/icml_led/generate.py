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

from icml_led.led import LEDConfig, led_step, sample_sorted

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
        logits_processor = logits_processor or LogitsProcessorList()
        stopping_criteria = stopping_criteria or StoppingCriteriaList()
        pad = generation_config._pad_token_tensor
        has_eos = any(hasattr(c, "eos_token_id") for c in stopping_criteria)
        if has_eos and pad is None:
            raise ValueError("generation has an eos token but no pad token: set pad_token_id")
        if pad is not None:
            pad = pad.to(input_ids.device)
        B = input_ids.shape[0]
        unfinished = torch.ones(B, dtype=torch.long, device=input_ids.device)
        model_kwargs["output_hidden_states"] = self.needs_hidden_states
        use_cache = model_kwargs.get("use_cache", True)
        takes_next_len = "next_sequence_length" in inspect.signature(
            model.prepare_inputs_for_generation).parameters
        return_dict = generation_config.return_dict_in_generate
        keep_scores = return_dict and generation_config.output_scores
        keep_logits = return_dict and generation_config.output_logits
        scores: tuple = ()
        raw: tuple = ()
        self.stats = {"steps": 0, "explored": 0, "think_tokens": 0, "tokens": 0}
        self.setup(model, input_ids, generation_config)
        first = True
        while True:
            if first and hasattr(model, "_prefill"):
                outputs = model._prefill(input_ids, generation_config, model_kwargs)
            else:
                extra = {}
                if takes_next_len:
                    extra["next_sequence_length"] = 1 if (use_cache and not first) else None
                if first and "is_first_iteration" in inspect.signature(
                        model.prepare_inputs_for_generation).parameters:
                    extra["is_first_iteration"] = True
                inputs = model.prepare_inputs_for_generation(input_ids, **extra, **model_kwargs)
                outputs = model(**inputs, return_dict=True)
            first = False
            model_kwargs = model._update_model_kwargs_for_generation(outputs, model_kwargs)
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
        if streamer is not None:
            streamer.end()
        if return_dict:
            from transformers.generation.utils import GenerateDecoderOnlyOutput

            return GenerateDecoderOnlyOutput(sequences=input_ids, scores=scores or None,
                                             logits=raw or None,
                                             cache=model_kwargs.get("cache"))
        return input_ids


def _greedy(generation_config: Any) -> bool:
    return not bool(generation_config.do_sample)


class LEDDecoding(_Decoding):
    """Latent Exploration Decoding as a ``custom_generate`` callable.

    Temperature comes from ``generation_config.temperature`` (``do_sample=True``) and greedy mode
    from ``do_sample=False``. After a call, ``self.stats`` holds the number of emitted tokens,
    of tokens inside the thinking span and of explored tokens.
    """

    def __init__(self, config: LEDConfig | None = None, generator: Any = None) -> None:
        super().__init__(generator)
        self.config = config or LEDConfig()
        self._inside = None
        self._indices: list[int] = []

    def setup(self, model: Any, input_ids: Any, generation_config: Any) -> None:
        from icml_led.layers import layer_indices, lm_head_of, num_layers_of

        cfg = self.config
        self._indices = layer_indices(num_layers_of(model), cfg.depth, cfg.skip_penultimate,
                                      cfg.layers)
        vocab = lm_head_of(model).out_features
        if cfg.top_k > vocab:
            raise ValueError(f"top_k={cfg.top_k} is larger than the vocabulary ({vocab} tokens): "
                             f"use top_k <= {vocab}")
        for name, tok in (("think_start_id", cfg.think_start_id),
                          ("think_end_id", cfg.think_end_id)):
            if tok is not None and not 0 <= tok < vocab:
                raise ValueError(f"{name}={tok} is not a token id of this model (vocabulary "
                                 f"{vocab}): pass the id of the think delimiter")
        if cfg.think_only:
            self._inside = think_state(input_ids, cfg.think_start_id, cfg.think_end_id)
        else:
            self._inside = None

    def choose(self, model: Any, input_ids: Any, outputs: Any, logits_processor: Any,
               generation_config: Any) -> tuple[Any, Any]:
        import torch

        from icml_led.layers import layerwise_from_outputs

        lw = layerwise_from_outputs(model, outputs, self._indices, self.config.use_final_norm)
        procs = [p for p in logits_processor if type(p).__name__ not in _WARPERS]
        final = lw[:, 0]
        for p in procs:
            final = p(input_ids, final)
        lw = torch.cat([final[:, None], lw[:, 1:]], dim=1)
        greedy = _greedy(generation_config)
        temp = generation_config.temperature if generation_config.temperature else 1.0
        info = led_step(lw, self.config, temperature=temp, generator=self.generator,
                        greedy=greedy, in_think=self._inside)
        active = self._active
        if self._inside is not None:
            self.stats["think_tokens"] += int((self._inside & active).sum())
        else:
            self.stats["think_tokens"] += int(active.sum())
        self.stats["explored"] += int((info.explore & active).sum())
        self.last_info = info
        return info.tokens, final

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

    def setup(self, model: Any, input_ids: Any, generation_config: Any) -> None:
        from icml_led.dola import dola_candidate_layers
        from icml_led.layers import num_layers_of

        tied = bool(getattr(model.config, "tie_word_embeddings", False))
        self._layers = dola_candidate_layers(num_layers_of(model), self.dola_layers, tied)
        self.chosen_layers = []

    def choose(self, model: Any, input_ids: Any, outputs: Any, logits_processor: Any,
               generation_config: Any) -> tuple[Any, Any]:
        import torch

        from icml_led.dola import dola_contrast
        from icml_led.layers import intermediate_logits

        hs = getattr(outputs, "hidden_states", None)
        if hs is None:
            raise ValueError("the model's outputs carry no hidden_states: DoLa needs them")
        final = outputs.logits[:, -1].float()
        prem = intermediate_logits(model, hs, self._layers).transpose(0, 1).to(final.device)
        contrast, chosen = dola_contrast(final, prem, self.relative_top)
        self.chosen_layers.append(self._layers[chosen])
        scores = logits_processor(input_ids, contrast)
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

        scores = logits_processor(input_ids, outputs.logits[:, -1].float())
        probs = torch.softmax(scores, dim=-1)
        return sample_sorted(probs, self.generator, greedy=_greedy(generation_config)), scores


def led_decoding(config: LEDConfig | None = None, generator: Any = None) -> LEDDecoding:
    """A ``custom_generate`` callable for LED (see :class:`LEDDecoding`)."""
    return LEDDecoding(config, generator)


def dola_decoding(dola_layers: str | list[int] = "high", relative_top: float = 0.1,
                  generator: Any = None) -> DoLaDecoding:
    """A ``custom_generate`` callable for DoLa (see :class:`DoLaDecoding`)."""
    return DoLaDecoding(dola_layers, relative_top, generator)


def led_generate(model: Any, input_ids: Any, config: LEDConfig | None = None,
                 generator: Any = None, **generate_kwargs: Any) -> Any:
    """``model.generate(input_ids, custom_generate=LEDDecoding(config, generator), ...)``."""
    return model.generate(input_ids, custom_generate=LEDDecoding(config, generator),
                          **generate_kwargs)
