"""Judges score a response on the 0-10 rubric.

``RuleJudge`` (the offline, deterministic default; the rubric is reconstructed, see README):

* Text: answer correct against the SCM (0-4); the explanation's causal content: the share of
  the gold chain's variables it names (0-3) and the share of the gold chain's links whose cause
  it names before the effect (0-3, causal order). It measures whether the prose answer is
  right and lays out the causal path; it does not judge fluency, grammar or the states the
  prose claims (an LLM judge does; see ``PretrainedJudge``).
* Chain: ``10 * (w * similarity + (1 - w) * answer_correct)`` where similarity is the F1 of
  directed edges against the gold chain (or ``1 - normalised edit distance`` of the node
  sequences) and ``w = chain_weight``, multiplied by ``1 - inconsistency_penalty`` when the
  chain states the effect's state and the final answer contradicts it (see
  :func:`answer_chain_consistency`); a blank or unparseable chain scores 0. Written nodes
  are first mapped to the scene node they name ("the switch is on" -> switch); edges count
  with multiplicity, so repeating a chain or adding unknown nodes costs precision.

``LLMJudge`` wraps any text generator (a judge model you have) with the same rubric as a prompt
and reads back ``SCORE: x``. ``PretrainedJudge`` runs a causal LM (the packaged
SmolLM2-135M-Instruct) on the rubric and reads its next-token distribution over the digits
0-9 after ``SCORE:``: the expected digit, times 10/9, is the score (deterministic, never
unparseable).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from icml_cage.config import RuleConfig
from icml_cage.dataset import CageItem
from icml_cage.probes import normalise_node, parse_answer, parse_chain

MAX_SCORE = 10.0


class JudgeError(RuntimeError):
    """A judge could not score one item; the evaluation records it and goes on."""


def _key(node: str) -> str:
    return re.sub(r"\s+", "", normalise_node(node))


def edge_f1(predicted: Sequence[str], gold: Sequence[str]) -> float:
    """F1 of the directed consecutive edges of two node sequences (names normalised).

    Edges are counted with multiplicity, so a chain that repeats itself
    (``a -> b -> a -> b -> c``) is not scored like the chain it repeats."""
    p = Counter((_key(a), _key(b)) for a, b in zip(predicted, predicted[1:]))
    g = Counter((_key(a), _key(b)) for a, b in zip(gold, gold[1:]))
    if not p or not g:
        return 0.0
    hit = sum((p & g).values())
    if hit == 0:
        return 0.0
    precision, recall = hit / sum(p.values()), hit / sum(g.values())
    return 2 * precision * recall / (precision + recall)


def canonical_nodes(chain: Sequence[str], names: Sequence[str]) -> list[str]:
    """Map each written node to the scene node it names: ``"the switch is on"``,
    ``"switch (is on)"`` and ``"Switch"`` all become ``"switch"``; when several scene nodes are
    named, the first one (the subject) wins. A node naming none is kept as written (an unknown
    node, which matches no gold edge)."""
    keys = {_key(n): n for n in names}
    out = []
    for node in chain:
        if _key(node) in keys:
            out.append(keys[_key(node)])
            continue
        text = normalise_node(re.sub(r"\(.*?\)", " ", node))  # "(is lit)" states no node
        hits = []
        for n in names:
            m = re.search(rf"(?<![\w]){re.escape(normalise_node(n))}(?![\w])", text)
            if m:
                hits.append((m.start(), n))
        hits.sort()
        # the node named first is the subject: "the ramp carries the ball" -> ramp
        out.append(hits[0][1] if hits and (len(hits) == 1 or hits[0][0] < hits[1][0])
                   else node)
    return out


def edit_similarity(predicted: Sequence[str], gold: Sequence[str]) -> float:
    """``1 - Levenshtein(predicted, gold) / max(len)`` over node sequences."""
    a, b = [_key(x) for x in predicted], [_key(x) for x in gold]
    if not a and not b:
        return 1.0
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return 1.0 - prev[-1] / max(len(a), len(b))


def first_mention(text: str, node: str) -> int | None:
    """Where ``node`` is first named in ``text`` (whole words, case-insensitive), or None."""
    m = re.search(rf"(?<![\w]){re.escape(normalise_node(node))}(?![\w])", text.lower())
    return m.start() if m else None


def text_causal_content(text: str, gold: Sequence[str]) -> tuple[float, float]:
    """``(named, ordered)``: the share of gold-chain variables the text names, and the share of
    gold links ``a -> b`` whose cause ``a`` the text names before the effect ``b``."""
    pos = [first_mention(text, n) for n in gold]
    named = sum(p is not None for p in pos) / len(gold)
    links = list(zip(pos, pos[1:]))
    ordered = (sum(a is not None and b is not None and a < b for a, b in links) / len(links)
               if links else float(named == 1.0))
    return named, ordered


def stated_effect_state(chain: Sequence[str], item: CageItem) -> bool | None:
    """The state the chain's last step gives the queried effect (``"lamp (is lit)"`` -> True,
    ``"the lamp is dark"`` -> False), or None when the chain does not end at the effect or
    states no (or both) states of it."""
    nodes = {str(n["name"]): n for n in item.scm.get("nodes", [])}
    effect = nodes.get(item.effect)
    if not chain or effect is None:
        return None
    last = normalise_node(chain[-1])
    if canonical_nodes([chain[-1]], list(nodes)) != [item.effect]:
        return None
    on = normalise_node(str(effect["on"])) in last
    off = normalise_node(str(effect["off"])) in last
    return on if on != off else None


def answer_chain_consistency(response: str, item: CageItem) -> bool | None:
    """Whether the final answer agrees with the state the chain gives the effect. Every CAGE
    question asks "is it true that <effect> <on-state>?", so "yes" must go with a chain ending
    in the effect's on-state. None when the chain states no effect state or there is no
    answer: a chain of bare node names cannot be checked."""
    stated = stated_effect_state(parse_chain(response), item)
    answer = parse_answer(response)
    if stated is None or answer is None:
        return None
    return stated == (answer == "yes")


class RuleJudge(RuleConfig):
    """Deterministic rubric judge; see the module docstring. Its settings are
    :class:`~icml_cage.config.RuleConfig`'s (the config's ``judge.rule`` section), which it
    subclasses: ``RuleJudge(chain_metric="edit")``, or ``RuleJudge.from_config(config.judge.rule)``
    for a config section; validated once, by ``RuleConfig``."""

    @classmethod
    def from_config(cls, config: RuleConfig) -> RuleJudge:
        """The judge with ``config``'s rubric (every field, unchanged)."""
        return cls(**{f.name: getattr(config, f.name) for f in fields(RuleConfig)})

    def score_text(self, response: str, item: CageItem) -> float:
        response = response if isinstance(response, str) else ""
        correct = 4.0 if parse_answer(response) == item.answer else 0.0
        named, ordered = text_causal_content(response, item.gold_chain)
        return correct + 3.0 * named + 3.0 * ordered

    def chain_similarity(self, chain: Sequence[str], item: CageItem) -> float:
        if not chain:
            return 0.0
        names = [str(n["name"]) for n in item.scm.get("nodes", [])] or list(item.gold_chain)
        chain = canonical_nodes(chain, names)
        if self.chain_metric == "edge_f1":
            return edge_f1(chain, item.gold_chain)
        return edit_similarity(chain, item.gold_chain)

    def score_chain(self, response: str, item: CageItem) -> float:
        chain = parse_chain(response)
        if not chain:
            return 0.0
        correct = 1.0 if parse_answer(response) == item.answer else 0.0
        w = self.chain_weight
        score = MAX_SCORE * (w * self.chain_similarity(chain, item) + (1 - w) * correct)
        if answer_chain_consistency(response, item) is False:
            score *= 1.0 - self.inconsistency_penalty  # the answer contradicts the chain
        return score


