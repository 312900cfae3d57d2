"""Responders: anything that answers ``(images, prompts) -> texts``.

* :class:`OracleResponder` reads the SCM: faithful text and the gold chain (AG close to 0).
* :class:`FluentUnfaithfulResponder`: the oracle's fluent, correct text, but blank or scrambled
  chains (a large AG, like most VLMs in the paper).
* :class:`CallableResponder` wraps any ``fn(image, prompt) -> str`` (an API client, a pipeline).
* :class:`VLMResponder` runs a transformers VLM with its processor (LLaVA-, Qwen2-VL-style...).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from icml_cage.dataset import CageItem

AUTO_MARGIN = 16  # tokens beyond the longest gold CHAIN + ANSWER of a batch
AUTO_MIN = 64  # and never fewer: room for a two-sentence Text-Only answer


class Responder(Protocol):
    name: str

    def respond(self, images: Sequence[Any], prompts: Sequence[str],
                items: Sequence[CageItem]) -> list[str]: ...


def _explanation(item: CageItem) -> str:
    chain = item.gold_chain
    steps = ", then ".join(chain[1:])
    return (f"{item.answer.capitalize()}. Starting from the {chain[0]}, the effect passes "
            f"through the {steps}, which decides the outcome.")


def _effect_state(item: CageItem) -> str:
    """The phrase for the effect's state that the gold answer implies ("is lit" / "is dark")."""
    node = next(n for n in item.scm["nodes"] if n["name"] == item.effect)
    return str(node["on"] if item.answer == "yes" else node["off"])


def _is_chain_prompt(prompt: str) -> bool:
    return "CHAIN:" in prompt


@dataclass
class OracleResponder:
    """Answers from the SCM: correct answers, the gold chain."""

    name: str = "oracle"

    def respond(self, images: Sequence[Any], prompts: Sequence[str],
                items: Sequence[CageItem]) -> list[str]:
        out = []
        for prompt, item in zip(prompts, items):
            if _is_chain_prompt(prompt):
                out.append(f"CHAIN: {' -> '.join(item.gold_chain)} ({_effect_state(item)})"
                           f"\nANSWER: {item.answer}")
            else:
                out.append(_explanation(item))
        return out


@dataclass
class FluentUnfaithfulResponder:
    """Fluent, correct text; chains left blank (``p_blank``) or scrambled otherwise."""

    p_blank: float = 0.5
    seed: int = 0
    name: str = "fluent-unfaithful"
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def respond(self, images: Sequence[Any], prompts: Sequence[str],
                items: Sequence[CageItem]) -> list[str]:
        out = []
        for prompt, item in zip(prompts, items):
            if not _is_chain_prompt(prompt):
                out.append(_explanation(item))
            elif self._rng.random() < self.p_blank:
                out.append(f"CHAIN:\nANSWER: {item.answer}")
            else:
                chain = list(reversed(item.gold_chain))  # effect-to-cause: no edge is right
                out.append(f"CHAIN: {' -> '.join(chain)}\nANSWER: {item.answer}")
        return out


@dataclass
class CallableResponder:
    """Wraps ``fn(image, prompt) -> str``."""

    fn: Callable[[Any, str], str]
    name: str = "callable"

    def respond(self, images: Sequence[Any], prompts: Sequence[str],
                items: Sequence[CageItem]) -> list[str]:
        return [self.fn(img, p) for img, p in zip(images, prompts)]


@dataclass
class VLMResponder:
    """A transformers vision-language model and its processor, greedy decoding in batches.

    ``processor(images=[...], text=[...], return_tensors="pt", padding=True)`` must return the
    model's inputs. When the processor has a chat template it formats each prompt with one image
    and the text; otherwise ``image_token`` is put in front of the prompt (LLaVA-style).

    ``max_new_tokens=0`` (the default) gives each batch, under both probes alike, room for its
    longest gold ``CHAIN: ... ANSWER: ...`` in the model's tokens plus ``AUTO_MARGIN`` (at least
    ``AUTO_MIN``, room for a two-sentence text answer): a fixed short budget cuts long chains
    (six dominoes) mid-node, which scores them 0 and inflates the Abstraction Gap for a reason
    that has nothing to do with the model.
    """

    model: Any
    processor: Any
    max_new_tokens: int = 0
    batch_size: int = 8
    image_token: str = "<image>"
    name: str = "vlm"

    def _format(self, prompt: str) -> str:
        template = getattr(self.processor, "chat_template", None)
        if template:
            messages = [{"role": "user", "content": [{"type": "image"},
                                                     {"type": "text", "text": prompt}]}]
            return self.processor.apply_chat_template(messages, add_generation_prompt=True)
        return f"{self.image_token}\n{prompt}\n"

    def budget(self, items: Sequence[CageItem]) -> int:
        """New tokens for a batch: ``max_new_tokens``, or the automatic budget when it is 0."""
        if self.max_new_tokens:
            return self.max_new_tokens
        if not items:
            return AUTO_MIN  # called without items: no gold chain to size the budget by
        from icml_cage.sft_export import sft_target

        tokenizer = getattr(self.processor, "tokenizer", self.processor)
        return max(AUTO_MIN, AUTO_MARGIN + max(
            len(tokenizer(sft_target(it), add_special_tokens=False)["input_ids"]) for it in items))

    def respond(self, images: Sequence[Any], prompts: Sequence[str],
                items: Sequence[CageItem]) -> list[str]:
        import torch

        tokenizer = getattr(self.processor, "tokenizer", self.processor)
        tokenizer.padding_side = "left"  # decoder-only generation
        device = next(self.model.parameters()).device
        out: list[str] = []
        for start in range(0, len(prompts), self.batch_size):
            texts = [self._format(p) for p in prompts[start:start + self.batch_size]]
            batch = self.processor(images=list(images[start:start + self.batch_size]),
                                   text=texts, return_tensors="pt", padding=True)
            batch = {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}
            with torch.no_grad():
                budget = self.budget(items[start:start + self.batch_size])
                ids = self.model.generate(**batch, max_new_tokens=budget,
                                          do_sample=False, pad_token_id=tokenizer.pad_token_id)
            new = ids[:, batch["input_ids"].shape[1]:]
            out += tokenizer.batch_decode(new, skip_special_tokens=True)
        return out
