"""Typed per-plugin configs: dataclasses whose fields carry defaults, help text and bounds.

A plugin writes::

    @dataclass
    class SolveConfig:
        n: int = option(50, help="problem size", ge=1)
        solver: str = option("clarabel", help="QP backend", choices=("clarabel", "osqp"))
        penalty: PenaltyConfig = option(default_factory=PenaltyConfig, help="penalty settings")

and the core builds an instance from a TOML file plus ``--set key=value`` overrides (dotted keys
reach nested dataclasses). Every error is a :class:`ConfigError` with one line naming the key, the
bad value and what is allowed. Supported field types: bool, int, float, str, ``X | None``,
``Literal[...]``, ``list[X]``/``tuple[X, ...]`` of those, and nested config dataclasses.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

C = TypeVar("C")
_MISSING = dataclasses.MISSING


class ConfigError(ValueError):
    """A config key, value or file is not allowed. ``str(exc)`` is a one-line explanation."""


def option(default: Any = _MISSING, *, help: str, default_factory: Any = _MISSING,
           ge: float | None = None, gt: float | None = None, le: float | None = None,
           lt: float | None = None, choices: tuple[Any, ...] | None = None,
           finite: bool = False) -> Any:
    """A config field with help text and optional bounds (``ge``/``gt``/``le``/``lt``) or
    allowed ``choices``. ``finite=True`` also refuses ``inf`` and ``nan`` (``gt=0`` alone lets
    ``inf`` through; NaN fails every bound already). Use it as a dataclass field default.

    The bounds are checked by :func:`build_config` (the CLI, ``icml.run``) and
    :func:`check_bounds`, which a config's ``__post_init__`` may call so that Python callers get
    the same one-line errors."""
    meta = {"help": help, "ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices,
            "finite": finite}
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def fields_of(schema: type) -> list[tuple[dataclasses.Field, Any]]:
    """The dataclass fields of ``schema`` with their resolved type hints."""
    hints = typing.get_type_hints(schema)
    return [(f, hints[f.name]) for f in dataclasses.fields(schema) if f.init]


def describe_type(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(describe_type(a) for a in get_args(tp))
    if origin in (list, tuple):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        return f"list[{describe_type(args[0]) if args else 'any'}]"
    if tp is type(None):
        return "none"
    return getattr(tp, "__name__", str(tp))


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not _MISSING:
        return f.default
    if f.default_factory is not _MISSING:
        return f.default_factory()
    return _MISSING


def schema_rows(schema: type, prefix: str = "") -> list[dict[str, Any]]:
    """One row per (nested) key: ``key``, ``type``, ``default``, ``help``, ``allowed``."""
    rows = []
    for f, tp in fields_of(schema):
        key = prefix + f.name
        if _is_config(tp):
            rows += schema_rows(tp, key + ".")
            continue
        meta = f.metadata
        allowed = []
        if meta.get("choices"):
            allowed.append("one of " + ", ".join(map(repr, meta["choices"])))
        for k, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if meta.get(k) is not None:
                allowed.append(f"{sym} {meta[k]}")
        if meta.get("finite"):
            allowed.append("finite")
        default = _default_of(f)
        rows.append({"key": key, "type": describe_type(tp),
                     "default": None if default is _MISSING else default,
                     "required": default is _MISSING,
                     "help": meta.get("help", ""), "allowed": ", ".join(allowed)})
    return rows


def _is_config(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` -> ``{"a": {"b": "1"}, "c": "x"}`` (values stay strings)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {pair!r}: expected key=value, e.g. --set seed=1")
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {key}: {part!r} is set both as a value and a section")
            node = nxt
        node[parts[-1]] = _FromString(value.strip())
    return out


class _FromString(str):
    """A value typed on the command line; converted according to the field's type."""


def load_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config file {str(p)!r} is a folder: pass a TOML file (--config)")
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist: pass an existing TOML file")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        msg = " ".join(str(exc).split())
        raise ConfigError(f"config file {str(p)!r} is not valid TOML: {msg}") from None
    except OSError as exc:
        raise ConfigError(f"config file {str(p)!r} cannot be read: {exc.strerror or exc}") \
            from None


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def build_config(schema: type[C], data: dict[str, Any] | None = None,
                 overrides: list[str] | None = None, *, prefix: str = "") -> C:
    """Build and validate an instance of ``schema`` from ``data`` (e.g. a parsed TOML file)
    updated with ``--set`` style ``overrides``. Raises :class:`ConfigError`."""
    merged = _merge(data or {}, parse_overrides(overrides or []))
    return _build(schema, merged, prefix)


