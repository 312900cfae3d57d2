"""Constrained decoding for real models: each role's reply is held to the protocol's grammar
(the planner's JSON plan, the worker's ``CALL tool(args)`` / ``ANSWER:`` line, the
synthesizer's ``FINAL ANSWER:`` and the judge's ``CHOICE: k``) by a logits processor over the
tokenizer, so a reply always parses. A worker's first reply on a subtask that names a tool is
that tool's call (``tool_first``, default ``named``): it must look before it answers.

The grammar of a role is a regular expression (the ``regex`` package's partial matching says
whether a text can still be completed). At each step the processor keeps exactly one token:
the best-scoring (greedy) or a sampled (temperature > 0) token whose text keeps the reply
completable, EOS only once the reply is complete. Candidates are checked best first: the
model's top tokens, then the tokens whose first character the grammar allows next, then a
single character the grammar allows (every byte-level tokenizer has them), so a step costs a
few dozen regex checks at most.

Every plan the grammar admits is valid for ``parse_plan``: subtask ids are ``s1, s2, ...`` in
order, ``deps`` name earlier subtasks only (no cycle, no unknown parent), tools come from the
model's tool list, at most ``g + 1`` subtasks. Bounds on the free text (goal, arguments,
answer) are chosen so that the longest reply the grammar admits fits ``max_tokens`` (a token
is at least one character), so no reply is cut off."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import regex

from icml_tipex.roles import role_of

SYNTHGAIA_TOOLS: Mapping[str, int] = {"lookup": 2, "search": 1, "calc": 1}  # name -> arity
_GOALS = (48, 32, 20, 12, 6, 3, 1)  # goal lengths tried, longest first
_FREE = (80, 48, 32, 20, 12, 6, 3, 1)  # free-text lengths tried (arguments, answers)


class GrammarTooLong(ValueError):
    """No reply of this role fits ``max_tokens``."""


def _alt(words: Sequence[str]) -> str:
    return "(?:" + "|".join(re.escape(w) for w in words) + ")"


def planner_grammar(g: int, tools: Sequence[str], max_chars: int) -> str:
    """The planner's JSON: ``{"subtasks": [{"id": "s1", "goal": "...", "tool": "lookup",
    "deps": []}, ...]}``, 1 to ``g + 1`` subtasks, deps on earlier ones only; the goal length
    and the subtask count shrink until the longest plan has at most ``max_chars`` characters."""
    tl = max(len(t) for t in tools)

    def longest(m: int, goal: int) -> int:
        n = len('{"subtasks": [') + 2 + 2 * (m - 1)
        for k in range(1, m + 1):
            dep = max(len(f'"s{j}"') for j in range(1, k)) if k > 1 else 0
            deps = (k - 1) * dep + 2 * max(0, k - 2)
            n += (len(f'{{"id": "s{k}", "goal": "') + goal + len('", "tool": "') + tl
                  + len('", "deps": [') + deps + len("]}"))
        return n

    # all g + 1 subtasks with a goal of 12 characters or more first; then shorter goals, then
    # fewer subtasks
    tries = [(g + 1, goal) for goal in _GOALS if goal >= 12]
    tries += [(m, goal) for goal in _GOALS for m in range(g + 1, 0, -1)]
    for m, goal in tries:
        if longest(m, goal) <= max_chars:
            return _planner_pattern(m, goal, tools)
    raise GrammarTooLong(f"no plan fits {max_chars} tokens: raise execution.max_tokens")


def _planner_pattern(m: int, goal: int, tools: Sequence[str]) -> str:
    def item(k: int) -> str:
        if k > 1:
            ids = _alt([f"s{j}" for j in range(1, k)])
            deps = f'(?:"{ids}"(?:, "{ids}"){{0,{k - 2}}})?'
        else:
            deps = ""
        return (f'\\{{"id": "s{k}", "goal": "[^"\\\\\\n]{{1,{goal}}}", "tool": "{_alt(tools)}", '
                f'"deps": \\[{deps}\\]\\}}')

    body = ""
    for k in range(m, 0, -1):  # item 1 (, item 2 (, item 3 ...)?)?
        body = item(k) + (f"(?:, {body})?" if body else "")
    return '\\{"subtasks": \\[' + body + "\\]\\}"


def _fit(make: Any, max_chars: int, what: str) -> str:
    for n in _FREE:
        pat, longest = make(n)
        if longest <= max_chars:
            return pat
    raise GrammarTooLong(f"no {what} reply fits {max_chars} tokens: raise "
                         "execution.max_tokens")


TOOL_FIRST = ("named", "any", "off")  # the worker's first reply: see grammar_for


def worker_grammar(tools: Mapping[str, int], max_chars: int, *,
                   call_only: Sequence[str] | None = None) -> str:
    """``CALL tool(a)`` / ``CALL tool(a, b)`` (the tool's arity; no parentheses or newlines in
    arguments, no comma inside one) or ``ANSWER: text``. ``call_only``: the reply must call one
    of these tools (no ANSWER), e.g. a subtask's first step that names its tool."""
    allowed = dict(tools) if call_only is None else {t: tools[t] for t in call_only if t in tools}
    if not allowed:
        raise ValueError(f"call_only={list(call_only or ())}: none of them is a tool "
                         f"({sorted(tools)})")

    def make(n: int) -> tuple[str, int]:
        arg = f"[^(),\\n]{{1,{n}}}"
        calls = [re.escape(t) + "\\(" + ", ".join([arg] * a) + "\\)"
                 for t, a in allowed.items()]
        longest_call = max(len(f"CALL {t}()") + a * n + 2 * (a - 1) for t, a in allowed.items())
        if call_only is not None:
            return f"CALL (?:{'|'.join(calls)})", longest_call
        pat = f"CALL (?:{'|'.join(calls)})|ANSWER: [^\\n]{{1,{n}}}"
        return pat, max(longest_call, len("ANSWER: ") + n)
    return _fit(make, max_chars, "worker")


