"""Responders: anything with ``respond(queries) -> texts``. A :class:`~icml_cage.probes.Query`
holds what a model would see (image, question, the probe's prompt and budget, the picture in
words), never the gold answer, chain or SCM.

Systems under test:

* :class:`VLMResponder` runs a transformers VLM with its processor (LLaVA-, Qwen2-VL-style...).
* :class:`CallableResponder` wraps any ``fn(image, prompt) -> str`` (an API client, a pipeline).
* :class:`CaptionLMResponder` a text-only causal LM answering from the picture's caption.

Reference responders, instruments for testing the metric, are given the answer key explicitly
when built (``OracleResponder(bench)``); they look items up by query id:

* :class:`OracleResponder`: correct answers and the gold chain (AG close to 0).
* :class:`GradedResponder`: known, graded faithfulness: each chain edge is corrupted with
  probability ``corrupt`` and answers are right with probability ``answer_accuracy``,
  independently of the chain; the text explanation is the oracle's.
* :func:`FluentUnfaithfulResponder`: fluent text, chains blank or fully corrupted.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from icml_cage.dataset import CageBenchmark, CageItem
from icml_cage.probes import Query

DISTRACTORS = ("table", "window", "shadow", "floor", "wall", "cloud", "carpet")


class Responder(Protocol):
    name: str

    def respond(self, queries: Sequence[Query]) -> list[str]: ...


def _explanation(item: CageItem, answer: str) -> str:
    chain = item.gold_chain
    steps = ", then ".join(chain[1:])
    return (f"{answer.capitalize()}. Starting from the {chain[0]}, the effect passes "
            f"through the {steps}, which decides the outcome.")


def _effect_state(item: CageItem, answer: str) -> str:
    """The phrase for the effect's state that ``answer`` implies ("is lit" / "is dark")."""
    node = next(n for n in item.scm["nodes"] if n["name"] == item.effect)
    return str(node["on"] if answer == "yes" else node["off"])


def _key(answer_key: CageBenchmark | Mapping[str, CageItem] | Sequence[CageItem]
         ) -> dict[str, CageItem]:
    if isinstance(answer_key, CageBenchmark):
        return {it.id: it for it in answer_key.items}
    if isinstance(answer_key, Mapping):
        return dict(answer_key)
    return {it.id: it for it in answer_key}


