"""Synthetic SFT regimes at the two ends of the model-capability continuum (CPU scale).

* ``rule``: the *prior* task, a digit-wise rule: add ``shift`` mod 10 to every digit of a
  d-digit string (``"A1234="`` -> ``"4567"``). A tiny model is pretrained on it with NLL.
* ``strong`` (model-strong): the same rule, but the supervision is noisy: each answer digit is
  replaced by a random digit with probability ``noise`` and ``tail`` random digits follow the
  answer (long, noisy responses). The prior already solves the task; the noise is what NLL
  fits.
* ``weak`` (model-weak): a task the prior does not know: the sum digits written through a random
  substitution cipher onto letters (``"C1234="`` -> ``"gjak"``), with clean labels.

Examples are text, so any HF tokenizer works (the built-in model uses the core's byte
tokenizer). Accuracy is greedy exact match on the clean answer, computed with one teacher-forced
forward pass (greedy decoding reproduces the answer iff every answer token is the argmax given the
correct prefix).
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Any

REGIMES = ("rule", "strong", "weak")


@dataclass
class Example:
    prompt: str
    answer: str          # the clean answer (evaluated)
    response: str        # what is trained on (answer, possibly noisy, plus a tail)


def _cipher(seed: int) -> str:
    letters = list(string.ascii_lowercase[:10])
    random.Random(10_000 + seed).shuffle(letters)
    return "".join(letters)


def make_examples(regime: str, n: int, *, digits: int = 4, noise: float = 0.0, tail: int = 0,
                  seed: int = 0, cipher_seed: int = 0, shift: int = 3) -> list[Example]:
    """``n`` examples of ``regime`` (``rule``, ``strong``, ``weak``). ``noise`` and ``tail``
    corrupt the trained response (not the evaluated answer); ``cipher_seed`` fixes the weak
    task's substitution."""
    if regime not in REGIMES:
        raise ValueError(f"regime {regime!r} is unknown: use one of {', '.join(REGIMES)}")
    if n < 1 or digits < 1 or tail < 0 or not 0.0 <= noise <= 1.0:
        raise ValueError("make_examples needs n >= 1, digits >= 1, tail >= 0, 0 <= noise <= 1")
    rng = random.Random(seed)
    table = _cipher(cipher_seed)
    out = []
    for _ in range(n):
        a = [rng.randrange(10) for _ in range(digits)]
        c = [(x + shift) % 10 for x in a]
        tag = "C" if regime == "weak" else "A"
        prompt = f"{tag}{''.join(map(str, a))}="
        answer = "".join(table[d] for d in c) if regime == "weak" else "".join(map(str, c))
        resp = [ch if rng.random() >= noise else str(rng.randrange(10)) for ch in answer] \
            if regime != "weak" else list(answer)
        resp += [str(rng.randrange(10)) for _ in range(tail)]
        out.append(Example(prompt, answer, "".join(resp)))
    return out


def encode(examples: list[Example], tokenizer: Any, *, ignore_index: int = -100,
           device: Any = "cpu") -> dict[str, Any]:
    """Right-padded tensors: ``input_ids``, ``attention_mask``, ``labels`` (``ignore_index`` on
    prompt and padding; HF unshifted convention) and ``eval_mask`` (positions of the clean
    answer tokens in the labels, for exact match)."""
    import torch

    if not examples:
        raise ValueError("encode needs at least one example")
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    rows = []
    for ex in examples:
        p = tokenizer(ex.prompt, add_special_tokens=False)["input_ids"]
        a = tokenizer(ex.answer, add_special_tokens=False)["input_ids"]
        r = tokenizer(ex.response, add_special_tokens=False)["input_ids"]
        rows.append((p, a, r + ([eos] if eos is not None else [])))
    width = max(len(p) + max(len(a), len(r)) for p, a, r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    labels = torch.full_like(ids, ignore_index)
    clean = torch.full_like(ids, ignore_index)
    attn = torch.zeros_like(ids)
    for i, (p, a, r) in enumerate(rows):
        seq = p + r
        ids[i, :len(seq)] = torch.tensor(seq)
        attn[i, :len(seq)] = 1
        labels[i, len(p):len(seq)] = torch.tensor(r)
        clean[i, len(p):len(p) + len(a)] = torch.tensor(a)
    return {"input_ids": ids.to(device), "attention_mask": attn.to(device),
            "labels": labels.to(device), "clean_labels": clean.to(device)}


def exact_match(model: Any, batch: dict[str, Any], *, ignore_index: int = -100,
                batch_size: int = 256) -> float:
    """Greedy exact-match accuracy on ``clean_labels`` (teacher-forced argmax)."""
    import torch

    was = model.training
    model.eval()
    hits = 0
    n = batch["input_ids"].shape[0]
    with torch.no_grad():
        for i in range(0, n, batch_size):
            ids = batch["input_ids"][i:i + batch_size]
            # the clean answer may differ from the trained response: feed it
            clean = batch["clean_labels"][i:i + batch_size]
            feed = torch.where(clean != ignore_index, clean, ids)
            logits = model(input_ids=feed,
                           attention_mask=batch["attention_mask"][i:i + batch_size]).logits
            pred = logits[:, :-1].argmax(-1)
            tgt = clean[:, 1:]
            ok = (pred == tgt) | (tgt == ignore_index)
            hits += int(ok.all(-1).sum())
    model.train(was)
    return hits / n
