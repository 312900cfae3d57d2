"""Prompt builders: ``prompt(example, text) -> model inputs`` (batch 1), a left-padding
collator and batched greedy generation. :class:`ChatPrompt` serves any chat LM (the query's
text stands in for the audio); :class:`icml_sarsteer.toy_lalm.AudioPrompt` serves the audio-LM.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


def question_of(example: Any) -> str:
    """The transcript of an example (a :class:`~icml_sarsteer.data.Query` or a string)."""
    return example if isinstance(example, str) else example.question


@dataclass
class ChatPrompt:
    """Text-only inputs for a chat LM: the user turn is ``"{question} {text}"`` (``text`` is
    T0 or T0 + R), through the tokenizer's chat template when it has one, else
    ``"User: ...\\nAssistant:"``."""

    tokenizer: Any
    device: Any = "cpu"
    template: str = "{question} {text}"
    system: str | None = None

    def __call__(self, example: Any, text: str) -> dict[str, Any]:
        content = self.template.format(question=question_of(example), text=text).strip()
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            msgs = ([{"role": "system", "content": self.system}] if self.system else []) + \
                [{"role": "user", "content": content}]
            enc = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt",
                                          return_dict=True)
        else:
            enc = tok(f"User: {content}\nAssistant:", return_tensors="pt")
        return {k: v.to(self.device) for k, v in enc.items() if k in ("input_ids",
                                                                        "attention_mask")}

    @property
    def pad_token_id(self) -> int:
        pid = self.tokenizer.pad_token_id
        return int(pid if pid is not None else self.tokenizer.eos_token_id)

    def decode(self, ids: Any) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def collate(items: Sequence[dict[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """Left-pad ``input_ids``/``attention_mask`` of batch-1 inputs; concatenate the rest
    (e.g. audio features) along the batch axis."""
    import torch

    if not items:
        raise ValueError("nothing to collate")
    width = max(int(it["input_ids"].shape[1]) for it in items)
    out: dict[str, Any] = {}
    ids, mask = [], []
    for it in items:
        x = it["input_ids"]
        pad = width - x.shape[1]
        ids.append(torch.cat([x.new_full((1, pad), pad_token_id), x], 1))
        m = it.get("attention_mask", torch.ones_like(x))
        mask.append(torch.cat([m.new_zeros((1, pad)), m], 1))
    out["input_ids"], out["attention_mask"] = torch.cat(ids), torch.cat(mask)
    keys = list(dict.fromkeys(k for it in items for k in it))
    for key in keys:
        if key not in out:
            vals = [it[key] for it in items if it.get(key) is not None]
            if vals:
                out[key] = torch.cat(vals, 0)
    return out


def generate_responses(model: Any, prompt: Any, examples: Sequence[Any], text: str, *,
                       max_new_tokens: int = 16, batch_size: int = 16,
                       progress: Callable[[Any], Any] | None = None) -> list[str]:
    """Greedy responses to ``prompt(example, text)`` for each example, batched with left
    padding; only the new tokens are decoded."""
    import torch

    out: list[str] = []
    starts = list(range(0, len(examples), batch_size))
    for s in (progress(starts) if progress else starts):
        batch = collate([prompt(ex, text) for ex in examples[s:s + batch_size]],
                        prompt.pad_token_id)
        with torch.no_grad():
            gen = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=prompt.pad_token_id)
        new = gen[:, batch["input_ids"].shape[1]:]
        out += [prompt.decode(row) for row in new]
    return out
