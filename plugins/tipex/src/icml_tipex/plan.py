"""Plans: the planner's subtask DAG, parsed from model text and validated (cycles, unknown
subtasks or tools, size cap), with the DAG quantities the scheduling invariants use."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


class PlanError(ValueError):
    """An unusable plan; ``kind`` is one of parse, empty, duplicate_id, unknown_dep, cycle,
    unknown_tool, too_many."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


@dataclass(frozen=True)
class Subtask:
    """One node of the plan: its goal, the tool it expects (or None), its parents, and free
    ``meta`` fields a model may add (the scripted model records the facts it covers)."""

    id: str
    goal: str
    deps: tuple[str, ...] = ()
    tool: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "goal": self.goal, "deps": list(self.deps), "tool": self.tool,
                **dict(self.meta)}


@dataclass(frozen=True)
class Plan:
    """A validated DAG of subtasks in the planner's order (a topological order is not required)."""

    subtasks: tuple[Subtask, ...]

    def __post_init__(self) -> None:
        validate(self.subtasks)

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.subtasks]

    def children(self) -> dict[str, list[str]]:
        ch: dict[str, list[str]] = {s.id: [] for s in self.subtasks}
        for s in self.subtasks:
            for d in s.deps:
                ch[d].append(s.id)
        return ch

    def topological(self) -> list[str]:
        return _topo(self.subtasks)

    def critical_path(self, cost: Mapping[str, float]) -> float:
        """Weighted longest path (the sum of ``cost`` along the heaviest chain)."""
        finish: dict[str, float] = {}
        by_id = {s.id: s for s in self.subtasks}
        for v in self.topological():
            finish[v] = cost[v] + max((finish[u] for u in by_id[v].deps), default=0.0)
        return max(finish.values(), default=0.0)

    def width(self) -> int:
        """The largest antichain (Dilworth: n minus a maximum matching of the comparability
        graph), the most subtasks that can ever be ready at once."""
        ids = self.ids
        reach = _reachability(self.subtasks)
        match: dict[str, str] = {}

        def augment(u: str, seen: set[str]) -> bool:
            for v in reach[u]:
                if v in seen:
                    continue
                seen.add(v)
                if v not in match or augment(match[v], seen):
                    match[v] = u
                    return True
            return False

        return len(ids) - sum(augment(u, set()) for u in ids)


def _topo(subtasks: Iterable[Subtask]) -> list[str]:
    subs = list(subtasks)
    indeg = {s.id: len(s.deps) for s in subs}
    ch: dict[str, list[str]] = {s.id: [] for s in subs}
    for s in subs:
        for d in s.deps:
            ch[d].append(s.id)
    order = [s.id for s in subs if indeg[s.id] == 0]
    i = 0
    while i < len(order):
        for c in ch[order[i]]:
            indeg[c] -= 1
            if indeg[c] == 0:
                order.append(c)
        i += 1
    if len(order) < len(subs):
        stuck = sorted(v for v, d in indeg.items() if d > 0)
        raise PlanError("cycle", f"the plan has a dependency cycle among {stuck}")
    return order


def _reachability(subtasks: tuple[Subtask, ...]) -> dict[str, set[str]]:
    by_id = {s.id: s for s in subtasks}
    anc: dict[str, set[str]] = {}
    for v in _topo(subtasks):
        a: set[str] = set()
        for u in by_id[v].deps:
            a |= anc[u] | {u}
        anc[v] = a
    reach: dict[str, set[str]] = {v: set() for v in by_id}
    for v, a in anc.items():
        for u in a:
            reach[u].add(v)
    return reach


def validate(subtasks: Iterable[Subtask], tools: Iterable[str] | None = None,
             max_subtasks: int | None = None) -> None:
    """Raise :class:`PlanError` for an empty plan, duplicate ids, unknown parents, cycles,
    unknown tools (when ``tools`` is given) or more than ``max_subtasks`` subtasks."""
    subs = list(subtasks)
    if not subs:
        raise PlanError("empty", "the plan has no subtasks")
    ids = [s.id for s in subs]
    dup = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) < len(ids) else []
    if dup:
        raise PlanError("duplicate_id", f"subtask ids {dup} appear more than once")
    known = set(ids)
    for s in subs:
        bad = [d for d in s.deps if d not in known]
        if bad:
            raise PlanError("unknown_dep", f"subtask {s.id!r} depends on unknown subtasks {bad}")
    _topo(subs)
    if tools is not None:
        allowed = set(tools)
        for s in subs:
            if s.tool is not None and s.tool not in allowed:
                raise PlanError("unknown_tool", f"subtask {s.id!r} names tool {s.tool!r}; "
                                f"known tools: {sorted(allowed)}")
    if max_subtasks is not None and len(subs) > max_subtasks:
        raise PlanError("too_many", f"{len(subs)} subtasks exceed the granularity cap "
                        f"{max_subtasks}")


def parse_plan(text: str, tools: Iterable[str] | None = None,
               max_subtasks: int | None = None) -> Plan:
    """Parse a planner reply (``{"subtasks": [{"id", "goal", "deps", "tool", ...}]}``, the JSON
    may sit inside prose or a code fence) and validate it."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise PlanError("parse", "no JSON object in the planner reply")
    try:
        data = json.loads(text[start:end + 1])
        raw = data["subtasks"]
        if not isinstance(raw, list):
            raise TypeError("'subtasks' is not a list")
        subs = []
        for i, d in enumerate(raw):
            meta = {k: v for k, v in d.items() if k not in ("id", "goal", "deps", "tool")}
            tool = d.get("tool")
            subs.append(Subtask(str(d.get("id", f"s{i + 1}")), str(d.get("goal", "")),
                                tuple(str(x) for x in d.get("deps", []) or []),
                                None if tool in (None, "", "null", "none") else str(tool), meta))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise PlanError("parse", f"the planner reply is not a valid plan ({e})") from None
    validate(subs, tools, max_subtasks)
    plan = object.__new__(Plan)  # validated just above: skip Plan.__post_init__'s second pass
    object.__setattr__(plan, "subtasks", tuple(subs))
    return plan


def plan_json(plan: Plan | Iterable[Subtask]) -> str:
    subs = plan.subtasks if isinstance(plan, Plan) else tuple(plan)
    return json.dumps({"subtasks": [s.to_dict() for s in subs]})