@dataclass
class GradedResponder:
    """A reference responder of known faithfulness (see module docstring).

    Per item, deterministically from ``seed`` and the item id: the answer (the same under both
    probes) is right with probability ``answer_accuracy``; the chain is blank with probability
    ``blank``; otherwise each of its ``E`` edges is corrupted with probability ``corrupt`` and
    the ``m`` corrupted edges are made by replacing the chain's last ``m`` nodes with objects
    that are not in the scene, so exactly ``m`` edges are wrong. :meth:`faithfulness` gives
    ``1 - m / E`` (0 for a blank chain)."""

    answer_key: Any
    corrupt: float = 0.0
    answer_accuracy: float = 1.0
    blank: float = 0.0
    seed: int = 0
    name: str = ""
    states: bool = False  # write the effect's state after the last node, like the oracle
    _items: dict[str, CageItem] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for key in ("corrupt", "answer_accuracy", "blank"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ValueError(f"{key} must be in [0, 1], got {getattr(self, key)}")
        self._items = _key(self.answer_key)
        self.name = self.name or f"graded(corrupt={self.corrupt:g})"

    def _draws(self, item: CageItem) -> tuple[str, bool, int]:
        rng = random.Random(f"{self.seed}-{item.id}")
        right = rng.random() < self.answer_accuracy
        answer = item.answer if right else ("no" if item.answer == "yes" else "yes")
        blank = rng.random() < self.blank
        m = sum(rng.random() < self.corrupt for _ in range(len(item.gold_chain) - 1))
        return answer, blank, m

    def faithfulness(self, item_id: str) -> float:
        item = self._items[item_id]
        _, blank, m = self._draws(item)
        return 0.0 if blank else 1.0 - m / (len(item.gold_chain) - 1)

    def _chain(self, item: CageItem, m: int) -> list[str]:
        chain = list(item.gold_chain)
        names = {str(n["name"]) for n in item.scm.get("nodes", [])}
        fillers = [d for d in DISTRACTORS if d not in names]
        for k in range(m):
            chain[len(chain) - 1 - k] = fillers[k]
        return chain

    def respond(self, queries: Sequence[Query]) -> list[str]:
        out = []
        for q in queries:
            try:
                item = self._items[q.id]
            except KeyError:
                raise KeyError(f"query {q.id!r} is not in this responder's answer key: build "
                               "it with the benchmark being evaluated") from None
            answer, blank, m = self._draws(item)
            if q.probe != "chain":
                out.append(_explanation(item, answer))
            elif blank:
                out.append(f"CHAIN:\nANSWER: {answer}")
            else:
                chain = " -> ".join(self._chain(item, m))
                state = f" ({_effect_state(item, answer)})" if self.states and m == 0 else ""
                out.append(f"CHAIN: {chain}{state}\nANSWER: {answer}")
        return out


def OracleResponder(answer_key: Any, name: str = "oracle") -> GradedResponder:  # noqa: N802
    """Correct answers, the gold chain with the effect's state: AG close to 0."""
    return GradedResponder(answer_key, name=name, states=True)


def FluentUnfaithfulResponder(answer_key: Any, p_blank: float = 0.5, seed: int = 0,  # noqa: N802
                              name: str = "fluent-unfaithful") -> GradedResponder:
    """The oracle's fluent, correct text; chains blank (``p_blank``) or every edge wrong."""
    return GradedResponder(answer_key, corrupt=1.0, blank=p_blank, seed=seed, name=name)


@dataclass
class CallableResponder:
    """Wraps ``fn(image, prompt) -> str``."""

    fn: Callable[[Any, str], str]
    name: str = "callable"

    def respond(self, queries: Sequence[Query]) -> list[str]:
        return [self.fn(q.image, q.prompt) for q in queries]


def format_prompt(processor: Any, prompt: str, image_token: str = "<image>") -> str:
    """The one prompt format for training and evaluation: the processor's chat template with
    one image and the text when it has one, else ``image_token`` in front (LLaVA-style)."""
    template = getattr(processor, "chat_template", None)
    if template:
        messages = [{"role": "user", "content": [{"type": "image"},
                                                 {"type": "text", "text": prompt}]}]
        return processor.apply_chat_template(messages, add_generation_prompt=True)
    return f"{image_token}\n{prompt}\n"


@dataclass
class VLMResponder:
    """A transformers vision-language model and its processor, greedy decoding in batches.

    ``processor(images=[...], text=[...], return_tensors="pt", padding=True)`` must return the
    model's inputs; prompts are formatted by :func:`format_prompt`, as in
    :func:`icml_cage.finetune.chain_sft`. ``max_new_tokens=0`` (the default) takes each query's
    budget from its probe (``Probe.max_new_tokens``).
    """

    model: Any
    processor: Any
    max_new_tokens: int = 0
    batch_size: int = 8
    image_token: str = "<image>"
    name: str = "vlm"

    def budget(self, queries: Sequence[Query]) -> int:
        """New tokens for a batch: ``max_new_tokens``, or the largest probe budget in it."""
        return self.max_new_tokens or max(q.max_new_tokens for q in queries)

    def respond(self, queries: Sequence[Query]) -> list[str]:
        import torch

        tokenizer = getattr(self.processor, "tokenizer", self.processor)
        tokenizer.padding_side = "left"  # decoder-only generation
        device = next(self.model.parameters()).device
        out: list[str] = []
        for start in range(0, len(queries), self.batch_size):
            chunk = queries[start:start + self.batch_size]
            texts = [format_prompt(self.processor, q.prompt, self.image_token) for q in chunk]
            batch = self.processor(images=[q.image for q in chunk], text=texts,
                                   return_tensors="pt", padding=True)
            batch = {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}
            with torch.no_grad():
                ids = self.model.generate(**batch, max_new_tokens=self.budget(chunk),
                                          do_sample=False, pad_token_id=tokenizer.pad_token_id)
            new = ids[:, batch["input_ids"].shape[1]:]
            out += tokenizer.batch_decode(new, skip_special_tokens=True)
        return out


CAPTION_PROMPT = "The picture shows: {caption}\n\n{prompt}"


@dataclass
class CaptionLMResponder:
    """A text-only causal LM (e.g. the packaged SmolLM2-135M-Instruct) that answers from the
    picture's caption instead of its pixels: ``CAPTION_PROMPT`` in the tokenizer's chat template,
    greedy decoding, the probe's budget. A perfect captioner stands in for vision, so this row
    measures the language model's causal reasoning, not perception. ``use_caption=False`` gives
    the same model the probe's prompt alone (no picture, no caption): the difference between
    the two rows is what the caption contributes."""

    model: Any
    tokenizer: Any
    max_new_tokens: int = 0
    batch_size: int = 8
    name: str = "caption-lm"
    template: str = CAPTION_PROMPT
    use_caption: bool = True  # False: the question and probe only (the caption's help)

    def _format(self, q: Query) -> str:
        text = (self.template.format(caption=q.caption or "(no caption)", prompt=q.prompt)
                if self.use_caption else q.prompt)
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                      tokenize=False, add_generation_prompt=True)
        return text + "\n"

    def respond(self, queries: Sequence[Query]) -> list[str]:
        import torch

        tok = self.tokenizer
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        device = next(self.model.parameters()).device
        out: list[str] = []
        for start in range(0, len(queries), self.batch_size):
            chunk = queries[start:start + self.batch_size]
            enc = tok([self._format(q) for q in chunk], return_tensors="pt", padding=True,
                      add_special_tokens=False).to(device)
            budget = self.max_new_tokens or max(q.max_new_tokens for q in chunk)
            with torch.no_grad():
                ids = self.model.generate(**enc, max_new_tokens=budget, do_sample=False,
                                          pad_token_id=tok.pad_token_id)
            out += tok.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        return out
