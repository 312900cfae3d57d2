"""Property-based tests (hypothesis): result serialisation round-trips any floats (finite or
not), nested lists and unicode; the config parser round-trips every value it prints, and every
string it refuses is refused with a one-line :class:`ConfigError`."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import icml  # noqa: E402
from icml.config import ConfigError, build_config  # noqa: E402
from icml.jsonio import FLOAT_KEY, dumps, loads  # noqa: E402
from icml.types import RunResult, Table  # noqa: E402

settings.register_profile("icml", max_examples=150, deadline=None)
settings.load_profile("icml")

scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
           | st.text())
keys = st.text() | st.just(FLOAT_KEY)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(keys, inner, max_size=4), max_leaves=20).filter(
    lambda v: FLOAT_KEY + "\": \"" not in json.dumps(v))  # the reserved form itself


def same(a: object, b: object) -> bool:
    """Equality where nan equals nan (and int/float kinds must agree)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


@given(values)
def test_json_round_trip(value: object) -> None:
    text = dumps(value)
    json.loads(text, parse_constant=_no_constants)  # standard JSON only
    assert same(loads(text), value)


def _no_constants(name: str) -> None:
    raise AssertionError(f"non-standard JSON token {name}")


@given(st.dictionaries(st.text(min_size=1), st.floats(allow_nan=True), max_size=5),
       st.lists(st.lists(scalars, min_size=2, max_size=2), max_size=4), st.text(),
       st.dictionaries(keys, values, max_size=3))
def test_run_result_round_trip(metrics, rows, notes, config) -> None:
    res = RunResult(metrics=metrics, tables=[Table("t ✓", ["a", "b"], rows)], notes=notes,
                    config=config)
    assert not res.problems()
    back = RunResult.from_json(res.to_json())
    assert same(back.to_dict(), res.to_dict())
    assert isinstance(res.to_markdown(), str)


def test_reserved_key_is_a_one_line_error() -> None:
    with pytest.raises(ValueError, match="reserved") as exc:
        dumps({"x": {FLOAT_KEY: "nan"}})
    assert "\n" not in str(exc.value)
    assert RunResult(metrics={FLOAT_KEY: 1.0}).problems() == []  # only a one-key dict is


def test_lenient_writer_never_raises() -> None:
    res = RunResult(metrics={"m": 1.0}, tables=[Table("t", ["a"], [[object()]])])
    assert any("not JSON serialisable" in p for p in res.problems())
    assert "object object" in res.to_json(strict=False)


@dataclass
class Cfg:
    i: int = icml.option(0, help="an int")
    f: float = icml.option(0.0, help="a float")
    s: str = icml.option("", help="a string")
    b: bool = icml.option(False, help="a bool")
    li: list[int] = icml.option([], help="ints")
    lf: list[float] = icml.option([], help="floats")
    ls: list[str] = icml.option([], help="words")
    o: int | None = icml.option(None, help="optional int")


words = st.text(alphabet=st.characters(categories=("L", "N")), min_size=1, max_size=8)


@given(st.integers(), st.floats(allow_nan=True), st.text(), st.booleans(),
       st.lists(st.integers(), max_size=4), st.lists(st.floats(allow_nan=True), max_size=4),
       st.lists(words, max_size=4), st.none() | st.integers())
def test_config_round_trips_printed_values(i, f, s, b, li, lf, ls, o) -> None:
    """Every value, printed as a user would type it after --set, parses back to itself."""
    sets = [f"i={i}", f"f={f!r}", f"s={s}", f"b={str(b).lower()}",
            f"li={json.dumps(li)}", "lf=[" + ", ".join(map(repr, lf)) + "]",
            "ls=[" + ", ".join(ls) + "]", f"o={'none' if o is None else o}"]
    cfg = build_config(Cfg, {}, sets)
    assert (cfg.i, cfg.b, cfg.li, cfg.o) == (i, b, li, o)
    assert cfg.s == s.strip()
    assert same(cfg.f, f) and same(cfg.lf, lf)
    assert cfg.ls == ls


@given(st.sampled_from(["i", "f", "b", "li", "lf", "o"]), st.text())
def test_config_refusals_are_one_line(key: str, text: str) -> None:
    try:
        build_config(Cfg, {}, [f"{key}={text}"])
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message and key in message
