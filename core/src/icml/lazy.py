"""Lazy public APIs for plugin packages (PEP 562), in one line instead of a hand-written block.

In ``icml_<slug>/__init__.py``::

    from icml.lazy import lazy_exports

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {
        "CapKVPress": "presses",          # icml_capkv.presses.CapKVPress
        "make_press": "presses",
        "prefill": "generation",
        "Press": "presses:CapKVPress",    # an alias: exported name -> presses.CapKVPress
    })

Importing the package imports none of the submodules; the first ``icml_capkv.CapKVPress``
imports ``icml_capkv.presses`` and caches the attribute in the package, so later look-ups never
reach ``__getattr__`` again. Type checkers do not follow PEP 562: list the same names under
``if TYPE_CHECKING:`` imports if you want them typed. :func:`lazy_export_problems` (run by the
conformance kit) resolves every name, so a stale table fails a test instead of a user's import.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports", "lazy_export_problems"]

_TABLE = "__lazy_exports__"


def _target(module_name: str, name: str, spec: str) -> tuple[str, str]:
    sub, _, attr = spec.partition(":")
    sub = sub.lstrip(".")
    return (f"{module_name}.{sub}" if sub else module_name), (attr or name)


def lazy_exports(module_name: str, exports: Mapping[str, str],
                 ) -> tuple[Callable[[str], object], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for the package ``module_name`` (pass ``__name__``)
    whose public names live in submodules: ``exports`` maps each name to the submodule
    (relative to the package, e.g. ``"presses"`` or ``"sub.mod"``) that defines it, optionally
    ``"submodule:attr"`` to export ``attr`` under another name.

    An unknown name raises ``AttributeError`` naming the module; a name listed here that its
    submodule does not define raises ``ImportError`` (a stale table, not a missing attribute,
    so ``hasattr`` cannot hide it)."""
    table = dict(exports)
    for name, spec in table.items():
        if not isinstance(spec, str) or not spec.split(":")[0].strip("."):
            raise ValueError(f"lazy_exports({module_name!r}): {name!r} -> {spec!r}: give the "
                             "submodule that defines it, e.g. 'presses'")
    names = sorted(table)

    def __getattr__(name: str) -> object:
        spec = table.get(name)
        if spec is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        target, attr = _target(module_name, name, spec)
        module = importlib.import_module(target)
        try:
            value = getattr(module, attr)
        except AttributeError:
            raise ImportError(f"{module_name}.{name} is exported from {target}, which has no "
                              f"attribute {attr!r}: fix the lazy_exports table in "
                              f"{module_name}") from None
        pkg = sys.modules.get(module_name)
        if pkg is not None:
            setattr(pkg, name, value)  # cached: the next access is a plain attribute
        return value

    def __dir__() -> list[str]:
        pkg = sys.modules.get(module_name)
        return sorted(set(vars(pkg)) | set(names)) if pkg is not None else list(names)

    pkg = sys.modules.get(module_name)
    if pkg is not None:
        setattr(pkg, _TABLE, table)
    return __getattr__, __dir__, list(names)


def lazy_export_problems(module_name: str) -> list[str]:
    """Import ``module_name`` and resolve every name its :func:`lazy_exports` table lists
    (this imports the submodules); one sentence per name that does not resolve. Empty when the
    module has no table."""
    pkg = importlib.import_module(module_name)
    table = getattr(pkg, _TABLE, None) or {}
    problems = []
    for name, spec in table.items():
        target, attr = _target(module_name, name, spec)
        try:
            module = importlib.import_module(target)
        except Exception as exc:  # noqa: BLE001 - report every broken name, not the first
            problems.append(f"{module_name}.{name}: importing {target} failed: "
                            f"{type(exc).__name__}: {exc}")
            continue
        if not hasattr(module, attr):
            problems.append(f"{module_name}.{name}: {target} has no attribute {attr!r}")
    return problems
