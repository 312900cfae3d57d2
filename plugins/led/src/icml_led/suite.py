"""A verifiable reasoning suite for real chat models: generated arithmetic and word problems with
exact integer answers, a few answer formats, and strict answer extraction.

Each problem is asked in a chat: one worked example in the requested answer format (a user turn
and the assistant's reply), then the question with the same instruction. Families (the answer is
always an exact integer):

* ``add2``: ``What is 27 + 38?`` (two 2-digit numbers);
* ``addsub3``: ``What is 7 + 8 - 5?`` (two steps);
* ``word_add`` / ``word_sub``: ``Mia has 7 pens. Mia gets 5 more pens. How many ...?`` and the
  ``gives away`` variant (one step, read off a sentence);
* ``word_mul``: ``Sam buys 4 bags with 6 coins in each bag. How many coins ...?``;
* ``mul``: ``What is 6 times 7?``.

Answer formats (the instruction and the example show the format; only that format counts):

* ``answer``: a final line ``Answer: <integer>``;
* ``boxed``: ``\\boxed{<integer>}``;
* ``hash``: ``#### <integer>`` (GSM8K style).

Extraction is strict: the *last* occurrence of the requested marker decides; its content must be
an integer written with ASCII digits (optional minus sign, no thousands separators, no decimals, no
words), otherwise the sample has no answer and is wrong. A marker of another format never counts.
Chat templates without a thinking span (SmolLM2's has none) get no think delimiters: LED then
explores over the whole reply (``think_only`` with no ids = the whole generation).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

FAMILIES = ("add2", "addsub3", "word_add", "word_sub", "word_mul", "mul")
FORMATS = ("answer", "boxed", "hash")

_INSTRUCTIONS = {
    "answer": "End your reply with a final line 'Answer: <number>'.",
    "boxed": "Put the final number in \\boxed{}.",
    "hash": "End your reply with '#### <number>'.",
}
_EXAMPLE_Q = "What is 2 + 3?"
_EXAMPLE_A = {
    "answer": "2 + 3 = 5.\nAnswer: 5",
    "boxed": "2 + 3 = 5, so the answer is \\boxed{5}.",
    "hash": "2 + 3 = 5.\n#### 5",
}
_INT = r"(-?\d+)"
# the content of each marker up to its natural end; the content is then checked for an integer
_MARKERS = {
    "answer": re.compile(r"(?m)^[ \t]*Answer:[ \t]*([^\n]*)$"),
    "boxed": re.compile(r"\\boxed\{([^{}]*)\}"),
    "hash": re.compile(r"(?m)####[ \t]*([^\n]*)$"),
}
_STRICT_INT = {
    "answer": re.compile(r"^" + _INT + r"\.?$"),   # "Answer: 5" or "Answer: 5."
    "boxed": re.compile(r"^" + _INT + r"$"),
    "hash": re.compile(r"^" + _INT + r"\.?$"),
}
_NAMES = ("Tom", "Anna", "Sam", "Mia", "Leo", "Ella", "Ben", "Zoe")
_ITEMS = ("apples", "books", "coins", "pens", "cards", "shells", "stamps", "marbles")


@dataclass(frozen=True)
class ChatProblem:
    """One question with its exact integer answer, family and answer format."""

    question: str
    answer: int
    family: str
    fmt: str

    def messages(self) -> list[dict[str, str]]:
        """The chat: one worked example in this format, then the question."""
        instr = _INSTRUCTIONS[self.fmt]
        return [{"role": "user", "content": f"{_EXAMPLE_Q} {instr}"},
                {"role": "assistant", "content": _EXAMPLE_A[self.fmt]},
                {"role": "user", "content": f"{self.question} {instr}"}]

    def prompt(self, tokenizer: Any) -> str:
        """The chat rendered by the tokenizer's template, ending with the assistant header."""
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template: the suite needs a chat model "
                             "(e.g. load_pretrained('smollm2-135m-instruct'))")
        return tokenizer.apply_chat_template(self.messages(), add_generation_prompt=True,
                                             tokenize=False)

    def is_correct(self, completion: str) -> bool:
        return extract_answer(completion, self.fmt) == self.answer


def extract_answer(text: str, fmt: str = "answer") -> int | None:
    """The integer answer of ``text`` in format ``fmt`` (see the module docstring), or None."""
    if fmt not in _MARKERS:
        raise ValueError(f"unknown answer format {fmt!r}: use one of {FORMATS}")
    found = _MARKERS[fmt].findall(text)
    if not found:
        return None
    m = _STRICT_INT[fmt].match(found[-1].strip())
    return int(m.group(1)) if m else None


def _question(family: str, rng: random.Random) -> tuple[str, int]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    if family == "add2":
        a, b = rng.randint(10, 49), rng.randint(10, 49)
        return f"What is {a} + {b}?", a + b
    if family == "addsub3":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        c = rng.randint(1, min(a + b - 1, 9))
        return f"What is {a} + {b} - {c}?", a + b - c
    if family == "word_add":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        return (f"{name} has {a} {item}. {name} gets {b} more {item}. How many {item} does "
                f"{name} have now?", a + b)
    if family == "word_sub":
        a = rng.randint(5, 12)
        b = rng.randint(1, a - 1)
        return (f"{name} has {a} {item}. {name} gives away {b} {item}. How many {item} does "
                f"{name} have left?", a - b)
    if family == "word_mul":
        a, b = rng.randint(2, 6), rng.randint(2, 6)
        return (f"{name} buys {a} bags with {b} {item} in each bag. How many {item} does "
                f"{name} have?", a * b)
    if family == "mul":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        return f"What is {a} times {b}?", a * b
    raise ValueError(f"unknown problem family {family!r}: use one of {FAMILIES}")


def make_suite(count: int, seed: int = 0, families: tuple[str, ...] = FAMILIES,
               formats: tuple[str, ...] = FORMATS) -> list[ChatProblem]:
    """``count`` problems, reproducible by ``seed``: families and formats cycle so every
    family meets every format as ``count`` grows (``count = len(families) * len(formats)``
    covers each pair once)."""
    if count < 1:
        raise ValueError(f"make_suite needs count >= 1, got {count}")
    bad = [f for f in families if f not in FAMILIES] + [f for f in formats if f not in FORMATS]
    if bad or not families or not formats:
        raise ValueError(f"unknown or empty families/formats {bad}: families from {FAMILIES}, "
                         f"formats from {FORMATS}")
    rng = random.Random(seed)
    pairs = [(fa, fo) for fo in formats for fa in families]
    out = []
    for i in range(count):
        fa, fo = pairs[i % len(pairs)]
        q, a = _question(fa, rng)
        out.append(ChatProblem(q, a, fa, fo))
    return out
