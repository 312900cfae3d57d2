"""Typed configs: TOML + --set overrides, dotted keys, one-line errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from icml.config import ConfigError, build_config, load_toml, option, schema_rows, validate


@dataclass
class Inner:
    beta: float = option(0.5, help="smoothing", gt=0, lt=1)
    solver: str = option("clarabel", help="backend", choices=("clarabel", "osqp"))


@dataclass
class Outer:
    n: int = option(10, help="size", ge=1)
    flag: bool = option(False, help="a switch")
    mode: Literal["fast", "exact"] = option("fast", help="mode")
    sizes: list[int] = option([1, 2], help="sizes", ge=1)
    model: str | None = option(None, help="model path")
    inner: Inner = option(default_factory=Inner, help="nested")
    extra: dict = field(default_factory=dict, metadata={"help": "unused"}, init=False)


def test_defaults_and_overrides_with_dotted_keys() -> None:
    cfg = build_config(Outer, {"n": 3}, ["inner.beta=0.25", "flag=yes", "sizes=4,5",
                                         "model=/tmp/m", "mode=exact"])
    assert cfg.n == 3 and cfg.flag is True and cfg.sizes == [4, 5] and cfg.mode == "exact"
    assert cfg.inner == Inner(beta=0.25) and cfg.model == "/tmp/m"
    assert build_config(Outer, {}, ["sizes=[7, 8]"]).sizes == [7, 8]
    assert build_config(Outer, {}, ["model=none"]).model is None


def test_overrides_win_over_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("n = 4\n[inner]\nsolver = 'osqp'\nbeta = 0.1\n")
    cfg = build_config(Outer, load_toml(path), ["inner.beta=0.2"])
    assert cfg.n == 4 and cfg.inner.solver == "osqp" and cfg.inner.beta == 0.2


@pytest.mark.parametrize(("overrides", "fragment"), [
    (["nn=3"], "unknown config key 'nn': did you mean 'n'?"),
    (["inner.bta=0.1"], "unknown config key 'inner.bta': did you mean 'inner.beta'?"),
    (["n=abc"], "config key 'n': got 'abc', expected int"),
    (["n=0"], "config key 'n': got 0, must be >= 1"),
    (["inner.beta=1.5"], "config key 'inner.beta': got 1.5, must be < 1"),
    (["inner.solver=osq"], "allowed: 'clarabel', 'osqp' (did you mean 'osqp'?)"),
    (["mode=slow"], "config key 'mode': got 'slow', expected 'fast' | 'exact'"),
    (["flag=maybe"], "expected bool (true or false)"),
    (["sizes=1,0"], "config key 'sizes': got 0, must be >= 1"),
    (["inner=3"], "config key 'inner' is a section"),
    (["novalue"], "expected key=value"),
])
def test_bad_input_is_one_line_naming_key_and_allowed(overrides: list[str], fragment: str) -> None:
    with pytest.raises(ConfigError) as exc:
        build_config(Outer, {}, overrides)
    assert fragment in str(exc.value)
    assert "\n" not in str(exc.value)


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("n = = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_toml(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_toml(tmp_path / "missing.toml")
    bad.write_text("n = 'x'")
    with pytest.raises(ConfigError, match="expected int"):
        build_config(Outer, load_toml(bad))


def test_required_key_and_validate() -> None:
    @dataclass
    class Req:
        path: str = option(help="where")

    with pytest.raises(ConfigError, match="'path' is required"):
        build_config(Req, {})
    assert validate(Outer(n=2)).n == 2
    with pytest.raises(ConfigError, match="must be >= 1"):
        validate(Outer(n=-1))


def test_schema_rows_describe_every_key() -> None:
    rows = {r["key"]: r for r in schema_rows(Outer)}
    assert set(rows) == {"n", "flag", "mode", "sizes", "model", "inner.beta", "inner.solver"}
    assert rows["n"]["allowed"] == ">= 1" and rows["n"]["default"] == 10
    assert rows["inner.solver"]["allowed"] == "one of 'clarabel', 'osqp'"
    assert rows["mode"]["type"] == "'fast' | 'exact'" and rows["model"]["type"] == "str | none"


def test_finite_options_refuse_inf_and_nan_from_the_cli_and_from_python() -> None:
    from icml.config import check_bounds

    @dataclass
    class Cfg:
        lr: float = option(0.1, help="learning rate", gt=0, finite=True)
        scale: float = option(1.0, help="unbounded above", gt=0)

        def __post_init__(self) -> None:
            check_bounds(self)

    for bad in ("inf", "nan", "-inf"):
        with pytest.raises(ConfigError, match="'lr'.*finite"):
            build_config(Cfg, {}, [f"lr={bad}"])
    assert build_config(Cfg, {}, ["scale=inf"]).scale == float("inf")  # gt=0 alone allows it
    with pytest.raises(ConfigError, match="'lr'.*finite"):
        Cfg(lr=float("inf"))
    with pytest.raises(ConfigError, match="'lr'.*> 0"):
        Cfg(lr=-1.0)
    assert "finite" in next(r for r in schema_rows(Cfg) if r["key"] == "lr")["allowed"]
