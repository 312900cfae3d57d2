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
is at least one character), so no reply is cut off.

``vocab="context"`` (the default) restricts the free fields to what the chat shows, never the
gold: a tool argument is a run of 1 to ``SPAN_WORDS`` consecutive words of the visible text
(the task's question, the subtask's goal, earlier subtasks' results, tool results), an
expression tool's argument (``calc``) a sum and difference of numbers shown there, an answer
(``ANSWER:``, ``FINAL ANSWER:``) one word or number shown there, and a plan's goal a run of
words of the question. ``vocab="free"``: 0.3.1's bounded free text. ``vocab="scoped"``
(0.3.3): the context vocabulary with two rules read from the task's text, never the gold: a
plan has one leaf subtask per item the question lists (``question_items``: the clauses the
question joins with "plus", "minus", "and" or commas, each leaf's goal that item, in order)
and one final subtask that combines them (deps on every leaf); and a worker's names and
phrases come from its own subtask (its goal, its parents' results, its tool results), the
task's question only when those show no name and no number (the bare agent's goal is the
question); a combining subtask's expression (``calc``) has each parent's result once, in the
plan's order, the model choosing each sign; no call is made twice in one chat; and the
synthesizer's answer is the result of the plan's final subtask (the one no other depends
on) when that is a number or a name of the chat. A worker whose subtask is the whole task (the
bare agent) walks the same items in one chat (``_item_walk``): a fetching call per item until
a number comes back, then ``calc`` of the values in order, then its result as the answer."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import regex

from icml_tipex.roles import role_of
from icml_tipex.synthgaia import ATTRS

SYNTHGAIA_TOOLS: Mapping[str, int] = {"lookup": 2, "search": 1, "calc": 1}  # name -> arity
_GOALS = (48, 32, 20, 12, 6, 3, 1)  # goal lengths tried, longest first
_FREE = (80, 48, 32, 20, 12, 6, 3, 1)  # free-text lengths tried (arguments, answers)


VOCABS = ("context", "free", "scoped")  # what the free fields may contain (module docstring)
EXPR_TOOLS = ("calc",)  # tools whose argument is an arithmetic expression
# the kind of each argument of SynthGAIA's tools (a function-calling schema; label-blind):
# "name" a capitalized word the chat shows, "phrase" a run of its words with a name in it,
# "span" any run, "expr" its numbers joined by + and -, a tuple: one of these words (those the
# chat shows, or all of them when it shows none)
SYNTHGAIA_ARGS: Mapping[str, tuple[Any, ...]] = {
    "lookup": ("name", ATTRS), "search": ("phrase",), "calc": ("expr",)}
SPAN_WORDS = 5  # longest run of visible words a tool argument or a plan goal may be
_WORD = re.compile(r"-?\d+(?:\.\d+)?|[A-Za-z][A-Za-z0-9'_-]*")
_NUM = re.compile(r"-?\d+(?:\.\d+)?$")
_SEGMENT = re.compile(r"[^;,.:\n()]+")  # runs never cross punctuation
_CALLED = re.compile(r"CALL ([A-Za-z_]\w*)\((.*)\)$")  # a constrained reply's call
# the connectives that separate the items a question lists ("A plus B minus C", "A, B and C")
_ITEM_SPLIT = re.compile(r"\s*,\s*(?:and\s+|plus\s+|minus\s+)?|\s+(?:plus|minus|and)\s+")
COMBINE_GOAL = "combine the results"  # the scoped plan's final subtask (the protocol's wording)


def question_items(question: str) -> list[str]:
    """The items a question lists: its text (without the final punctuation) split at "plus",
    "minus", "and" and commas; ``[question]`` when it lists one. Label-blind: it reads the
    question's wording only (the planner's input), never the task's facts or answer."""
    q = question.strip().rstrip(".?!").strip()
    items = [x.strip() for x in _ITEM_SPLIT.split(q) if x and x.strip()]
    return [x for x in items if '"' not in x and "\\" not in x] or [q]


class ContextVocab:
    """The words a reply may use, read from the chat's visible text (what a real model reads;
    the JSON payload, the tool documentation and the protocol's labels are left out):
    ``spans`` (runs of 1 to ``SPAN_WORDS`` words within a clause), ``words`` (single words and
    numbers), ``numbers``, ``names`` (capitalized words but the question's first), ``phrases``
    (runs with a name in them), ``answers`` (numbers and names) and ``question_spans`` (the
    runs of the task's question only)."""

    def __init__(self, segments: Sequence[str], question: str = "",
                 span_words: int = SPAN_WORDS) -> None:
        def spans_of(texts: Sequence[str]) -> list[str]:
            out: dict[str, None] = {}
            for text in texts:
                for seg in _SEGMENT.findall(text):
                    w = _WORD.findall(seg)
                    for i in range(len(w)):
                        for j in range(i + 1, min(len(w), i + span_words) + 1):
                            out[" ".join(w[i:j])] = None
            return list(out)

        self.spans = spans_of(segments)
        self.words = [s for s in self.spans if " " not in s]
        self.numbers = [s for s in self.words if _NUM.match(s)]
        first = _WORD.findall(question)[:1]  # the question's first word: a sentence start
        self.names = [s for s in self.words if s[0].isupper() and s not in first]
        named = set(self.names)
        self.phrases = [s for s in self.spans if any(w in named for w in s.split(" "))]
        self.answers = self.numbers + self.names  # what an answer may be
        self.question_spans = spans_of([question]) if question else []
        self.question_text = question
        self.parents: list[str] = []  # set by ``of(scope="subtask")`` on a combining subtask

    @classmethod
    def of(cls, messages: list[dict[str, str]], scope: str = "chat") -> ContextVocab:
        """The visible text of a protocol chat: each user line's content after its label
        (``Task:``, ``Subtask s1:``, ``Results of earlier subtasks:``, ``RESULT:``, a result's
        ``s1:``), without the ``Tools:`` line, the ``Use at most`` line and the JSON block.
        ``scope="subtask"``: a worker's chat without the ``Task:`` line (its own subtask's goal,
        parents' results and tool results), unless those show no name and no number."""
        if scope not in ("chat", "subtask"):
            raise ValueError(f"scope={scope!r}: choose chat or subtask")
        segs: list[str] = []
        task_segs: list[int] = []  # indices of the Task: line's segments
        parents: list[str] = []  # the parents' results, in the plan's order
        question = ""
        for m in messages:
            if m["role"] != "user":
                continue
            text = m["content"].split("```json", 1)[0]
            for line in text.split("\n"):
                line = line.strip()
                if not line or line.startswith(("Tools:", "Use at most", "Subtask results:",
                                                "Candidate answers:")):
                    continue
                if line.startswith("Task:"):
                    question = question or line[5:].strip()
                    task_segs.append(len(segs))
                if line.startswith("Results of earlier subtasks:"):
                    body = line.split(":", 1)[1]
                    segs += [p.split(":", 1)[-1] for p in body.split(";")]
                    parents += [p.split(":", 1)[-1].strip() for p in body.split(";")
                                if ":" in p]
                    continue
                # "Task: q", "Subtask s1: goal", "RESULT: x", "s1: x" -> the content
                head, sep, rest = line.partition(": ")
                segs.append(rest if sep and len(head.split()) <= 2 else line)
        keep = [s for s in segs if s.strip() and s.strip() != "none"]
        if scope == "subtask" and task_segs:
            own = [s for i, s in enumerate(segs) if i not in task_segs
                   and s.strip() and s.strip() != "none"]
            cv = cls(own, question)
            if len(parents) > 1 and all(_NUM.match(x) for x in parents):
                cv.parents = parents  # a combining subtask: one term per parent (scoped)
            if cv.names or cv.numbers:
                return cv
        return cls(keep, question)


class GrammarTooLong(ValueError):
    """No reply of this role fits ``max_tokens``."""


def _alt(words: Sequence[str]) -> str:
    return "(?:" + "|".join(re.escape(w) for w in words) + ")"


def planner_grammar(g: int, tools: Sequence[str], max_chars: int,
                    goals: Sequence[str] | None = None) -> str:
    """The planner's JSON: ``{"subtasks": [{"id": "s1", "goal": "...", "tool": "lookup",
    "deps": []}, ...]}``, 1 to ``g + 1`` subtasks, deps on earlier ones only; the goal length
    and the subtask count shrink until the longest plan has at most ``max_chars`` characters.
    ``goals``: the goal is one of these (runs of the question's words; the longest that fit
    are kept), else free text."""
    tl = max(len(t) for t in tools)
    goals = [x for x in (goals or ()) if '"' not in x and "\\" not in x]

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
            if goals:
                fit = [x for x in goals if len(x) <= goal]
                if fit:
                    return _planner_pattern(m, goal, tools, fit)
                continue
            return _planner_pattern(m, goal, tools)
    raise GrammarTooLong(f"no plan fits {max_chars} tokens: raise execution.max_tokens")


def planner_items_grammar(items: Sequence[str], g: int, tools: Sequence[str],
                          max_chars: int) -> str | None:
    """The scoped plan: one leaf subtask per listed item (goal: that item, ``deps: []``), then
    one subtask that combines them (goal ``COMBINE_GOAL``, deps on every leaf); the model picks
    each subtask's tool. None when the question lists fewer than two items, more than ``g``, or
    the plan does not fit ``max_chars`` (the caller falls back to the context grammar)."""
    k = len(items)
    if k < 2 or k > g:
        return None
    tl = max(len(t) for t in tools)
    parts, longest = [], len('{"subtasks": []}') + 2 * k
    for i, goal in enumerate(list(items) + [COMBINE_GOAL], start=1):
        deps = ", ".join(f'"s{j}"' for j in range(1, k + 1)) if i == k + 1 else ""
        parts.append(f'\\{{"id": "s{i}", "goal": "{re.escape(goal)}", "tool": "{_alt(tools)}", '
                     f'"deps": \\[{re.escape(deps)}\\]\\}}')
        longest += len(f'{{"id": "s{i}", "goal": "{goal}", "tool": "", "deps": [{deps}]}}') + tl
    if longest > max_chars:
        return None
    return '\\{"subtasks": \\[' + ", ".join(parts) + "\\]\\}"


def _planner_pattern(m: int, goal: int, tools: Sequence[str],
                     goals: Sequence[str] | None = None) -> str:
    gp = _alt(goals) if goals else f'[^"\\\\\\n]{{1,{goal}}}'

    def item(k: int) -> str:
        if k > 1:
            ids = _alt([f"s{j}" for j in range(1, k)])
            deps = f'(?:"{ids}"(?:, "{ids}"){{0,{k - 2}}})?'
        else:
            deps = ""
        return (f'\\{{"id": "s{k}", "goal": "{gp}", "tool": "{_alt(tools)}", '
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


TOOL_FIRST = ("named", "any", "off", "once", "first")  # the worker's first reply: _first_call


def worker_grammar(tools: Mapping[str, int], max_chars: int, *,
                   call_only: Sequence[str] | None = None, answer_only: bool = False,
                   vocab: ContextVocab | None = None,
                   arg_kinds: Mapping[str, Sequence[Any]] | None = None,
                   avoid: Sequence[tuple[str, Sequence[str]]] = ()) -> str:
    """``CALL tool(a)`` / ``CALL tool(a, b)`` (the tool's arity; no parentheses or newlines in
    arguments, no comma inside one) or ``ANSWER: text``. ``call_only``: the reply must call one
    of these tools (no ANSWER), e.g. a subtask's first step that names its tool. ``vocab``: an
    argument is drawn from the chat's words by its kind in ``arg_kinds`` (tool -> one kind per
    argument, see ``SYNTHGAIA_ARGS``; undeclared: ``expr`` for ``EXPR_TOOLS``, else ``span``),
    an answer is one of its numbers or names (see :class:`ContextVocab`), and a call in
    ``avoid`` (already made in this chat; the ``scoped`` vocabulary) is not admitted again;
    when a field has nothing to draw from, the reply stays free text. ``answer_only``: the
    reply is an ``ANSWER`` (no call)."""
    if answer_only:
        words = [x for x in vocab.answers if len("ANSWER: ") + len(x) <= max_chars] \
            if vocab is not None else []
        if words:
            return "ANSWER: " + _alt(words)
        return _fit(lambda n: (f"ANSWER: [^\\n]{{1,{n}}}", len("ANSWER: ") + n), max_chars,
                    "worker")
    allowed = dict(tools) if call_only is None else {t: tools[t] for t in call_only if t in tools}
    if not allowed:
        raise ValueError(f"call_only={list(call_only or ())}: none of them is a tool "
                         f"({sorted(tools)})")
    if vocab is not None:
        try:
            return _worker_context(allowed, max_chars, call_only is not None, vocab,
                                   SYNTHGAIA_ARGS if arg_kinds is None else arg_kinds, avoid)
        except GrammarTooLong:
            pass  # (free text below, or its own error)

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


def _arg_choices(kind: Any, vocab: ContextVocab) -> list[str]:
    if isinstance(kind, (tuple, list)):
        shown = set(vocab.words)
        return [w for w in kind if w in shown] or list(kind)
    return {"name": vocab.names, "phrase": vocab.phrases, "span": vocab.spans}[kind]


def _worker_context(allowed: Mapping[str, int], max_chars: int, call_only: bool,
                    vocab: ContextVocab, arg_kinds: Mapping[str, Sequence[Any]],
                    avoid: Sequence[tuple[str, Sequence[str]]] = ()) -> str:
    """The worker's grammar over the chat's words (see :func:`worker_grammar`); ``avoid``:
    calls (tool, args) already made in this chat, not admitted again (``expr`` tools
    excepted)."""
    calls, longest = [], 0
    for t, a in allowed.items():
        kinds = list(arg_kinds.get(t, ("expr",) if t in EXPR_TOOLS else ("span",) * a))
        kinds = (kinds + ["span"] * a)[:a]
        room = max_chars - len(f"CALL {t}()") - 2 * (a - 1)
        if kinds == ["expr"] and vocab.parents:  # each parent's result once, in order
            arg = " [+-] ".join(re.escape(x) for x in vocab.parents)
            n = len(" + ".join(vocab.parents))
            if n <= room:
                calls.append(re.escape(t) + "\\(" + arg + "\\)")
                longest = max(longest, len(f"CALL {t}()") + n)
            continue
        if kinds == ["expr"]:
            nums = [x for x in vocab.numbers if len(x) <= room]
            if not nums:
                continue
            w = max(len(x) for x in nums)
            k = min(len(nums) - 1, max(0, (room - w) // (w + 3)))  # further terms that fit
            arg = f"{_alt(nums)}(?: [+-] {_alt(nums)}){{0,{k}}}"
            calls.append(re.escape(t) + "\\(" + arg + "\\)")
            longest = max(longest, len(f"CALL {t}()") + w + k * (w + 3))
            continue
        choices = [[x for x in _arg_choices(k, vocab) if len(x) <= room // a] for k in kinds]
        done = {tuple(args) for tool, args in avoid if tool == t and len(args) == a}
        if done and a == 1:
            choices = [[x for x in choices[0] if (x,) not in done]]
        if not all(choices):
            continue
        if done and a == 2:  # per first argument, the second ones not yet called with it
            alts = [f"{re.escape(x)}, {_alt(ys)}" for x in choices[0]
                    if (ys := [y for y in choices[1] if (x, y) not in done])]
            if not alts:
                continue
            calls.append(re.escape(t) + "\\((?:" + "|".join(alts) + ")\\)")
        else:
            calls.append(re.escape(t) + "\\(" + ", ".join(_alt(c) for c in choices) + "\\)")
        longest = max(longest, len(f"CALL {t}()") + 2 * (a - 1)
                      + sum(max(len(x) for x in c) for c in choices))
    words = [x for x in vocab.answers if len("ANSWER: ") + len(x) <= max_chars]
    if not calls or (not call_only and not words):
        raise GrammarTooLong("nothing in the chat to draw the worker's fields from")
    pat = f"CALL (?:{'|'.join(calls)})"
    if not call_only:
        pat += f"|ANSWER: {_alt(words)}"
        longest = max(longest, len("ANSWER: ") + max(len(x) for x in words))
    assert longest <= max_chars
    return pat


def _first_call(messages: list[dict[str, str]], tools: Mapping[str, int],
                tool_first: str) -> list[str] | None | bool:
    """The tools a worker's reply must call (None: CALL or ANSWER; False: ANSWER only).
    ``named``: a subtask that names one of the tools (the plan's ``tool``) calls it first,
    before it may answer; ``any``: every subtask (the bare agent's too) calls some tool first;
    ``once``: a subtask that names its tool calls it first and then answers (one call per
    subtask, as the plan assigns it), any other calls some tool first; ``first``: every
    subtask calls some tool first (the worker picks it; the plan's tool is a hint in its
    prompt); one that the plan gave a tool answers once a tool returned a number (a value;
    after a name, e.g. a search's entity, it may call again), others (the bare agent) CALL or
    ANSWER; ``off``: never held."""
    if tool_first == "off":
        return None
    from icml_tipex.roles import payload_of

    named = (payload_of(messages).get("subtask") or {}).get("tool")
    named = named if named in tools else None
    called = any(m["role"] == "assistant" for m in messages)
    if tool_first == "once" and named is not None:
        return False if called else [named]
    if tool_first == "first" and named is not None:
        if not called:
            return list(tools)
        last = messages[-1]["content"] if messages[-1]["role"] == "user" else ""
        if _NUM.match(last.removeprefix("RESULT:").strip()):
            return False  # a value came back: the subtask answers
        return None
    if called:
        return None
    if tool_first in ("any", "once", "first"):
        return list(tools)
    return [named] if named is not None else None


def _item_walk(messages: list[dict[str, str]], tools: Mapping[str, int], chars: int,
               cv: ContextVocab, arg_kinds: Mapping[str, Sequence[Any]] | None,
               avoid: Sequence[tuple[str, Sequence[str]]]) -> str | None:
    """The scoped grammar of a worker whose subtask is the whole task (the bare agent): the
    same rules as a plan of the question's items, run by one agent in one growing chat. Item
    i (0-based) is current while i numbers came back from fetching calls: a call on item i's
    words (and a name the last result showed, e.g. a search's entity); after every item, a
    ``calc`` of the values in order (the model choosing each sign); after it, the answer is
    its result. None when the question lists fewer than two items (the scoped rules apply)."""
    items = question_items(cv.question_text)
    k = len(items)
    if k < 2:
        return None
    values: list[str] = []
    last, calc_result = "", None
    tool = None
    for m in messages[2:]:
        if m["role"] == "assistant":
            c = _CALLED.match(m["content"].strip())
            tool = c.group(1) if c else None
        elif m["content"].startswith("RESULT:"):
            last = m["content"].removeprefix("RESULT:").strip()
            if tool in EXPR_TOOLS:
                calc_result = last
            elif _NUM.match(last):
                values.append(last)
    if calc_result is not None:
        if len("ANSWER: ") + len(calc_result) > chars:
            return None
        return "ANSWER: " + _alt([calc_result])
    if len(values) >= k:  # every item has its value: combine them
        step = ContextVocab([], cv.question_text)
        step.parents = values[:k]
        return worker_grammar(tools, chars, call_only=list(EXPR_TOOLS), vocab=step,
                              arg_kinds=arg_kinds, avoid=avoid)
    segs = [items[len(values)]] + ([last] if last and not _NUM.match(last) else [])
    step = ContextVocab(segs, cv.question_text)
    fetch = [t for t in tools if t not in EXPR_TOOLS]
    return worker_grammar(tools, chars, call_only=fetch, vocab=step, arg_kinds=arg_kinds,
                          avoid=avoid)


def synth_grammar(max_chars: int, vocab: ContextVocab | None = None) -> str:
    """``FINAL ANSWER: text``; with ``vocab``, one of the chat's numbers or names (the subtask
    results, the question's names)."""
    if vocab is not None:
        words = [x for x in vocab.answers if len("FINAL ANSWER: ") + len(x) <= max_chars]
        if words:
            return "FINAL ANSWER: " + _alt(words)
    return _fit(lambda n: (f"FINAL ANSWER: [^\\n]{{1,{n}}}", len("FINAL ANSWER: ") + n),
                max_chars, "synthesizer")


def judge_grammar(n: int, max_chars: int) -> str:
    pat = "CHOICE: " + _alt([str(i) for i in range(1, n + 1)])
    if len("CHOICE: ") + len(str(n)) > max_chars:
        raise GrammarTooLong(f"no judge reply fits {max_chars} tokens")
    return pat


def grammar_for(messages: list[dict[str, str]], tools: Mapping[str, int],
                max_tokens: int, tool_first: str = "named", vocab: str = "context",
                arg_kinds: Mapping[str, Sequence[Any]] | None = None) -> str | None:
    """The reply grammar of this chat's role (None for a role without one). One token is
    kept for EOS; every other token is at least one character. ``tool_first`` (``named``, the
    default: the protocol's plan names each subtask's tool, and the paper's worker is the
    LLM that calls tools; ``any``; ``off``): whether a worker's first reply on a subtask must
    be a tool call (see :func:`_first_call`). ``vocab`` (``context``, the default, or
    ``free``): what the free fields may contain (the module docstring)."""
    from icml_tipex.roles import payload_of

    if tool_first not in TOOL_FIRST:
        raise ValueError(f"tool_first={tool_first!r}: choose one of {TOOL_FIRST}")
    if vocab not in VOCABS:
        raise ValueError(f"vocab={vocab!r}: choose one of {VOCABS}")

    role, chars = role_of(messages), max_tokens - 1
    cv = ContextVocab.of(messages, "subtask" if vocab == "scoped" else "chat") \
        if vocab != "free" and role in ("planner", "worker", "synthesizer") else None
    if role == "planner":
        g = int(payload_of(messages)["max_subtasks"])
        if vocab == "scoped" and cv is not None:
            pat = planner_items_grammar(question_items(cv.question_text), g, list(tools), chars)
            if pat is not None:
                return pat
        return planner_grammar(g, list(tools), chars, cv.question_spans if cv else None)
    if role == "worker":
        held = _first_call(messages, tools, tool_first)
        avoid: list[tuple[str, list[str]]] = []
        if vocab == "scoped":  # no call is made twice in one chat
            for m in messages:
                c = _CALLED.match(m["content"].strip()) if m["role"] == "assistant" else None
                if c is not None and c.group(1) in tools:
                    n = max(1, tools[c.group(1)])
                    avoid.append((c.group(1), [x.strip() for x in c.group(2).split(",", n - 1)]))
            sub = payload_of(messages).get("subtask") or {}
            if cv is not None and sub.get("goal") == cv.question_text:
                walk = _item_walk(messages, tools, chars, cv, arg_kinds, avoid)
                if walk is not None:
                    return walk
        return worker_grammar(tools, chars, call_only=held or None, answer_only=held is False,
                              vocab=cv, arg_kinds=arg_kinds, avoid=avoid)
    if role == "synthesizer":
        if vocab == "scoped" and cv is not None:  # the answer is the plan's final result
            final = str((payload_of(messages).get("results") or {}).get(
                payload_of(messages).get("final"), ""))
            if final and final in cv.answers and len("FINAL ANSWER: ") + len(final) <= chars:
                return "FINAL ANSWER: " + _alt([final])
        return synth_grammar(chars, cv)
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
        # the characters a reply can contain: those written in the pattern when it has no
        # negated class (every grammar of the context vocabulary), else all of the vocab's
        self.alphabet = ([c for c in vocab.single if c in pattern] if "[^" not in pattern
                         else list(vocab.single))
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
        return [c for c in self.alphabet if self._ok(c)]

    def forced(self, limit: int) -> str:
        """The characters the grammar admits as the only continuation from here (at most
        ``limit``; none once the reply is complete, where EOS is an option): a decoder feeds
        them in one forward pass instead of one pass per token (jump-forward decoding)."""
        out = ""
        while len(out) < limit and not self.complete():
            chars = []
            for c in self.alphabet:  # (stops at the second allowed character)
                if self._ok(c):
                    chars.append(c)
                    if len(chars) > 1:
                        break
            if len(chars) != 1:
                break
            out += chars[0]
            self.text += chars[0]
        self.text = self.text[:len(self.text) - len(out)]
        return out

    def finished(self) -> bool:
        """Complete, with nothing that may follow."""
        return self.complete() and not self._next_chars()

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
