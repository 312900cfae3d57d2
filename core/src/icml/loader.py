"""Plugin discovery: entry points in ``icml.plugins``, each loaded in isolation.

We do not use pluggy's ``load_setuptools_entrypoints``: it stops at the first plugin that fails to
import and silently drops a second distribution with the same name. Here every plugin gets a
:class:`PluginRecord` saying whether it loaded and, if not, why and how to fix it.

Environment variables:

* ``ICML_STRICT_PLUGINS=1`` -- any load problem raises :class:`PluginLoadError` (for CI).
* ``ICML_PLUGINS=a,b`` -- allow list: only these slugs are loaded (empty string: none).
* ``ICML_DISABLE_PLUGINS=a,b`` -- deny list: these slugs are never imported.
* ``ICML_PLUGIN_MODULES=pkg.mod,other.mod`` -- also load these importable, uninstalled modules
  as plugins (for development, like ``pytest -p``); the CLI's ``-p`` option does the same.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata as md
import os
import re
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pluggy

from icml import hookspecs
from icml.hookspecs import CAPABILITY_HOOKS
from icml.types import PluginInfo

GROUP = "icml.plugins"
API_VERSION = 1
HEAVY_MODULES = ("torch", "transformers", "tensorflow", "jax", "cvxpy", "scipy", "sklearn",
                 "matplotlib", "bitsandbytes", "accelerate", "datasets")
ENV_STRICT, ENV_ALLOW, ENV_DENY, ENV_MODULES = (
    "ICML_STRICT_PLUGINS", "ICML_PLUGINS", "ICML_DISABLE_PLUGINS", "ICML_PLUGIN_MODULES")
BUILTINS_NAME = "icml.builtins"
_SLUG = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


class PluginLoadError(RuntimeError):
    """A plugin could not be loaded (raised in strict mode, or when a run needs that plugin)."""


class UnknownPluginError(LookupError):
    """No plugin has this slug. ``str(exc)`` names the closest slugs."""


@dataclass
class PluginRecord:
    """One plugin as discovered: where it comes from and whether it loaded.

    ``status`` is ``ok``, ``not-loaded`` (metadata only), ``disabled``, ``error``,
    ``missing-dependency``, ``incompatible`` or ``duplicate``.
    """

    slug: str
    distribution: str
    version: str
    target: str
    summary: str = ""
    status: str = "not-loaded"
    error: str = ""
    fix: str = ""
    traceback: str = ""
    warnings: list[str] = field(default_factory=list)
    info: PluginInfo | None = None
    module: ModuleType | None = field(default=None, repr=False)
    _ep: Any = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_dict(self) -> dict[str, Any]:
        info = self.info
        return {"slug": self.slug, "distribution": self.distribution, "version": self.version,
                "status": self.status, "error": self.error, "fix": self.fix,
                "warnings": self.warnings, "target": self.target,
                "summary": info.summary if info else self.summary,
                "title": info.title if info else "",
                "capabilities": list(info.capabilities) if info else []}

    def describe_problem(self) -> str:
        return (f"plugin {self.slug!r} ({self.distribution} {self.version}): {self.error}"
                + (f" -- fix: {self.fix}" if self.fix else ""))


def _env_list(name: str) -> list[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return [s.strip() for s in raw.split(",") if s.strip()]


def strict_mode() -> bool:
    return os.environ.get(ENV_STRICT, "").lower() in ("1", "true", "yes", "on")


def discover() -> list[PluginRecord]:
    """Every entry point in ``icml.plugins``, from metadata only (nothing is imported).

    A slug offered by two distributions marks both records ``duplicate``.
    """
    records: dict[str, list[PluginRecord]] = {}
    seen: set[tuple[str, str]] = set()
    for dist in md.distributions():
        dist_name = dist.metadata["Name"] or "?"
        for ep in dist.entry_points:
            if ep.group != GROUP or (ep.name, _norm(dist_name)) in seen:
                continue
            seen.add((ep.name, _norm(dist_name)))
            rec = PluginRecord(slug=ep.name, distribution=dist_name, version=dist.version,
                               target=ep.value, summary=dist.metadata["Summary"] or "", _ep=ep)
            rec._dist = dist  # type: ignore[attr-defined]
            records.setdefault(ep.name, []).append(rec)
    out = []
    for slug, recs in sorted(records.items()):
        if len(recs) > 1:
            names = " and ".join(f"{r.distribution} {r.version}" for r in recs)
            for r in recs:
                r.status = "duplicate"
                r.error = f"slug {slug!r} is provided by two distributions: {names}"
                r.fix = "uninstall one of them (pip uninstall <distribution>)"
        out += recs
    for r in out:
        if not _SLUG.match(r.slug) and r.status != "duplicate":
            r.status = "error"
            r.error = f"entry point name {r.slug!r} is not a valid slug (lowercase, digits, '-')"
            r.fix = "rename the entry point in the plugin's pyproject.toml"
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _core_version() -> str:
    try:
        return md.version("icml-core")
    except md.PackageNotFoundError:  # pragma: no cover - running from a source tree
        from icml import __version__

        return __version__


def _check_requirements(rec: PluginRecord) -> None:
    """Before importing: the plugin's declared dependencies (and the extras it asks of them) are
    installed and fit, using distribution metadata only (OpenTelemetry-contrib's approach)."""
    dist = getattr(rec, "_dist", None)
    problem = _unmet(dist.requires or [] if dist else [], extras=("",), depth=0)
    if problem is None:
        return
    req, have = problem
    if _norm(req.name) == "icml-core" and have is not None:
        rec.status = "incompatible"
        rec.error = f"targets {req} but icml-core {have} is installed"
        rec.fix = f"install a version of {rec.distribution} built for icml-core {have}"
        return
    wanted = f"{req.name}{req.specifier}"
    rec.status = "missing-dependency"
    rec.error = (f"needs {wanted}, which is not installed" if have is None
                 else f"needs {wanted} but {req.name} {have} is installed")
    rec.fix = f"pip install '{wanted}'"


def _unmet(lines: list[str], extras: tuple[str, ...], depth: int) -> Any:
    """The first requirement in ``lines`` (active for ``extras``) that is missing or out of
    range, as ``(requirement, installed version or None)``; follows requested extras once."""
    from packaging.requirements import InvalidRequirement, Requirement

    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in extras):
            continue
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            if _norm(req.name) != "icml-core":
                return req, None
            have = _core_version()
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            return req, have
        if req.extras and depth == 0:
            try:
                sub = md.distribution(req.name).requires or []
            except md.PackageNotFoundError:
                sub = []
            inner = _unmet([r for r in sub if "extra" in r], tuple(req.extras), depth + 1)
            if inner is not None:
                return inner
    return None


