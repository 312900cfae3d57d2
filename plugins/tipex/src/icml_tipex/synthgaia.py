"""SynthGAIA: a generated GAIA-like task suite with tools and exact answers.

A knowledge base of entities with integer attributes and a "sister city" relation; a task asks
for a signed sum of k attribute values, some of whose entities must first be found by search
(a dependent chain: search, then lookup). Level 1: 2 direct facts; level 2: 4-5 facts, 1 by
search; level 3: 8-10 facts, 3 by search. Tools ``lookup``, ``search`` and ``calc`` have a
deterministic latency on the loop clock."""

from __future__ import annotations

import ast
import asyncio
import functools
import operator
import random
from asyncio.futures import _set_result_unless_cancelled
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

ATTRS = ("population", "area", "elevation", "age", "rainfall")
LEVELS = (1, 2, 3)
_SYL = ("ar", "bel", "cor", "dun", "el", "fa", "gor", "hal", "ir", "jen", "kal", "lor", "mir",
        "nor", "ost", "pel", "quin", "ras", "sol", "tor", "ul", "var", "wen", "yor", "zel")


@dataclass(frozen=True)
class Fact:
    """One value the task needs: ``attr`` of ``entity``; if ``query`` is set, the entity is only
    reachable as the search result for that query (the sister city of ``anchor``)."""

    entity: str
    attr: str
    query: str | None = None
    anchor: str | None = None
    distractors: tuple[str, ...] = ()


@dataclass(frozen=True)
class Task:
    """A question with its exact answer, its facts and the signs of the sum."""

    task_id: str
    level: int
    question: str
    facts: tuple[Fact, ...]
    signs: tuple[int, ...]
    answer: str

    def expression(self, values: dict[int, str]) -> str:
        """The signed sum over the facts whose values are known (missing ones are left out)."""
        parts = []
        for i, s in enumerate(self.signs):
            if i in values:
                parts.append(("- " if s < 0 else "+ ") + str(values[i]))
        text = " ".join(parts) or "0"
        return text[2:] if text.startswith("+ ") else text


@dataclass
class KnowledgeBase:
    """Entities, their attribute values and the search index (query -> entity)."""

    entities: list[str]
    values: dict[tuple[str, str], int]
    sister: dict[str, str]
    index: dict[str, str] = field(default_factory=dict)

    @classmethod
    def generate(cls, n_entities: int = 200, seed: int = 0) -> KnowledgeBase:
        if n_entities < 20:
            raise ValueError(f"n_entities={n_entities}: the suite needs at least 20 entities")
        rng = random.Random(f"kb-{seed}")
        names: list[str] = []
        seen: set[str] = set()
        while len(names) < n_entities:
            name = "".join(rng.choice(_SYL) for _ in range(rng.randint(2, 3))).capitalize()
            if name not in seen:
                seen.add(name)
                names.append(name)
        values = {(e, a): rng.randint(10, 999) for e in names for a in ATTRS}
        perm = names[:]
        rng.shuffle(perm)
        sister = {names[i]: perm[i] for i in range(n_entities) if perm[i] != names[i]}
        kb = cls(names, values, sister)
        kb.index = {f"sister city of {a}": b for a, b in sister.items()}
        return kb


def _facts_for(level: int, rng: random.Random) -> tuple[int, int]:
    if level == 1:
        return 2, 0
    if level == 2:
        return rng.choice((4, 5)), 1
    if level == 3:
        return rng.choice((8, 9, 10)), 3
    raise ValueError(f"level={level} is not one of {LEVELS}")