def _build(schema: type[C], data: dict[str, Any], prefix: str) -> C:
    flds = {f.name: (f, tp) for f, tp in fields_of(schema)}
    for key in data:
        if key not in flds:
            close = difflib.get_close_matches(key, list(flds), n=1)
            hint = f"did you mean {prefix + close[0]!r}? " if close else ""
            raise ConfigError(f"unknown config key {prefix + key!r}: {hint}allowed keys: "
                              f"{', '.join(prefix + k for k in flds)}")
    kwargs = {}
    for name, (f, tp) in flds.items():
        key = prefix + name
        if name in data:
            if _is_config(tp):
                if not isinstance(data[name], dict):
                    raise ConfigError(f"config key {key!r} is a section: set its keys, "
                                      f"e.g. {key}.<key>=...")
                kwargs[name] = _build(tp, data[name], key + ".")
            else:
                kwargs[name] = _check(key, _convert(key, data[name], tp), f.metadata)
        elif _default_of(f) is _MISSING:
            raise ConfigError(f"config key {key!r} is required: set it with --set {key}=...")
    try:
        return schema(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:  # a dataclass's own __post_init__ validation
        raise ConfigError(f"invalid config: {exc}") from None


def check_bounds(config: Any, prefix: str = "") -> None:
    """Check the ``option`` bounds, ``finite`` and ``choices`` of a config instance's own
    fields (not nested sections: they check themselves), raising one-line
    :class:`ConfigError`s; call it from ``__post_init__``."""
    for f in dataclasses.fields(config):
        if f.metadata:
            _check(prefix + f.name, getattr(config, f.name), f.metadata)


def validate(config: Any) -> Any:
    """Re-check a config instance built in Python (types, bounds, choices, nested sections)."""
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise ConfigError(f"{config!r} is not a config dataclass instance")
    return build_config(type(config), to_dict(config))


def to_dict(config: Any) -> dict[str, Any]:
    """A config instance's settable fields (nested sections included) as plain values."""
    out = {}
    for f in dataclasses.fields(config):
        if not f.init:
            continue
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = to_dict(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _convert(key: str, value: Any, tp: Any) -> Any:
    origin = get_origin(tp)
    bad = f"config key {key!r}: got {str(value)!r}, expected {describe_type(tp)}"
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if type(None) in args and (value is None or
                                   (isinstance(value, _FromString) and value.lower() in
                                    ("none", "null", ""))):
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(key, value, arg)
            except ConfigError:
                continue
        raise ConfigError(bad)
    if origin is Literal:
        for allowed in get_args(tp):
            try:
                if _convert(key, value, type(allowed)) == allowed:
                    return allowed
            except ConfigError:
                continue
        raise ConfigError(bad)
    if origin in (list, tuple):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        item_tp = args[0] if args else Any
        candidates = _split_list(value, bad) if isinstance(value, _FromString) else [value]
        error = ConfigError(bad)
        for cand in candidates:  # a TOML array first, then the same text as bare words
            if not isinstance(cand, (list, tuple)):
                continue
            try:
                items = [_convert(f"{key}[{i}]", v, item_tp) for i, v in enumerate(cand)]
            except ConfigError as exc:
                error = exc
                continue
            return tuple(items) if origin is tuple else items
        raise error
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, _FromString) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise ConfigError(bad + " (true or false)")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(bad)
        if isinstance(value, int):
            return value
        if isinstance(value, _FromString):
            try:
                return int(value.replace("_", ""))
            except ValueError:
                raise ConfigError(bad) from None
        raise ConfigError(bad)
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(bad)
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, _FromString):
            try:
                return float(value)
            except ValueError:
                raise ConfigError(bad) from None
        raise ConfigError(bad)
    if tp is str:
        if isinstance(value, str):
            return str(value)
        raise ConfigError(bad)
    if tp is Path:
        if isinstance(value, (str, Path)):
            return Path(value)
        raise ConfigError(bad)
    raise ConfigError(f"config key {key!r} has unsupported type {describe_type(tp)}")


def _split_list(value: str, bad: str) -> list[list[Any]]:
    """Readings of a list typed on the command line, most literal first: a TOML array
    (``[1, 2]``, ``["a", "b"]``), bare words in brackets (``[adam, sgd]``) or a comma-separated
    list (``adam,sgd``)."""
    text = value.strip()
    out: list[list[Any]] = []
    if text.startswith("["):
        try:
            out.append(tomllib.loads(f"v = {text}")["v"])
        except tomllib.TOMLDecodeError:
            pass
        if not text.endswith("]") or "[" in text[1:-1] or "]" in text[1:-1]:
            if out:
                return out
            raise ConfigError(bad + " (a list like [1, 2] or [adam, sgd])")
        text = text[1:-1]
    items = []
    for part in text.split(","):
        part = part.strip()
        if len(part) >= 2 and part[0] == part[-1] and part[0] in "'\"":
            part = part[1:-1]
        elif not part:
            continue
        items.append(_FromString(part))
    return [*out, items]


def _check(key: str, value: Any, meta: Any) -> Any:
    choices = meta.get("choices")
    if choices and value not in choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"config key {key!r}: got {value!r}, allowed: "
                          f"{', '.join(map(repr, choices))}{hint}")
    values = value if isinstance(value, (list, tuple)) else [value]
    for v in values:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        if meta.get("finite") and not math.isfinite(v):
            raise ConfigError(f"config key {key!r}: got {v!r}, must be a finite number")
        for k, ok, sym in (("ge", v >= (meta.get("ge") or 0), ">="),
                           ("gt", v > (meta.get("gt") or 0), ">"),
                           ("le", v <= (meta.get("le") or 0), "<="),
                           ("lt", v < (meta.get("lt") or 0), "<")):
            if meta.get(k) is not None and not ok:
                raise ConfigError(f"config key {key!r}: got {v!r}, must be {sym} {meta[k]}")
    return value
