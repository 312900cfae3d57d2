"""The two probes and their parsers.

* Text-Only Probe: the image and the question; a free-text answer judged for quality.
* Chain-Text Probe: the model must first write an explicit causal chain (``CHAIN: a -> b -> c``)
  and then its answer (``ANSWER: yes``).

Prompt templates are parameters (``{question}`` is filled in). The chain parser accepts ``->``,
``→``, ``=>``, ``-->``, ``⟶`` and the phrases "causes", "leads to", "makes", "then", and matches
node names case- and whitespace-insensitively.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

TEXT_PROMPT = ("Look at the picture and answer the question in one or two sentences, starting "
               "with yes or no.\nQuestion: {question}")
CHAIN_PROMPT = ("Look at the picture. First write the causal chain from the cause to the effect "
                "as CHAIN: a -> b -> c. Then write ANSWER: yes or ANSWER: no.\n"
                "Question: {question}")

_ARROWS = re.compile(r"\s*(?:-+>|→|⟶|=+>|\bcauses\b|\bleads to\b|\bmakes\b|\bthen\b|,)\s*",
                     re.I)
_CHAIN_LINE = re.compile(r"chain\s*[:\-]\s*(.*)", re.I)
_ANSWER = re.compile(r"answer\s*[:\-]\s*(yes|no)\b", re.I)
_LEADING = re.compile(r"^\W*(yes|no)\b", re.I)
_ANY_YN = re.compile(r"\b(yes|no)\b", re.I)
_ARROW_MARK = re.compile(r"-+>|→|⟶|=+>")


TEXT_BUDGET = 64  # new tokens: room for a two-sentence answer
CHAIN_BUDGET = 128  # room for the longest chain the scene families make (six dominoes, with
# states, plus ANSWER) in a byte-level tokenizer; a budget is the probe's, never the item's


@dataclass(frozen=True)
class Probe:
    """A prompt template, the generation budget it allows, and how to read the response."""

    name: str
    template: str
    max_new_tokens: int = TEXT_BUDGET

    def prompt(self, question: str) -> str:
        if "{question}" not in self.template:
            raise ValueError(f"{self.name} prompt template has no {{question}} placeholder")
        try:
            return self.template.format(question=question)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"{self.name} prompt template {self.template!r} has a placeholder "
                             f"other than {{question}} ({exc!r}): write literal braces as "
                             "{{ and }}") from None


def text_only_probe(template: str = TEXT_PROMPT, max_new_tokens: int = TEXT_BUDGET) -> Probe:
    return Probe("text", template, max_new_tokens)


def chain_text_probe(template: str = CHAIN_PROMPT, max_new_tokens: int = CHAIN_BUDGET) -> Probe:
    return Probe("chain", template, max_new_tokens)


@dataclass(frozen=True)
class Query:
    """Everything a responder is given: what a model would see. ``caption`` is the picture in
    words (for text-only models; :func:`icml_cage.dataset.caption`), never an answer."""

    id: str
    image: Any
    question: str
    prompt: str
    probe: str
    max_new_tokens: int
    caption: str = ""


def normalise_node(text: str) -> str:
    text = re.sub(r"^(the|a|an)\s+", "", text.strip().lower())
    return re.sub(r"\s+", " ", text).strip(" .;:!\"'`*")


def parse_chain(response: str) -> list[str]:
    """The node names of the first ``CHAIN:`` line (or of the first line with an arrow); an
    empty list when there is none. Never raises."""
    if not isinstance(response, str):
        return []
    lines = response.splitlines()
    body = None
    for i, line in enumerate(lines):
        m = _CHAIN_LINE.search(line)
        if m:
            body = m.group(1)
            if not body.strip():  # "CHAIN:" alone, the chain on the next line
                nxt = next((ln for ln in lines[i + 1:] if ln.strip()), "")
                if _ARROW_MARK.search(nxt) and not _ANSWER.search(nxt):
                    body = nxt
            break
    if body is None:
        body = next((ln for ln in lines if _ARROW_MARK.search(ln)), "")
    body = _ANSWER.split(body)[0]
    nodes = [normalise_node(p) for p in _ARROWS.split(body)]
    return [n for n in nodes if n]


def parse_answer(response: str) -> str | None:
    """"yes", "no" or None: an explicit ``ANSWER:`` wins, then a leading yes/no, then the first
    yes/no anywhere. Never raises."""
    if not isinstance(response, str):
        return None
    for pattern in (_ANSWER, _LEADING, _ANY_YN):
        m = pattern.search(response)
        if m:
            return m.group(1).lower()
    return None
