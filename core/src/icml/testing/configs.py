"""Config-tree checks of the conformance kit: *every default exists once* and *every --set key
reaches the method unchanged* (issue 48).

Both walk a capability's config dataclass tree with the core's own :func:`icml.config.build_config`
(the path ``icml run --set`` takes), so what they check is what a user's ``--set`` does.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from icml.config import ConfigError, _convert, _FromString, build_config, fields_of

__all__ = ["Leaf", "api_problems", "default_problems", "leaves", "mirror_problems",
           "probe_value", "set_key_problems"]

_MISSING = dataclasses.MISSING


def _is_config(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _default(f: dataclasses.Field) -> Any:
    if f.default is not _MISSING:
        return f.default
    if f.default_factory is not _MISSING:
        return f.default_factory()
    return _MISSING


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One settable key of a config tree: its dotted key, field, type and default."""

    key: str
    field: dataclasses.Field
    type: Any
    default: Any


def leaves(schema: type, prefix: str = "") -> Iterator[Leaf]:
    """Every leaf key of ``schema`` (nested sections walked), in declaration order."""
    for f, tp in fields_of(schema):
        if _is_config(tp):
            yield from leaves(tp, f"{prefix}{f.name}.")
        else:
            yield Leaf(prefix + f.name, f, tp, _default(f))


# -- (a) every default exists once -----------------------------------------------------------
def _diff(a: Any, b: Any, prefix: str) -> list[str]:
    """Dotted keys where two instances of one config class differ."""
    out = []
    for f in dataclasses.fields(a):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if dataclasses.is_dataclass(va) and type(va) is type(vb):
            out += _diff(va, vb, f"{prefix}{f.name}.")
        elif va != vb:
            out.append(f"{prefix}{f.name} ({va!r} here, {vb!r} in {type(b).__name__})")
    return out


def default_problems(schema: type, prefix: str = "") -> list[str]:
    """Sentences naming every nested section of ``schema`` whose default is not built by the
    section's own class: ``option(default_factory=PressConfig)`` (or a default equal to
    ``PressConfig()``) keeps each default in one place, the API's; a factory that builds
    ``PressConfig(tau=2.0)`` writes ``tau``'s default a second time."""
    out = []
    for f, tp in fields_of(schema):
        if not _is_config(tp):
            continue
        key = prefix + f.name
        if f.default_factory is tp:
            out += default_problems(tp, key + ".")
            continue
        value = _default(f)
        if value is _MISSING:
            out.append(f"section {key!r} has no default: give it "
                       f"option(default_factory={tp.__name__}, help=...)")
            continue
        try:
            own = tp()
        except TypeError as exc:
            out.append(f"section {key!r}: {tp.__name__}() cannot be built from its own "
                       f"defaults ({exc}): give every field of {tp.__name__} a default")
            continue
        if type(value) is not tp:
            out.append(f"section {key!r}: its default is a {type(value).__name__}, not a "
                       f"{tp.__name__}: use option(default_factory={tp.__name__}, help=...)")
        elif value != own:
            out.append(f"section {key!r} overrides {tp.__name__}'s defaults: "
                       f"{'; '.join(_diff(value, own, key + '.'))}; write each default once, "
                       f"in {tp.__name__}, and use option(default_factory={tp.__name__}, ...)")
        out += default_problems(tp, key + ".")
    return out


def mirror_problems(schema: type) -> list[str]:
    """Sentences naming a key of a section that its own nested section holds again (``tau`` and
    ``press.tau``): one setting, two keys, two defaults. Reported, not failed, by default
    (``seed`` at two levels can be two settings)."""
    out = []

    def walk(tp: type, prefix: str, above: dict[str, str]) -> None:
        here = {}
        for f, ftp in fields_of(tp):
            if not _is_config(ftp):
                here[f.name] = prefix + f.name
        for name, key in here.items():
            if name in above:
                out.append(f"{key!r} mirrors {above[name]!r}")
        for f, ftp in fields_of(tp):
            if _is_config(ftp):
                walk(ftp, f"{prefix}{f.name}.", {**above, **here})

    walk(schema, "", {})
    return out


