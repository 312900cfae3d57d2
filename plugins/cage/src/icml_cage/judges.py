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


CHECK_INTRO = "Answer each check with yes or no.\n"
#: Worked examples per kind of check (the judge model reads them before every check of that kind).
CHECK_SHOTS: dict[str, tuple[str, ...]] = {
    "answer": (
        'Text: "No. The switch is off, so the lamp stays dark." Does the text answer yes? '
        'Answer: no',
        'Text: "CHAIN: ball -> ramp -> bell ANSWER: yes" Does the text answer yes? Answer: yes',
        'Text: "Yes. Domino 1 pushes domino 2." Does the text answer yes? Answer: yes',
        'Text: "CHAIN: fuse -> wire -> lamp ANSWER: no" Does the text answer yes? Answer: no',
        'Text: "No, the bell stays silent." Does the text answer yes? Answer: no',
        'Text: "Yes, the bell rings." Does the text answer yes? Answer: yes',
    ),
    "part": (
        "Parts: switch, fuse, wire, lamp. Is the table one of the parts? Answer: no",
        "Parts: ball, ramp, gate, bell. Is the gate one of the parts? Answer: yes",
        "Parts: domino 1, domino 2, domino 3. Is the cloud one of the parts? Answer: no",
        "Parts: domino 1, domino 2, domino 3. Is domino 2 one of the parts? Answer: yes",
        "Parts: ball, ramp, gate, bell. Is the window one of the parts? Answer: no",
        "Parts: switch, fuse, wire, lamp. Is the switch one of the parts? Answer: yes",
        "Parts: domino 2, domino 3, domino 4. Is the carpet one of the parts? Answer: no",
        "Parts: fuse, wire, lamp. Is the lamp one of the parts? Answer: yes",
    ),
    "mention": (
        'Text: "No. The switch is off, so the lamp stays dark." Does the text mention the '
        'fuse? Answer: no',
        'Text: "Yes. The ball rolls down the ramp and rings the bell." Does the text mention '
        'the ramp? Answer: yes',
        'Text: "Yes. Domino 1 pushes domino 2." Does the text mention domino 2? Answer: yes',
        'Text: "Yes, the bell rings." Does the text mention the gate? Answer: no',
        'Text: "No. The fuse is blown, so no current reaches the wire." Does the text mention '
        'the wire? Answer: yes',
        'Text: "Yes. Domino 1 falls onto domino 2." Does the text mention domino 4? Answer: no',
    ),
}


def _the(node: str) -> str:
    """``"fuse"`` -> ``"the fuse"``; numbered parts keep their name (``"domino 3"``)."""
    return node if re.search(r"\d", node) else f"the {node}"


