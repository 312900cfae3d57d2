"""The virtual clock, plan parsing and validation, and the DAG quantities."""

import asyncio
import itertools
import random
import time

import pytest
from icml_tipex.clock import VirtualEventLoop, now, run
from icml_tipex.plan import Plan, PlanError, Subtask, parse_plan, plan_json


def test_virtual_clock_jumps_idle_time_and_keeps_order() -> None:
    order = []

    async def sleeper(d: float) -> float:
        await asyncio.sleep(d)
        order.append(d)
        return now()

    async def main() -> list[float]:
        return list(await asyncio.gather(*(sleeper(d) for d in (300.0, 5.0, 3600.0, 0.25))))

    t = time.perf_counter()
    ends = run(main(), "virtual")
    assert time.perf_counter() - t < 2.0
    assert ends == [300.0, 5.0, 3600.0, 0.25]
    assert order == [0.25, 5.0, 300.0, 3600.0]


def test_virtual_timeouts_fire_on_virtual_time() -> None:
    async def main() -> float:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(42.0):
                await asyncio.Event().wait()
        return now()

    assert run(main(), "virtual") == pytest.approx(42.0)
    assert isinstance(asyncio.Runner(loop_factory=VirtualEventLoop).get_loop(), VirtualEventLoop)


def test_wall_clock_really_sleeps() -> None:
    async def main() -> float:
        t = now()
        await asyncio.sleep(0.05)
        return now() - t

    assert run(main(), "wall") >= 0.045
    with pytest.raises(ValueError, match="clock='moon'"):
        run(main(), "moon")  # type: ignore[arg-type]


def _plan(edges: dict[str, list[str]], tools: dict[str, str | None] | None = None) -> Plan:
    return Plan(tuple(Subtask(v, f"do {v}", tuple(d), (tools or {}).get(v))
                      for v, d in edges.items()))


def test_parse_plan_roundtrip_and_prose() -> None:
    p = _plan({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]})
    text = "Here is my plan:\n```json\n" + plan_json(p) + "\n```"
    q = parse_plan(text)
    assert q.ids == ["a", "b", "c", "d"] and q.subtasks[3].deps == ("b", "c")


@pytest.mark.parametrize("text, kind", [
    ('{"subtasks": [{"id": "a", "deps": ["b"]}, {"id": "b", "deps": ["a"]}]}', "cycle"),
    ('{"subtasks": [{"id": "a", "deps": ["a"]}]}', "cycle"),
    ('{"subtasks": [{"id": "a", "deps": ["zz"]}]}', "unknown_dep"),
    ('{"subtasks": [{"id": "a", "tool": "browser"}]}', "unknown_tool"),
    ('{"subtasks": [{"id": "a"}, {"id": "a"}]}', "duplicate_id"),
    ('{"subtasks": []}', "empty"),
    ("I would first look things up.", "parse"),
    ('{"steps": [1, 2]}', "parse"),
    ('{"subtasks": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}', "too_many"),
])
def test_bad_plans_are_rejected_with_their_kind(text: str, kind: str) -> None:
    with pytest.raises(PlanError) as e:
        parse_plan(text, tools={"lookup": None, "calc": None}, max_subtasks=2)
    assert e.value.kind == kind


def _random_dag(rng: random.Random, n: int) -> dict[str, list[str]]:
    return {f"v{i}": [f"v{j}" for j in range(i) if rng.random() < 0.3] for i in range(n)}


def _brute_width(edges: dict[str, list[str]]) -> int:
    anc: dict[str, set[str]] = {}
    for v, ds in edges.items():  # keys are in topological order
        anc[v] = set(ds).union(*(anc[d] for d in ds)) if ds else set()
    ids = list(edges)
    for k in range(len(ids), 0, -1):
        for sub in itertools.combinations(ids, k):
            if all(a not in anc[b] and b not in anc[a] for a, b in itertools.combinations(sub, 2)):
                return k
    return 0


def test_width_is_the_largest_antichain() -> None:
    assert _plan({"a": [], "b": ["a"], "c": ["b"]}).width() == 1
    assert _plan({"a": [], "b": [], "c": [], "d": ["a", "b", "c"]}).width() == 3
    rng = random.Random(0)
    for n in range(1, 9):
        for _ in range(5):
            e = _random_dag(rng, n)
            assert _plan(e).width() == _brute_width(e)


def test_critical_path_is_the_heaviest_chain() -> None:
    p = _plan({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]})
    assert p.critical_path({"a": 1, "b": 5, "c": 2, "d": 1}) == 7