def _first_call(messages: list[dict[str, str]], tools: Mapping[str, int],
                tool_first: str) -> list[str] | None:
    """The tools a worker's reply must call (None: CALL or ANSWER). Only the first reply on a
    subtask is held (no assistant turn yet): ``named``, a subtask that names one of the tools
    (the plan's ``tool``) calls it before it may answer; ``any``, every subtask (the bare
    agent's too) calls some tool first; ``off``, never."""
    if tool_first == "off" or any(m["role"] == "assistant" for m in messages):
        return None
    if tool_first == "any":
        return list(tools)
    from icml_tipex.roles import payload_of

    named = (payload_of(messages).get("subtask") or {}).get("tool")
    return [named] if named in tools else None


def synth_grammar(max_chars: int) -> str:
    return _fit(lambda n: (f"FINAL ANSWER: [^\\n]{{1,{n}}}", len("FINAL ANSWER: ") + n),
                max_chars, "synthesizer")


def judge_grammar(n: int, max_chars: int) -> str:
    pat = "CHOICE: " + _alt([str(i) for i in range(1, n + 1)])
    if len("CHOICE: ") + len(str(n)) > max_chars:
        raise GrammarTooLong(f"no judge reply fits {max_chars} tokens")
    return pat


def grammar_for(messages: list[dict[str, str]], tools: Mapping[str, int],
                max_tokens: int, tool_first: str = "named") -> str | None:
    """The reply grammar of this chat's role (None for a role without one). One token is
    kept for EOS; every other token is at least one character. ``tool_first`` (``named``, the
    default: the protocol's plan names each subtask's tool, and the paper's worker is the
    LLM that calls tools; ``any``; ``off``): whether a worker's first reply on a subtask must
    be a tool call (see :func:`_first_call`)."""
    from icml_tipex.roles import payload_of

    if tool_first not in TOOL_FIRST:
        raise ValueError(f"tool_first={tool_first!r}: choose one of {TOOL_FIRST}")

    role, chars = role_of(messages), max_tokens - 1
    if role == "planner":
        g = int(payload_of(messages)["max_subtasks"])
        return planner_grammar(g, list(tools), chars)
    if role == "worker":
        return worker_grammar(tools, chars, call_only=_first_call(messages, tools, tool_first))
    if role == "synthesizer":
        return synth_grammar(chars)
    if role == "judge":
        return judge_grammar(len(payload_of(messages)["candidates"]), chars)
    return None


