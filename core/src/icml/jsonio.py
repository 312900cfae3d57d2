"""The JSON form of run results: every float survives, including ``nan``, ``inf`` and ``-inf``.

Standard JSON has no literal for a non-finite number, and ``json.dumps`` either writes the
non-standard tokens ``NaN``/``Infinity`` or (with ``allow_nan=False``) raises. The core writes a
non-finite float anywhere in a result (metrics, tables, config, notes' neighbours) as a one-key
object::

    {"$float": "nan"}     {"$float": "inf"}     {"$float": "-inf"}

and :func:`decode` turns those objects back into floats, so ``decode(encode(x)) == x`` for any
mix of dicts with string keys, lists, strings, bools, ints, floats and ``None`` (NaN compares by
identity of kind). The three one-key dicts above are reserved for this form: writing one as
data raises :class:`ValueError`.

:func:`encode` also converts what plugins commonly put in results: tuples (to lists),
:class:`pathlib.Path` (to str), dataclass instances (to dicts) and NumPy/torch scalars and arrays
(via ``.item()``/``.tolist()``). With ``strict=True`` anything else raises :class:`TypeError`
naming the value's type and its place; with ``strict=False`` it is written as its ``repr`` so that
a finished run is never lost to one unserialisable value.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import PurePath
from typing import Any

FLOAT_KEY = "$float"
_NAMES = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _float_form(x: float) -> Any:
    if math.isnan(x):
        return {FLOAT_KEY: "nan"}
    if math.isinf(x):
        return {FLOAT_KEY: "inf" if x > 0 else "-inf"}
    return x


def _is_float_form(obj: dict) -> bool:
    value = obj.get(FLOAT_KEY)
    return isinstance(value, str) and value in _NAMES


def encode(obj: Any, *, strict: bool = True, _where: str = "result") -> Any:
    """``obj`` as plain JSON-ready values (non-finite floats as ``{"$float": ...}``)."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return _float_form(obj)
    if isinstance(obj, dict):
        if len(obj) == 1 and _is_float_form(obj):
            raise ValueError(f"{_where}: {{{FLOAT_KEY!r}: {obj[FLOAT_KEY]!r}}} is reserved for "
                             "non-finite floats; rename the key")
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                if isinstance(k, (int, float, bool)) or k is None:
                    k = json.dumps(k) if not isinstance(k, float) or math.isfinite(k) else str(k)
                elif strict:
                    raise TypeError(f"{_where}: key {k!r} is a {type(k).__name__}, not a string")
                else:
                    k = repr(k)
            out[k] = encode(v, strict=strict, _where=f"{_where}[{k!r}]")
        return out
    if isinstance(obj, (list, tuple)):
        return [encode(v, strict=strict, _where=f"{_where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, PurePath):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return encode(dataclasses.asdict(obj), strict=strict, _where=_where)
    for method in ("item", "tolist"):  # NumPy / torch scalars and arrays
        fn = getattr(obj, method, None)
        if callable(fn):
            try:
                value = fn()
            except (TypeError, ValueError, RuntimeError):
                continue
            if value is not obj:
                return encode(value, strict=strict, _where=_where)
    if strict:
        raise TypeError(f"{_where} is a {type(obj).__name__}, which is not JSON serialisable: "
                        "convert it (float(...), str(...)) or save it as an artifact")
    return repr(obj)


def decode(obj: Any) -> Any:
    """The inverse of :func:`encode` for its output: ``{"$float": "nan"}`` back to ``nan``."""
    if isinstance(obj, dict):
        if len(obj) == 1 and _is_float_form(obj):
            return _NAMES[obj[FLOAT_KEY]]
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    return obj


def dumps(obj: Any, *, strict: bool = True, indent: int | None = 2) -> str:
    """Standard JSON text for ``obj`` (``allow_nan=False``: no ``NaN`` tokens, ever)."""
    return json.dumps(encode(obj, strict=strict), indent=indent, allow_nan=False,
                      ensure_ascii=False)


def loads(text: str) -> Any:
    """Parse JSON written by :func:`dumps`, restoring non-finite floats."""
    return decode(json.loads(text))


__all__ = ["FLOAT_KEY", "decode", "dumps", "encode", "loads"]