@dataclass
class CheckJudge:
    """A causal LM as judge, the rubric decomposed into yes/no checks with constrained output.

    Every check is one line after a fixed instruction with worked examples of its kind
    (``CHECK_SHOTS``, encoded once and cached): a context (``Parts: <the gold chain's nodes>.`` or
    ``Text: "<the response>"``, encoded once per response and cached) and a short question
    ending in ``Answer:``. A check's verdict is ``P(yes) = softmax(logit(' yes'),
    logit(' no'))[0]`` at the next token: no generation, never unparseable, deterministic.
    The checks and how they make the 0-10 score mirror the rule rubric (``RuleConfig``):

    * answer: "Does the text answer yes?" on the response; ``P(right)`` is that P(yes) when the
      gold answer is yes, else ``1 - P(yes)`` (the judge reads the response's answer, the gold
      decides which way is right).
    * Chain-Text Probe: for each node the response's chain writes (``probes.parse_chain``),
      "Is <node> one of the parts?" after the gold chain's parts; ``structure`` is the sum of
      these P(yes) over ``max(written nodes, gold nodes)``, so a chain too short or with wrong
      parts loses credit. ``score = 10 * (w * structure + (1 - w) * P(right))``,
      ``w = chain_weight``; a blank chain scores 0 without a call.
    * Text-Only Probe: ``4 * P(right)`` plus ``6 *`` the mean over the gold chain's nodes of
      "Does the text mention <node>?".

    Splitting a chain into nodes is parsing; every verdict is the model's. :meth:`yes_probs` is
    the one place the model is called (override it to test the decomposition)."""

    model: Any
    tokenizer: Any
    batch_size: int = 16
    chain_weight: float = 0.8
    intro: str = CHECK_INTRO
    shots: dict = field(default_factory=lambda: dict(CHECK_SHOTS))
    max_response_chars: int = 300
    _static: dict = field(default_factory=dict, init=False, repr=False)

    # -- the checks -------------------------------------------------------------------------
    def _text(self, response: str) -> str:
        body = " ".join((response or "").split())[:self.max_response_chars] or "(empty)"
        return f'Text: "{body}"'

    def groups(self, response: str, item: CageItem, probe: str
               ) -> list[tuple[str, str, list[str]]]:
        """The checks of one response: ``[(kind, context, [question, ...]), ...]``; none for a
        blank chain. The first group is the answer check."""
        text = self._text(response)
        answer = ("answer", text, [" Does the text answer yes? Answer:"])
        if probe == "text":
            return [answer, ("mention", text, [f" Does the text mention {_the(n)}? Answer:"
                                               for n in item.gold_chain])]
        chain = parse_chain(response)
        if not chain:
            return []
        parts = f"Parts: {', '.join(item.gold_chain)}."
        return [answer,
                ("part", parts, [f" Is {_the(n)} one of the parts? Answer:" for n in chain])]

    def combine(self, p: Sequence[float], item: CageItem, probe: str) -> float:
        """The 0-10 score from the checks' P(yes), in :meth:`groups` order."""
        if not p:
            return 0.0
        right = p[0] if item.answer == "yes" else 1.0 - p[0]
        if probe == "text":
            return 4.0 * right + 6.0 * sum(p[1:]) / max(len(p) - 1, 1)
        structure = sum(p[1:]) / max(len(p) - 1, len(item.gold_chain))
        w = self.chain_weight
        return MAX_SCORE * (w * structure + (1 - w) * right)

    def score_many(self, responses: Sequence[str], items: Sequence[CageItem],
                   probe: str) -> list[float]:
        """Scores of ``responses`` under ``probe`` ("text" or "chain"), in order."""
        groups = [self.groups(r, it, probe) for r, it in zip(responses, items)]
        flat = [(i, g, kind, ctx, qs) for i, gs in enumerate(groups)
                for g, (kind, ctx, qs) in enumerate(gs)]
        found: dict[tuple[int, int], list[float]] = {}
        for kind in dict.fromkeys(k for _, _, k, _, _ in flat):
            mine = [f for f in flat if f[2] == kind]
            probs = self.yes_probs([f[3] for f in mine], [f[4] for f in mine], kind)
            found.update({(f[0], f[1]): p for f, p in zip(mine, probs)})
        per: list[list[float]] = [[] for _ in responses]
        for i, g, _, _, _ in flat:
            per[i] += found[(i, g)]
        return [self.combine(p, it, probe) for p, it in zip(per, items)]

    def score_text(self, response: str, item: CageItem) -> float:
        return self.score_many([response], [item], "text")[0]

    def score_chain(self, response: str, item: CageItem) -> float:
        return self.score_many([response], [item], "chain")[0]

    # -- the model --------------------------------------------------------------------------
    def prefix(self, kind: str) -> str:
        """The fixed instruction and worked examples every check of ``kind`` is read after."""
        return self.intro + "".join(f"{line}\n" for line in self.shots[kind])

    def _answer_ids(self) -> tuple[list[int], int, int]:
        """Tokens every answer starts with (none for a word-level tokenizer, ``' '`` for a
        byte-level one) and the first tokens that tell ' yes' from ' no'."""
        tok = self.tokenizer
        yes = tok(" yes", add_special_tokens=False)["input_ids"]
        no = tok(" no", add_special_tokens=False)["input_ids"]
        k = 0
        while k < min(len(yes), len(no)) and yes[k] == no[k]:
            k += 1
        if k >= min(len(yes), len(no)):
            raise ValueError("CheckJudge: the tokenizer does not tell ' yes' from ' no'")
        return list(yes[:k]), yes[k], no[k]

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def yes_probs(self, contexts: Sequence[str], checks: Sequence[Sequence[str]],
                  kind: str) -> list[list[float]]:
        """P(yes) of each check after ``prefix(kind)`` and its context."""
        import copy
        import inspect

        import torch

        model = self.model
        device = next(model.parameters()).device
        lead, yes_id, no_id = self._answer_ids()
        # transformers >= 5.25 names the argument `cache`, earlier ones `past_key_values`
        kw = "cache" if "cache" in inspect.signature(model.forward).parameters else \
            "past_key_values"
        if kind not in self._static:  # the instruction and the examples: one pass, kept
            ids = torch.tensor([self._ids(self.prefix(kind))], device=device)
            with torch.no_grad():
                out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            self._static[kind] = (getattr(out, "cache", None) or out.past_key_values,
                                  ids.shape[1])
        static, n_static = self._static[kind]
        base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        head = model.get_output_embeddings().weight[[yes_id, no_id]]
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        result: list[list[float]] = []
        for start in range(0, len(contexts), self.batch_size):
            ctx = [self._ids(c) for c in contexts[start:start + self.batch_size]]
            chk = [[self._ids(q) + lead for q in qs]
                   for qs in checks[start:start + self.batch_size]]
            b, n_ctx = len(ctx), max(len(c) for c in ctx)
            cache = copy.deepcopy(static)
            cache.batch_repeat_interleave(b)
            ids = torch.full((b, n_ctx), pad, dtype=torch.long, device=device)
            mask = torch.zeros((b, n_static + n_ctx), dtype=torch.long, device=device)
            mask[:, :n_static] = 1
            for r, c in enumerate(ctx):
                ids[r, :len(c)] = torch.tensor(c, device=device)
                mask[r, n_static:n_static + len(c)] = 1
            pos = (n_static + torch.arange(n_ctx, device=device)).expand(b, -1)
            with torch.no_grad():
                model(input_ids=ids, attention_mask=mask, position_ids=pos,
                      use_cache=True, logits_to_keep=1, **{kw: cache})
            rows: list[list[float]] = [[] for _ in range(b)]
            for j in range(max(len(c) for c in chk)):
                suffix = [c[j] if j < len(c) else c[0] for c in chk]
                n_suf = max(len(s) for s in suffix)
                sids = torch.full((b, n_suf), pad, dtype=torch.long, device=device)
                smask = torch.zeros((b, n_suf), dtype=torch.long, device=device)
                spos = torch.zeros((b, n_suf), dtype=torch.long, device=device)
                for r, s in enumerate(suffix):
                    sids[r, :len(s)] = torch.tensor(s, device=device)
                    smask[r, :len(s)] = 1
                    spos[r] = n_static + len(ctx[r]) + torch.arange(n_suf, device=device)
                last = smask.sum(1) - 1
                with torch.no_grad():  # the LM head on the two answer tokens only
                    hidden = base(input_ids=sids, attention_mask=torch.cat([mask, smask], 1),
                                  position_ids=spos, use_cache=True,
                                  **{kw: cache}).last_hidden_state
                    pair = hidden[torch.arange(b, device=device), last] @ head.T
                p = torch.softmax(pair.float(), dim=-1)[:, 0].tolist()
                for r in range(b):
                    if j < len(chk[r]):
                        rows[r].append(float(p[r]))
                cache.crop(-n_suf)  # back to the context, for the next check
            result += rows
        return result