class Vocab:
    """What the processor needs from a tokenizer: every token's text (tokens whose text is not
    plain printable ASCII are never chosen, so byte pieces of other characters never start),
    the tokens by first character, the single-character tokens, and EOS."""

    def __init__(self, tokenizer: Any) -> None:
        n = len(tokenizer)
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        self.pieces: list[str | None] = []
        self.by_first: dict[str, list[int]] = {}
        self.single: dict[str, int] = {}
        for i in range(n):
            s = None if i in special else tokenizer.decode([i])
            if not s or not all(" " <= c <= "~" or c == "\n" for c in s):
                s = None
            self.pieces.append(s)
            if s:
                self.by_first.setdefault(s[0], []).append(i)
                if len(s) == 1 and s not in self.single:
                    self.single[s] = i
        self.eos = tokenizer.eos_token_id
        self.n = n


_VOCABS: dict[int, Vocab] = {}


def vocab_of(tokenizer: Any) -> Vocab:
    v = _VOCABS.get(id(tokenizer))
    if v is None:
        v = _VOCABS[id(tokenizer)] = Vocab(tokenizer)
    return v


class GrammarProcessor:
    """A ``transformers`` logits processor (batch of one) that keeps, per step, one token that
    keeps the reply inside ``pattern``: greedy (the best such token) or, with ``generator``
    and ``temperature``, sampled from the model's distribution over such tokens (rejection
    sampling, then the best one if 64 draws all fail)."""

    def __init__(self, pattern: str, vocab: Vocab, prompt_len: int, *, temperature: float = 0.0,
                 generator: Any = None, top_k: int = 64) -> None:
        self.rx = regex.compile(pattern, regex.DOTALL)
        self.v, self.n0, self.temperature, self.gen = vocab, prompt_len, temperature, generator
        self.top_k = top_k
        self.text = ""
        self.seen = 0
        self.checks = 0  # regex checks so far (cost)
        self.fallbacks = 0  # steps that needed a single character

    def _ok(self, s: str) -> bool:
        self.checks += 1
        return self.rx.fullmatch(self.text + s, partial=True) is not None

    def complete(self) -> bool:
        return self.rx.fullmatch(self.text) is not None

    def _next_chars(self) -> list[str]:
        return [c for c in self.v.single if self._ok(c)]

    def choose(self, scores: Any) -> int:
        """The token kept at this step, from this step's scores (1-D)."""
        import torch

        v, eos = self.v, self.v.eos
        done = self.complete()
        if self.temperature > 0 and self.gen is not None:
            probs = torch.softmax(scores.float() / self.temperature, -1)
            for _ in range(64):
                t = int(torch.multinomial(probs, 1, generator=self.gen))
                if t == eos and done:
                    return t
                s = v.pieces[t] if t < v.n else None
                if s and self._ok(s):
                    return t
        k = min(self.top_k, scores.shape[-1])
        for t in torch.topk(scores, k).indices.tolist():
            if t == eos and done:
                return t
            s = v.pieces[t] if t < v.n else None
            if s and self._ok(s):
                return t
        chars = self._next_chars()
        if not chars:  # nothing can follow: the reply is complete
            if eos is None:
                raise RuntimeError("the reply is complete but the tokenizer has no EOS")
            return eos
        cands = [t for c in chars for t in v.by_first.get(c, ())]
        if done and eos is not None:
            cands.append(eos)
        idx = torch.tensor(cands, device=scores.device)
        sub = scores[idx]
        for j in torch.topk(sub, min(self.top_k, len(cands))).indices.tolist():
            t = cands[j]
            if t == eos:
                return t
            if self._ok(v.pieces[t]):  # type: ignore[arg-type]
                return t
        self.fallbacks += 1
        best = max(chars, key=lambda c: float(scores[v.single[c]]))
        return v.single[best]

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if input_ids.shape[0] != 1:
            raise ValueError("GrammarProcessor decodes one sequence at a time")
        new = input_ids[0, self.n0 + self.seen:].tolist()
        for t in new:
            if t != self.v.eos:
                self.text += self.v.pieces[t] or ""
        self.seen += len(new)
        t = self.choose(scores[0])
        out = torch.full_like(scores, float("-inf"))
        out[0, t] = 0.0
        return out
