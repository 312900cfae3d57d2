"""XSpecMesh decoding as a ``model.generate(..., custom_generate=...)`` callable, so any
transformers causal LM can use its heads through the standard entry point::

    out = model.generate(ids, max_new_tokens=64, do_sample=False,
                         custom_generate=XSpecDecoding(heads))

``do_sample=False`` selects the lossless ``greedy`` rule unless ``acceptance`` is given;
``do_sample=True`` uses ``acceptance`` (default ``"topk"``) with the generation config's
``temperature``, ``top_k`` and ``top_p``; the rest of the decoder's settings (the ``topk``
rule's acceptance set, ``tree_width``) come from ``config``, a
:class:`~icml_xspecmesh.config.DecodeConfig`. Other logits processors (repetition penalty, bad
words, ...) are not applied: the verification compares raw backbone distributions. After a call,
``self.last_output`` holds the :class:`~icml_xspecmesh.speculative.SpeculativeOutput`
(backbone calls, accepted lengths).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from icml_xspecmesh.config import DecodeConfig


class XSpecDecoding:
    """A ``custom_generate`` callable running :func:`speculative_generate` with ``heads``."""

    def __init__(self, heads: Any, config: DecodeConfig | None = None, *,
                 acceptance: str | None = None, generator: Any = None) -> None:
        self.heads, self.acceptance, self.generator = heads, acceptance, generator
        self.config = config if config is not None else DecodeConfig()
        self.last_output: Any = None

    def __call__(self, model: Any, input_ids: Any, logits_processor: Any = None,
                 stopping_criteria: Any = None, generation_config: Any = None,
                 synced_gpus: bool = False, streamer: Any = None, **model_kwargs: Any) -> Any:
        from icml_xspecmesh.speculative import speculative_generate

        if generation_config is None:
            raise ValueError("call this through model.generate(..., custom_generate=<instance>) "
                             "so transformers prepares the generation config")
        gc = generation_config
        new = gc.max_new_tokens
        if new is None:
            new = (gc.max_length or 20) - input_ids.shape[1]
        sample = bool(gc.do_sample)
        acceptance = self.acceptance or ("topk" if sample else "greedy")
        if not sample and acceptance != "greedy":
            raise ValueError(f"acceptance={acceptance!r} samples: pass do_sample=True, or use "
                             "acceptance='greedy' with do_sample=False")
        config = self.config
        if sample:   # transformers' sampling settings replace the config's
            config = replace(config, temperature=gc.temperature or 1.0, top_k=gc.top_k or 0,
                             top_p=gc.top_p or 1.0)
        out = speculative_generate(
            model, self.heads, input_ids, config,
            attention_mask=model_kwargs.get("attention_mask"), max_new_tokens=new,
            acceptance=acceptance,
            eos_token_id=gc.eos_token_id if gc.eos_token_id is not None else [],
            pad_token_id=gc.pad_token_id, generator=self.generator)
        self.last_output = out
        return out.sequences