# -- (b) every --set key reaches the method unchanged -----------------------------------------
def _numbers(d: Any, meta: Any, integral: bool) -> list[Any]:
    base = d if isinstance(d, (int, float)) and not isinstance(d, bool) else 0
    cands: list[Any] = ([base + 1, base - 1, base * 2, 1, 2, 0, 3] if integral else
                        [base * 2 if base else 0.5, base / 2, base + 0.5, base - 0.5, 0.25,
                         0.75, 1.0, 2.0, 0.1])
    for k in ("ge", "gt", "le", "lt"):
        b = meta.get(k)
        if b is not None:
            cands += [b, b + 1, b - 1] if integral else [b, b + 0.5, b - 0.5, b * 0.9, b * 1.1]
    lo = meta.get("ge", meta.get("gt"))
    hi = meta.get("le", meta.get("lt"))
    if lo is not None and hi is not None:
        cands.append((lo + hi) // 2 if integral else (lo + hi) / 2)
    return [int(c) for c in cands] if integral else [float(c) for c in cands]


def _candidates(tp: Any, default: Any, meta: Any) -> list[Any]:
    origin = get_origin(tp)
    if meta.get("choices"):
        return [c for c in meta["choices"] if c != default]
    if origin is Literal:
        return [a for a in get_args(tp) if a != default]
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        out: list[Any] = [] if default is None else [None]
        for a in args:
            out += _candidates(a, default if default is not None else None, meta)
        return out
    if origin in (list, tuple):
        items = [a for a in get_args(tp) if a is not Ellipsis]
        item = items[0] if items else Any
        d = list(default) if isinstance(default, (list, tuple)) else []
        out = []
        if d:
            out += [d[:-1], d + d[-1:], d[::-1]]
        out += [[c] for c in _candidates(item, None, meta)[:3]]
        return out
    if tp is bool:
        return [not default] if isinstance(default, bool) else [True, False]
    if tp is int:
        return _numbers(default, meta, True)
    if tp is float:
        return _numbers(default, meta, False)
    if tp is str:
        return [f"{default}_x" if default else "x", "probe"]
    if tp is Path:
        return [Path(f"{default}_x") if default else Path("probe")]
    return []


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return json.dumps([str(v) if isinstance(v, Path) else v for v in value])
    return "none" if value is None else str(value)


def _get(obj: Any, dotted: str) -> Any:
    for part in [p for p in dotted.split(".") if p]:
        obj = getattr(obj, part)
    return obj


def probe_value(schema: type, leaf: Leaf, given: dict[str, Any] | None = None,
                ) -> tuple[str, Any, Any] | None:
    """``(text, value, config)``: a ``--set`` text for ``leaf`` whose parsed ``value`` differs
    from the default and builds a valid ``schema`` instance, and that instance; ``None`` when
    no guess builds (give one in the conformance class's ``probe_values``)."""
    given = given or {}
    cands = [given[leaf.key]] if leaf.key in given else _candidates(
        leaf.type, leaf.default, leaf.field.metadata)
    for cand in cands:
        text = _text(cand)
        try:
            value = _convert(leaf.key, _FromString(text), leaf.type)
        except ConfigError:
            continue
        if value == leaf.default:
            continue
        try:
            cfg = build_config(schema, {}, [f"{leaf.key}={text}"])
        except Exception:  # noqa: BLE001 - any rejection: try the next value
            continue
        return text, value, cfg
    return None


def set_key_problems(schema: type, given: dict[str, Any] | None = None,
                     ) -> tuple[list[str], list[str]]:
    """``(problems, unprobed)``: for every leaf key, ``--set key=<non-default value>`` must
    build a config holding that value, unchanged and of the same type, at the key (a
    ``__post_init__`` that rewrites, clamps or moves a value breaks it); ``unprobed`` lists keys
    for which no valid non-default value was found."""
    problems, unprobed = [], []
    for leaf in leaves(schema):
        probe = probe_value(schema, leaf, given)
        if probe is None:
            unprobed.append(leaf.key)
            continue
        text, value, cfg = probe
        got = _get(cfg, leaf.key)
        if got != value or type(got) is not type(value):
            problems.append(f"--set {leaf.key}={text} gives {got!r} in the config, not "
                            f"{value!r}: validate in __post_init__, never rewrite")
    return problems, unprobed


def resolve(target: str) -> Any:
    """``"pkg.module:Name"`` -> the object."""
    mod, _, attr = target.partition(":")
    if not attr:
        raise ValueError(f"{target!r}: write 'package.module:Class'")
    return _get(importlib.import_module(mod), attr)


def _handoff(api_cls: type, cfg: Any, runtime: dict[str, Any]) -> tuple[Any, str]:
    """The API object built from the config section ``cfg`` and the path inside it at which
    the section's keys must be found ("" = on the object itself)."""
    if isinstance(api_cls, type) and isinstance(cfg, api_cls):
        return cfg, ""
    section = type(cfg)
    if isinstance(api_cls, type) and issubclass(api_cls, section):
        if hasattr(api_cls, "from_config"):
            return api_cls.from_config(cfg, **runtime), ""
        kwargs = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.init}
        return api_cls(**kwargs, **runtime), ""
    obj = api_cls(cfg, **runtime)
    for name, value in (vars(obj) if hasattr(obj, "__dict__") else {}).items():
        if value is cfg:
            return obj, name
    for name in getattr(obj, "__slots__", ()):
        if getattr(obj, name, None) is cfg:
            return obj, name
    raise AssertionError(
        f"{getattr(api_cls, '__qualname__', api_cls)}({section.__name__}) does not keep the "
        "config object it was "
        f"given: store it (self.config = config) and read settings from it, not from copies")