class PluginHost:
    """A pluggy manager plus one :class:`PluginRecord` per discovered plugin."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        from icml import builtins

        self.pm.register(builtins, name=BUILTINS_NAME)
        self.records: dict[str, PluginRecord] = {}
        self.all_records: list[PluginRecord] = []

    # -- queries ---------------------------------------------------------------------------
    def get(self, slug: str) -> PluginRecord:
        """The record for ``slug``; raises :class:`UnknownPluginError` with close names."""
        if slug in self.records:
            return self.records[slug]
        close = difflib.get_close_matches(slug, list(self.records), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        known = ", ".join(sorted(self.records)) or "none installed"
        raise UnknownPluginError(f"unknown plugin {slug!r}: {hint}(installed: {known}; "
                                 "see `icml list`)")

    def loaded(self, slug: str) -> PluginRecord:
        """The record for ``slug``, raising :class:`PluginLoadError` unless it loaded."""
        rec = self.get(slug)
        if not rec.ok:
            raise PluginLoadError(rec.describe_problem())
        return rec

    def method_plugins(self) -> list[ModuleType]:
        return [r.module for r in self.records.values() if r.ok and r.module is not None]

    # -- loading ---------------------------------------------------------------------------
    def add(self, rec: PluginRecord) -> None:
        if rec.slug in self.records and self.records[rec.slug].ok and rec.ok:
            other = self.records[rec.slug]
            rec.status = other.status = "duplicate"
            rec.error = other.error = (f"slug {rec.slug!r} is provided by both "
                                       f"{other.distribution} and {rec.distribution}")
            rec.fix = other.fix = "uninstall or rename one of them"
            for r in (rec, other):  # neither may answer a run
                if r.module is not None:
                    self.pm.unregister(r.module)
                    r.module = None
        self.records[rec.slug] = rec
        if not any(r is rec for r in self.all_records):
            self.all_records.append(rec)

    def load_record(self, rec: PluginRecord) -> PluginRecord:
        """Import and register one discovered plugin; never raises (outside strict mode)."""
        if rec.status == "not-loaded":
            _check_requirements(rec)
        if rec.status == "not-loaded":
            before = set(sys.modules)
            try:
                module = rec._ep.load() if rec._ep is not None else importlib.import_module(
                    rec.target)
            except ImportError as exc:
                missing = getattr(exc, "name", None) or ""
                rec.status = "missing-dependency" if missing else "error"
                rec.error = f"import failed: {type(exc).__name__}: {exc}"
                rec.fix = (f"pip install the package that provides {missing!r}, or reinstall "
                           f"{rec.distribution}" if missing else f"reinstall {rec.distribution}")
                rec.traceback = traceback.format_exc()
            except BaseException as exc:  # noqa: BLE001 - a plugin's import may raise anything
                if isinstance(exc, KeyboardInterrupt):
                    raise
                rec.status = "error"
                rec.error = f"import failed: {_describe(exc)}"
                rec.fix = f"report it to the authors of {rec.distribution}, or disable it " \
                          f"with {ENV_DENY}={rec.slug}"
                rec.traceback = traceback.format_exc()
            else:
                heavy = sorted({m.split(".")[0] for m in set(sys.modules) - before}
                               & set(HEAVY_MODULES))
                if heavy:
                    rec.warnings.append(f"imports {', '.join(heavy)} at module level, which "
                                        "slows the CLI: import inside hook bodies")
                self._register(rec, module)
        if not rec.ok and rec.status != "disabled" and strict_mode():
            raise PluginLoadError(rec.describe_problem() + f" ({ENV_STRICT} is set)")
        self.add(rec)
        return rec

    def _register(self, rec: PluginRecord, module: ModuleType) -> None:
        problems = _hook_name_problems(module)
        if problems:
            rec.status, rec.error = "error", "; ".join(problems)
            rec.fix = "rename the function to a hook in icml.hookspecs (see `icml info`)"
            return
        try:
            self.pm.register(module, name=f"icml-plugin:{rec.slug}")
        except ValueError as exc:  # already registered under another slug
            rec.status, rec.error, rec.fix = "duplicate", str(exc), "register a module once"
            return
        except pluggy.PluginValidationError as exc:
            rec.status, rec.error = "error", f"invalid hook implementation: {exc}"
            rec.fix = "match the hook's signature in icml.hookspecs"
            return
        rec.module = module
        try:
            info = module.icml_plugin_info()
        except BaseException as exc:  # noqa: BLE001 - SystemExit too; only Ctrl-C stops us
            if isinstance(exc, KeyboardInterrupt):
                raise
            info, rec.error = None, f"icml_plugin_info() failed: {_describe(exc)}"
        if info is None or not isinstance(info, PluginInfo):
            rec.status = "error"
            rec.error = rec.error or "icml_plugin_info() must return an icml.PluginInfo"
            rec.fix = "implement `@icml.hookimpl def icml_plugin_info() -> icml.PluginInfo`"
            self.pm.unregister(module)
            rec.module = None
            return
        if not info.version and rec.version:
            info = _replace(info, version=rec.version)
        problems = info.problems()
        if info.api_version != API_VERSION:
            rec.status = "incompatible"
            rec.error = (f"written for icml plugin API {info.api_version}, core speaks "
                         f"{API_VERSION}")
            rec.fix = f"upgrade {rec.distribution} or icml-core so both agree"
        elif info.name != rec.slug and rec.distribution != "(development)":
            problems.insert(0, f"PluginInfo.name is {info.name!r} but the entry point is "
                               f"{rec.slug!r}: make them equal")
        implemented = {c for c, h in CAPABILITY_HOOKS.items()
                       if any(i.plugin is module for i in getattr(self.pm.hook, h).get_hookimpls())}
        missing = [c for c in info.capabilities if c in CAPABILITY_HOOKS and c not in implemented]
        if missing:
            problems.append(f"declares {', '.join(missing)} but implements no "
                            f"{', '.join(CAPABILITY_HOOKS[c] for c in missing)} hook")
        extra = sorted(implemented - set(info.capabilities))
        if extra:
            problems.append(f"implements {', '.join(extra)} but does not declare it in "
                            "PluginInfo.capabilities")
        rec.info = info
        if rec.status == "incompatible":
            pass
        elif problems:
            rec.status, rec.error = "error", "; ".join(problems)
            rec.fix = rec.fix or "fix the plugin's icml_plugin_info()"
        else:
            rec.status = "ok"
            return
        self.pm.unregister(module)
        rec.module = None

    def load_module(self, target: str) -> PluginRecord:
        """Load an uninstalled, importable module as a plugin (development mode)."""
        rec = PluginRecord(slug=target, distribution="(development)", version="", target=target)
        rec = self.load_record(rec)
        if rec.info is not None:
            self.records.pop(rec.slug, None)
            rec.slug = rec.info.name
            self.add(rec)
        return rec


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {exc}"


def _replace(info: PluginInfo, **changes: Any) -> PluginInfo:
    import dataclasses

    return dataclasses.replace(info, **changes)


def _hook_name_problems(module: ModuleType) -> list[str]:
    """Functions that look like hooks but match no spec (``icml_evalute``) or lack the marker."""
    specs = {n for n in dir(hookspecs) if n.startswith("icml_")}
    found = []
    for name in dir(module):
        if not name.startswith("icml_") or not callable(getattr(module, name)):
            continue
        marked = hasattr(getattr(module, name), f"{hookspecs.PROJECT}_impl")
        if name not in specs and marked:
            close = difflib.get_close_matches(name, sorted(specs), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            found.append(f"hook implementation {name} matches no hook spec{hint}")
        elif name in specs and not marked:
            found.append(f"{name} is not marked with @icml.hookimpl")
    return found


def load_plugins(only: Iterable[str] | None = None,
                 modules: Iterable[str] = ()) -> PluginHost:
    """Discover plugins and import them, each in isolation.

    ``only`` restricts imports to these slugs (the rest stay ``not-loaded`` records, so unknown
    slugs still get "did you mean"); ``modules`` are uninstalled modules to load as plugins.
    The allow and deny lists from the environment always apply.
    """
    host = PluginHost()
    allow, deny = _env_list(ENV_ALLOW), set(_env_list(ENV_DENY) or [])
    wanted = set(only) if only is not None else None
    for rec in discover():
        if rec.slug in deny or (allow is not None and rec.slug not in allow):
            rec.status = "disabled"
            rec.error = f"disabled by {ENV_DENY if rec.slug in deny else ENV_ALLOW}"
            host.add(rec)
        elif wanted is not None and rec.slug not in wanted:
            host.add(rec)
        else:
            if rec.status == "duplicate" and strict_mode():
                raise PluginLoadError(rec.describe_problem())
            host.load_record(rec)
    for target in [*(_env_list(ENV_MODULES) or []), *modules]:
        host.load_module(target)
    return host