RUBRIC = """You are grading a vision-language model's answer to a causal question about a picture.
Ground truth: the answer is "{answer}" and the causal chain is {chain}.
Question: {question}
Model response: {response}
{criteria}
Reply with one line: SCORE: <number from 0 to 10>."""
TEXT_CRITERIA = ("Score 0-4 for a correct answer, 0-3 for naming the right causal variables and "
                 "mechanism, 0-3 for coherence and fluency.")
CHAIN_CRITERIA = ("Score the written causal chain: 10 if it matches the ground-truth chain edge "
                  "for edge and the final answer is consistent with it; 0 if the chain is blank "
                  "or unparseable; partial credit for partially correct chains.")
_SCORE = re.compile(r"score\s*[:=]\s*(-?\d+(?:\.\d+)?)", re.I)


@dataclass
class LLMJudge:
    """Adapter for a judge model: ``generate(prompt) -> text``; raises :class:`JudgeError` when
    the reply holds no score in [0, 10]."""

    generate: Callable[[str], str]
    rubric: str = RUBRIC

    def _score(self, response: str, item: CageItem, criteria: str) -> float:
        prompt = self.rubric.format(answer=item.answer, chain=" -> ".join(item.gold_chain),
                                    question=item.question, response=response,
                                    criteria=criteria)
        try:
            reply = self.generate(prompt)
        except Exception as exc:
            raise JudgeError(f"judge failed on {item.id}: {type(exc).__name__}: {exc}") from exc
        m = _SCORE.search(reply or "")
        if not m or not 0.0 <= float(m.group(1)) <= MAX_SCORE:
            raise JudgeError(f"judge reply for {item.id} has no SCORE in [0, 10]: "
                             f"{(reply or '')[:80]!r}")
        return float(m.group(1))

    def score_text(self, response: str, item: CageItem) -> float:
        return self._score(response, item, TEXT_CRITERIA)

    def score_chain(self, response: str, item: CageItem) -> float:
        if not parse_chain(response):
            return 0.0  # the rubric: blank chains score 0, no judge call needed
        return self._score(response, item, CHAIN_CRITERIA)