def _sole_config_arg(api_cls: Any, section: type, runtime: dict[str, Any]) -> str | None:
    """Why ``api_cls`` cannot take ``section`` as its only required argument (None if it can)."""
    try:
        sig = inspect.signature(api_cls)
    except (TypeError, ValueError):
        return f"{api_cls!r} has no inspectable signature"
    required = [p for p in sig.parameters.values() if p.default is p.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in runtime]
    label = getattr(api_cls, "__name__", api_cls)
    if not required:
        return (f"{label} must be {section.__name__}, subclass it, or take a "
                f"{section.__name__} as its only required argument; it takes its settings as "
                f"keyword arguments of its own (a second copy of {section.__name__}'s fields "
                f"and defaults): make it subclass {section.__name__}")
    if len(required) != 1:
        return (f"{label} must be {section.__name__}, subclass it, or take a "
                f"{section.__name__} as its only required argument; it requires "
                f"{[p.name for p in required]}")
    ann = required[0].annotation
    try:
        hints = typing.get_type_hints(api_cls.__init__ if isinstance(api_cls, type) else api_cls)
        ann = hints.get(required[0].name, ann)
    except Exception:  # noqa: BLE001 - unresolvable hints: compare by name below
        pass
    name = getattr(ann, "__name__", str(ann)).split(".")[-1].strip("'\"")
    if ann is not section and name != section.__name__:
        return (f"{getattr(api_cls, '__name__', api_cls)}'s argument {required[0].name!r} is "
                f"annotated {name!r}, not {section.__name__}: type it with the config class")
    return None


def api_problems(schema: type, path: str, api: Any, given: dict[str, Any] | None = None,
                 runtime: dict[str, Any] | None = None) -> list[str]:
    """Check that the config section at ``path`` (``""`` = the whole config) of ``schema`` is
    what ``api`` takes: ``api`` is the section's class, subclasses it (without re-declaring its
    defaults or adding settings no key reaches), or takes the section object as its only
    required argument and keeps it. Then, for every leaf key under ``path``, ``--set`` it to a
    non-default value, hand the built section to ``api`` and read the value back at the same
    path of the API object: it must be there, equal and of the same type.

    ``runtime`` holds the API's arguments that are not settings (a compression ratio a table
    sweeps, a model): passed to every construction and exempt from the "adds settings"
    check."""
    runtime = dict(runtime or {})
    api_cls = resolve(api) if isinstance(api, str) else api
    section = _get(build_config(schema, {}), path) if path else build_config(schema, {})
    sec_cls = type(section)
    if not dataclasses.is_dataclass(section):
        return [f"{path!r} is not a config section of {schema.__name__}"]
    out: list[str] = []
    label = getattr(api_cls, "__name__", str(api_cls))
    if isinstance(api_cls, type) and issubclass(api_cls, sec_cls) and api_cls is not sec_cls:
        if dataclasses.is_dataclass(api_cls):
            theirs = {f.name: f for f in dataclasses.fields(api_cls) if f.init}
            for f in dataclasses.fields(sec_cls):
                g = theirs.pop(f.name, None)
                if g is not None and _default(g) != _default(f):
                    out.append(f"{label}.{f.name} re-declares the default "
                               f"({_default(g)!r} vs {_default(f)!r} in {sec_cls.__name__}): "
                               f"delete it from {label}")
            added = sorted(n for n in theirs if n not in runtime and n not in {f.name for f in
                                                           dataclasses.fields(sec_cls)})
            if added and not hasattr(api_cls, "from_config"):
                out.append(f"{label} adds settings {added} that no --set key reaches: move them "
                           f"into {sec_cls.__name__} or make them field(init=False)")
    elif not isinstance(section, api_cls if isinstance(api_cls, type) else ()):
        why = _sole_config_arg(api_cls, sec_cls, runtime)
        if why:
            return [why]
    prefix = f"{path}." if path else ""
    for leaf in leaves(schema):
        if not leaf.key.startswith(prefix):
            continue
        probe = probe_value(schema, leaf, given)
        if probe is None:
            continue
        text, _, cfg = probe
        sub = _get(cfg, path) if path else cfg
        rel = leaf.key[len(prefix):]
        want = _get(sub, rel)
        try:
            obj, inner = _handoff(api_cls, sub, runtime)
            got = _get(obj, f"{inner}.{rel}" if inner else rel)
        except AssertionError as exc:
            return [*out, str(exc)]
        except AttributeError:
            out.append(f"--set {leaf.key}={text}: {label} has no {rel!r} (renamed?)")
            continue
        except (TypeError, ValueError) as exc:
            out.append(f"--set {leaf.key}={text} builds a valid config but {label} rejects "
                       f"it: {exc} (validate once, in the config)")
            continue
        if got != want or type(got) is not type(want):
            out.append(f"--set {leaf.key}={text}: {label} holds {got!r} at {rel!r}, not "
                       f"{want!r}")
    return out