def make_task(kb: KnowledgeBase, level: int, index: int, seed: int = 0) -> Task:
    """The ``index``-th task of ``level`` (deterministic in kb, level, index and seed)."""
    rng = random.Random(f"task-{seed}-{level}-{index}")
    k, n_search = _facts_for(level, rng)
    anchors = [a for a in kb.entities if a in kb.sister]
    facts: list[Fact] = []
    used: set[str] = set()
    for j in range(k):
        attr = rng.choice(ATTRS)
        if j < n_search:
            anchor = rng.choice(anchors)
            while anchor in used or kb.sister[anchor] in used:
                anchor = rng.choice(anchors)
            ent = kb.sister[anchor]
            others = [a for a in anchors if a not in (anchor, ent)]
            dis = tuple(rng.sample(others, 2))  # wrong anchors -> wrong search results
            facts.append(Fact(ent, attr, f"sister city of {anchor}", anchor, dis))
            used.update((anchor, ent))
        else:
            ent = rng.choice(kb.entities)
            while ent in used:
                ent = rng.choice(kb.entities)
            dis = tuple(rng.sample([e for e in kb.entities if e != ent], 2))
            facts.append(Fact(ent, attr, distractors=dis))
            used.add(ent)
    signs = tuple([1] + [rng.choice((1, -1)) for _ in range(k - 1)])
    total = sum(s * kb.values[(f.entity, f.attr)] for s, f in zip(signs, facts))
    terms = []
    for s, f in zip(signs, facts):
        what = (f"the {f.attr} of the {f.query}" if f.query else f"the {f.attr} of {f.entity}")
        terms.append(("minus " if s < 0 else "plus ") + what)
    question = "Compute " + " ".join(terms)[len("plus "):] + "."
    return Task(f"L{level}-{seed}-{index}", level, question, tuple(facts), signs, str(total))


class SynthGAIA:
    """The suite: a knowledge base, tasks per level and the tools over the knowledge base."""

    def __init__(self, n_entities: int = 200, seed: int = 0,
                 tool_latency: dict[str, float] | None = None) -> None:
        self.seed = seed
        self.kb = KnowledgeBase.generate(n_entities, seed)
        self.tool_latency = {"lookup": 0.5, "search": 0.3, "calc": 0.1}
        if tool_latency:
            unknown = set(tool_latency) - set(self.tool_latency)
            if unknown:
                raise ValueError(f"tool_latency has unknown tools {sorted(unknown)}; known: "
                                 f"{sorted(self.tool_latency)}")
            self.tool_latency.update(tool_latency)
        self._tasks: dict[str, Task] = {}

    def tasks(self, level: int, n: int, offset: int = 0) -> list[Task]:
        """``n`` tasks of ``level`` (1, 2 or 3)."""
        if level not in LEVELS:
            raise ValueError(f"level={level} is not one of {LEVELS}")
        out = [make_task(self.kb, level, offset + i, self.seed) for i in range(n)]
        self._tasks.update((t.task_id, t) for t in out)
        return out

    def task(self, task_id: str) -> Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise KeyError(f"task {task_id!r} was not made by this suite") from None

    def tools(self) -> dict[str, Callable[..., Awaitable[str]]]:
        """Async tools ``lookup(entity, attr)``, ``search(query)``, ``calc(expr)``."""
        kb, lat = self.kb, self.tool_latency

        # each tool inlines _sleep (the same future and timer, one coroutine fewer per call)
        async def lookup(entity: str = "", attr: str = "") -> str:
            dt = lat["lookup"]
            if dt > 0:
                loop = asyncio.get_running_loop()
                fut = loop.create_future()
                h = loop.call_later(dt, _set_result_unless_cancelled, fut, None)
                try:
                    await fut
                finally:
                    h.cancel()
            v = kb.values.get((entity.strip(), attr.strip().lower()))
            return "not found" if v is None else str(v)

        async def search(query: str = "") -> str:
            dt = lat["search"]
            if dt > 0:
                loop = asyncio.get_running_loop()
                fut = loop.create_future()
                h = loop.call_later(dt, _set_result_unless_cancelled, fut, None)
                try:
                    await fut
                finally:
                    h.cancel()
            return kb.index.get(query.strip(), "no result")

        async def calc(expr: str = "") -> str:
            await _sleep(lat["calc"])
            return _calc_cached(expr)

        return {"lookup": lookup, "search": search, "calc": calc}


async def _sleep(dt: float) -> None:  # asyncio.sleep(dt), one frame shallower (clock.sleep)
    if dt > 0:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        h = loop.call_later(dt, _set_result_unless_cancelled, fut, None)
        try:
            await fut
        finally:
            h.cancel()


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.USub: operator.neg, ast.UAdd: operator.pos}


@functools.lru_cache(maxsize=4096)  # replicas and reruns evaluate the same sums
def _calc_cached(expr: str) -> str:
    return safe_calc(expr)


def safe_calc(expr: str) -> str:
    """Evaluate +, -, *, / over numbers (no names, no calls); an error string otherwise."""
    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError("unsupported expression")
    try:
        v = ev(ast.parse(expr.strip(), mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, TypeError) as e:
        return f"error: {e}"
    return str(int(v)) if float(v).is_integer() else repr(float(v))