JUDGE_PROMPT = """Grade a model's answer to a causal question about a picture.
Question: {question}
Correct answer: {answer}. Correct causal chain: {chain}.
Model response: {response}
{criteria}
Reply with one digit from 0 (worst) to 9 (best) as SCORE: <digit>."""


@dataclass
class PretrainedJudge:
    """A causal LM as judge: ``JUDGE_PROMPT`` in the tokenizer's chat template, followed by the
    assistant's ``SCORE: ``; the score is ``10/9`` times the expected digit under the model's
    next-token distribution restricted to ``0``-``9``. One forward pass per response, batched;
    blank chains score 0 (the rubric) without a call."""

    model: Any
    tokenizer: Any
    batch_size: int = 8
    prompt: str = JUDGE_PROMPT
    _digits: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        ids = [self.tokenizer(str(d), add_special_tokens=False)["input_ids"] for d in range(10)]
        if any(len(i) != 1 for i in ids):
            raise ValueError("PretrainedJudge needs a tokenizer with one token per digit")
        self._digits = [i[0] for i in ids]

    def _text(self, response: str, item: CageItem, criteria: str) -> str:
        body = self.prompt.format(question=item.question, answer=item.answer,
                                  chain=" -> ".join(item.gold_chain),
                                  response=(response or "(empty)")[:600], criteria=criteria)
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            body = tok.apply_chat_template([{"role": "user", "content": body}], tokenize=False,
                                           add_generation_prompt=True)
        return body + "SCORE: "

    def score_many(self, responses: Sequence[str], items: Sequence[CageItem],
                   probe: str) -> list[float]:
        """Scores of ``responses`` under ``probe`` ("text" or "chain"), in order."""
        import torch

        criteria = TEXT_CRITERIA if probe == "text" else CHAIN_CRITERIA
        out: list[float | None] = [None] * len(responses)
        todo = [i for i, r in enumerate(responses) if probe == "text" or parse_chain(r)]
        for i in range(len(responses)):
            if i not in todo:
                out[i] = 0.0
        tok = self.tokenizer
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        device = next(self.model.parameters()).device
        digits = torch.tensor(self._digits, device=device)
        values = torch.arange(10, dtype=torch.float32, device=device)
        for start in range(0, len(todo), self.batch_size):
            idx = todo[start:start + self.batch_size]
            enc = tok([self._text(responses[i], items[i], criteria) for i in idx],
                      return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            with torch.no_grad():
                logits = self.model(**enc).logits[:, -1, :].float()
            p = torch.softmax(logits[:, digits], dim=-1)
            for i, v in zip(idx, (p * values).sum(-1).tolist()):
                out[i] = v * MAX_SCORE / 9.0
        return [float(v) for v in out]  # type: ignore[arg-type]

    def score_text(self, response: str, item: CageItem) -> float:
        return self.score_many([response], [item], "text")[0]

    def score_chain(self, response: str, item: CageItem) -> float:
        return self.score_many([response], [item], "chain")[0]
