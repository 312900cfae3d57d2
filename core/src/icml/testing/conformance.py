"""The conformance kit's base class (see :mod:`icml.testing`).

In your plugin's ``tests/test_conformance.py``::

    from icml.testing import PluginConformance

    class TestConformance(PluginConformance):
        slug = "my-method"
        smoke = {"train": {"steps": 2}}   # per capability: --set style overrides, tiny and fast

Each inherited test's docstring has a *Troubleshooting* section saying what to fix.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest

from icml.config import ConfigError, build_config, schema_rows, to_dict
from icml.hookspecs import CAPABILITY_HOOKS
from icml.loader import GROUP, HEAVY_MODULES, PluginHost, PluginRecord, discover, load_plugins

__all__ = ["PluginConformance", "assert_light_import", "icml_cli", "one_line_error",
           "pretrained_or_skip"]


def icml_cli(*args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run the installed ``icml`` console script in a fresh interpreter, as a user does (one
    torch thread, so tests of several plugins can run side by side); output captured as text."""
    script = Path(sys.executable).parent / "icml"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "icml.cli"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, env=env)


def pretrained_or_skip(name: str = "smollm2-135m-instruct", *,
                       load: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
    """A packaged pretrained model for a test: ``load_pretrained(name, **kwargs)`` (or
    ``load()``, for a plugin's own loader that raises ``PretrainedModelError``). Where the
    model's distribution is not installed the test is skipped, unless
    ``ICML_REQUIRE_PRETRAINED=1`` (CI sets it), where it fails: a model CI cannot load must not
    turn into silently skipped tests.

    Use it in a module-scoped fixture so the model loads once per test file::

        @pytest.fixture(scope="module")
        def smollm():
            return pretrained_or_skip()
    """

    from icml.pretrained import PretrainedModelError, load_pretrained

    try:
        return load() if load is not None else load_pretrained(name, **kwargs)
    except PretrainedModelError as exc:
        if os.environ.get("ICML_REQUIRE_PRETRAINED") == "1":
            pytest.fail(f"ICML_REQUIRE_PRETRAINED=1 but the model cannot be loaded: {exc}")
        pytest.skip(f"packaged model not installed: {exc}")


def load_script(path: str | os.PathLike[str], name: str | None = None, *,
                sibling_imports: bool = False) -> ModuleType:
    """Import a plugin's script that is not part of its package (``benchmarks/bench.py``) so a
    test can call its functions: ``bench = load_script(HERE.parent / "benchmarks" / "bench.py")``.

    The module is registered in ``sys.modules`` under ``name`` before it runs, so its dataclasses
    and pickling work. The name is global to the test session: give one that names the plugin
    (``"smart_bench_throughput"``, not ``"bench_throughput"``, which another plugin's test may
    import from its own folder); the default is ``_icml_script_<plugin>_<folder>_<stem>``, from
    the two folders above the file. A script that imports its sibling files (``import common``)
    needs ``sibling_imports=True``, which puts its folder on ``sys.path``. A script whose import
    fails is removed from ``sys.modules``.
    """

    import importlib.util

    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no script at {path}")
    name = name or "_icml_script_" + "_".join(
        re.sub(r"\W", "_", part) for part in (path.parent.parent.name, path.parent.name, path.stem))
    if sibling_imports and str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The single ``error:`` line a bad input must produce on stderr, with no traceback.

    Troubleshooting: a traceback means an exception escaped the plugin's checks; raise
    ``icml.ConfigError`` (config values) or ``ValueError`` with a message naming the fix."""
    assert "Traceback" not in proc.stderr, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    return line


def assert_light_import(module: str, heavy: tuple[str, ...] = HEAVY_MODULES,
                        extra_path: list[str] | None = None) -> None:
    """Import ``module`` in a fresh interpreter and fail if any ``heavy`` module got loaded."""
    code = (f"import sys; sys.path[:0] = {extra_path or []!r}; import {module}; "
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(heavy)!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"importing {module} failed:\n{proc.stderr}"
    loaded = proc.stdout.strip().splitlines()[-1]
    assert loaded == "[]", (
        f"importing {module} loads {loaded}; move those imports into hook bodies or "
        "functions so `icml list` and `icml --help` stay fast")


def _to_set_args(overrides: dict[str, Any], prefix: str = "") -> list[str]:
    args = []
    for k, v in overrides.items():
        if isinstance(v, dict):
            args += _to_set_args(v, f"{prefix}{k}.")
        else:
            text = json.dumps(v) if isinstance(v, (list, tuple)) else str(v)
            args.append(f"{prefix}{k}={text}")
    return args


class PluginConformance:
    """Base class; subclass it in your plugin's tests with ``slug`` and ``smoke``.

    ``smoke`` maps each capability to config overrides that make its default run take seconds
    on a CPU (tiny model, few steps). ``smoke_device`` is the device the smoke runs use.

    The config is the API (issue 48): ``api`` maps a config path (``"press"``, ``"train.press"``;
    ``"<capability>:<path>"`` to name one capability, ``"<capability>:"`` for its whole config)
    to the ``"package.module:Class"`` that takes that section: the class must be the section's
    config class, subclass it, or take the section object as its only required argument (and
    keep it). ``test_set_keys_reach_the_api`` then sets every key under the path to a
    non-default value with ``build_config`` and reads it back, unchanged, from the API object.
    ``api_runtime`` gives, per ``api`` key, the API's arguments that are not settings (a swept
    ``compression_ratio``): ``{"press": {"compression_ratio": 0.5}}``. ``probe_values`` gives a
    valid non-default value for keys the kit cannot guess (a model
    name, a list of known names): ``{"objectives": ["logp"]}``.

    ``shape_checks = True`` turns on the plugin-shape tests (README sections, CHANGELOG.md,
    CITATION.cff, results/, thin plugin.py, typed job.py), run against ``plugin_root`` (default:
    the folder with ``pyproject.toml`` above this test file). ``icml new`` sets it.
    """

    slug: ClassVar[str] = ""
    smoke: ClassVar[dict[str, dict[str, Any]]] = {}
    smoke_device: ClassVar[str] = "cpu"
    api: ClassVar[dict[str, str]] = {}
    api_runtime: ClassVar[dict[str, dict[str, Any]]] = {}
    probe_values: ClassVar[dict[str, Any]] = {}
    shape_checks: ClassVar[bool] = False
    plugin_root: ClassVar[str | Path | None] = None

    # -- helpers ---------------------------------------------------------------------------
    @classmethod
    def _host(cls) -> PluginHost:
        cache = cls.__dict__.get("_cached_host")
        if cache is None:
            cache = load_plugins(only=[cls.slug])
            cls._cached_host = cache  # type: ignore[attr-defined]
        return cache

    @classmethod
    def _record(cls) -> PluginRecord:
        assert cls.slug, "set `slug = '<your-slug>'` on your PluginConformance subclass"
        rec = cls._host().get(cls.slug)
        assert rec.ok, rec.describe_problem()
        return rec

    @classmethod
    def _root(cls) -> Path:
        if cls.plugin_root is not None:
            return Path(cls.plugin_root)
        from icml.testing.shape import find_plugin_root

        return find_plugin_root(Path(sys.modules[cls.__module__].__file__ or "."))

    def _api_targets(self) -> list[tuple[str, type, str, str, dict[str, Any]]]:
        """``(capability, schema, path, target, runtime)`` for every ``api`` entry."""
        configs = self._record().info.configs
        out = []
        for key, target in self.api.items():
            cap, sep, path = key.partition(":")
            caps = [cap] if sep else list(configs)
            path = path if sep else key
            assert not sep or cap in configs, f"api key {key!r}: {cap!r} is not a capability"
            runtime = self.api_runtime.get(key, {})
            hits = [(c, configs[c], path, target, runtime) for c in caps
                    if _has_path(configs[c], path)]
            assert hits, (f"api key {key!r}: no capability config has a section {path!r} "
                          f"(capabilities: {', '.join(configs)})")
            out += hits
        return out

    # -- tests -----------------------------------------------------------------------------
    def test_entry_point_resolves(self) -> None:
        """The slug is an entry point in ``icml.plugins`` offered by exactly one distribution.

        Troubleshooting: add ``[project.entry-points."icml.plugins"] <slug> =
        "icml_<module>.plugin"`` to pyproject.toml and reinstall (``pip install -e .``); if two
        distributions offer the slug, uninstall one.
        """
        found = [r for r in discover() if r.slug == self.slug]
        assert found, f"no entry point named {self.slug!r} in group {GROUP!r}"
        assert len(found) == 1, found[0].error

    def test_loads_cleanly(self) -> None:
        """The plugin imports, registers and passes the loader's checks with no warnings.

        Troubleshooting: the message names the problem -- an import error, a hook name that
        matches no spec, or ``PluginInfo`` problems. Warnings about heavy imports mean a module
        level ``import torch`` in the entry module: move it into the hook body.
        """
        rec = self._record()
        assert not rec.warnings, "; ".join(rec.warnings)

    def test_metadata_valid(self) -> None:
        """``icml_plugin_info()`` returns a valid ``PluginInfo`` whose name is the slug.

        Troubleshooting: fill title, a one-line summary (<= 120 characters), an
        ``icml.Paper`` with an http(s) URL, the capabilities (primary first) and one config
        dataclass per capability.
        """
        info = self._record().info
        assert info is not None
        assert info.name == self.slug, f"PluginInfo.name {info.name!r} != slug {self.slug!r}"
        assert not info.problems(), "; ".join(info.problems())
        assert info.version, "no version: install the plugin as a distribution"

    def test_capabilities_match_hooks(self) -> None:
        """Declared capabilities equal the capability hooks the module implements.

        Troubleshooting: for each capability in ``PluginInfo.capabilities`` implement the
        matching ``@icml.hookimpl def icml_<capability>(ctx, config)``; remove hooks you don't
        declare.
        """
        rec = self._record()
        implemented = {cap for cap, hook in CAPABILITY_HOOKS.items()
                       if hasattr(rec.module, hook)}
        assert implemented == set(rec.info.capabilities), (
            f"implemented {sorted(implemented)} but declared {sorted(rec.info.capabilities)}")

    def test_config_defaults_valid(self) -> None:
        """Every config builds from its defaults, each key has help text, and the defaults
        survive a round trip through JSON.

        Troubleshooting: give each field a default and help via ``icml.option(default,
        help=...)``; keep values plain (numbers, strings, bools, lists, nested dataclasses).
        """
        info = self._record().info
        for cap, schema in info.configs.items():
            cfg = build_config(schema, {})
            rows = schema_rows(schema)
            missing_help = [r["key"] for r in rows if not r["help"]]
            assert not missing_help, f"{cap}: keys without help: {missing_help}"
            data = json.loads(json.dumps(to_dict(cfg)))
            assert build_config(schema, data) == cfg, f"{cap}: config does not round-trip"

    def test_config_rejects_unknown_keys(self) -> None:
        """An unknown key is a one-line ``ConfigError`` naming the key.

        Troubleshooting: use ``icml.config.build_config`` (the CLI does); do not accept
        ``**kwargs`` in config dataclasses.
        """
        info = self._record().info
        for cap, schema in info.configs.items():
            try:
                build_config(schema, {}, ["no_such_key_xyz=1"])
            except ConfigError as exc:
                assert "no_such_key_xyz" in str(exc) and "\n" not in str(exc)
            else:
                raise AssertionError(f"{cap}: unknown key was accepted")

    def test_smoke_overrides_are_valid(self) -> None:
        """``smoke`` names only declared capabilities and valid config keys.

        Troubleshooting: keys of ``smoke`` are capabilities; values are config overrides.
        """
        info = self._record().info
        assert set(self.smoke) <= set(info.capabilities), (
            f"smoke names {sorted(set(self.smoke) - set(info.capabilities))}, which are not "
            "capabilities of the plugin")
        for cap, overrides in self.smoke.items():
            build_config(info.configs[cap], {}, _to_set_args(overrides))

    def test_entry_module_is_light(self) -> None:
        """Importing the entry module in a fresh interpreter loads no heavy library.

        Troubleshooting: the entry module (``plugin.py``) and ``config.py`` may import only the
        standard library and ``icml``; import torch, transformers, scipy... inside hook bodies.
        """
        target = self._record().target.split(":")[0]
        assert_light_import(target)

    def test_smoke_runs(self, tmp_path: Path) -> None:
        """Each capability's default run, with the ``smoke`` overrides, completes on CPU,
        returns a valid ``RunResult`` and writes ``result.json`` and ``report.md``.

        Troubleshooting: run ``icml run <slug> <capability> --set ...`` with the same
        overrides and ``--debug`` to see the traceback; every artifact path in the result
        must exist.
        """
        from icml.runner import load_result, run

        info = self._record().info
        for cap in info.capabilities:
            overrides = _to_set_args(self.smoke.get(cap, {}))
            result = run(self.slug, cap, overrides=overrides, out=tmp_path / cap,
                         device=self.smoke_device, host=self._host(), show_progress=False)
            assert result.status == "ok"
            assert not result.problems(), result.problems()
            run_dir = Path(result.run_dir)
            for name in ("result.json", "report.md", "run.log"):
                assert (run_dir / name).is_file(), f"{cap}: {name} was not written"
            for label, path in result.artifacts.items():
                p = Path(path) if Path(path).is_absolute() else run_dir / path
                assert p.exists(), f"{cap}: artifact {label!r} -> {p} does not exist"
            assert load_result(run_dir).to_json() == result.to_json(), \
                f"{cap}: result.json does not read back to the returned result"
            assert result.metrics or result.tables, f"{cap}: the result reports nothing"

    # -- the config is the API (issue 48) --------------------------------------------------
    def test_config_defaults_exist_once(self) -> None:
        """Every nested config section's default is built by the section's own class, so a
        default is written once, in the class the method takes.

        Troubleshooting: declare the section as ``press: PressConfig =
        option(default_factory=PressConfig, help=...)``. If the job needs another default for
        a setting, change it in ``PressConfig`` (the API's default) or make it a job-level key
        with its own name -- never ``default_factory=lambda: PressConfig(tau=2.0)``. Keys that
        a nested section holds again (``tau`` and ``press.tau``) are reported as warnings.
        """
        import warnings

        from icml.testing.configs import default_problems, mirror_problems

        problems = []
        for cap, schema in self._record().info.configs.items():
            problems += [f"{cap}: {p}" for p in default_problems(schema)]
            for m in mirror_problems(schema):
                warnings.warn(f"{self.slug} {cap}: {m}: one setting under two keys?",
                              stacklevel=1)
        assert not problems, "\n".join(problems)

    def test_set_keys_reach_the_config(self) -> None:
        """``--set key=<value>`` for every key gives a config holding that value, unchanged, at
        that key (each key is set to a valid non-default value built by ``build_config``).

        Troubleshooting: a ``__post_init__`` must validate (raise ``ValueError``), not rewrite,
        clamp or move values; derived values belong in properties or the method. For a key
        the kit cannot find a valid value for, add it to ``probe_values``.
        """
        from icml.testing.configs import set_key_problems

        problems = []
        for cap, schema in self._record().info.configs.items():
            found, _ = set_key_problems(schema, self.probe_values)
            problems += [f"{cap}: {p}" for p in found]
        assert not problems, "\n".join(problems)

    def test_set_keys_reach_the_api(self) -> None:
        """Every key under each ``api`` path reaches the API object unchanged: the object is
        (or subclasses, or keeps) the config section that ``--set`` built.

        Troubleshooting: make the method take its config: ``class CapKVPress(PressConfig)``
        with no re-declared fields, or ``HetCPFLoRA(config: StrategyConfig)`` storing
        ``self.config = config`` and reading settings from it. Delete ``asdict`` hops, renamed
        keyword arguments and ``strict=False`` filters; validate once, in the config.
        """
        if not self.api:
            pytest.skip("no `api` declared: set api = {'<config path>': 'pkg.module:Class'} "
                        "to check that --set keys reach the method")
        from icml.testing.configs import api_problems

        problems = []
        for cap, schema, path, target, runtime in self._api_targets():
            problems += [f"{cap}: {p}" for p in api_problems(schema, path, target,
                                                             self.probe_values, runtime)]
        assert not problems, "\n".join(problems)

    def test_lazy_exports_resolve(self) -> None:
        """Every name the package's ``lazy_exports`` table lists resolves (this imports the
        submodules).

        Troubleshooting: the message names the export and why it failed: a renamed or moved
        function (fix the table), or an import error inside the submodule.
        """
        from icml.lazy import lazy_export_problems

        package = self._record().target.split(":")[0].rsplit(".", 1)[0]
        problems = lazy_export_problems(package)
        assert not problems, "\n".join(problems)

    # -- the one plugin shape (opt-in for now: shape_checks = True) ------------------------
    def test_readme_shape(self) -> None:
        """README.md has the required sections in order (claim, components, install, example,
        CLI, config keys, benchmark with a results block, known limits, citation), no release
        notes, and CHANGELOG.md and CITATION.cff exist.

        Troubleshooting: compare with the README ``icml new`` writes; move "Changes in ..."
        sections to CHANGELOG.md (``## <version>`` entries); render benchmark tables from
        results files (``icml run <slug> --save-results ...``, ``icml render <slug>``).
        """
        if not self.shape_checks:
            pytest.skip("shape checks are opt-in: set shape_checks = True")
        from icml.testing.shape import changelog_problems, citation_problems, readme_shape_problems

        root = self._root()
        problems = (readme_shape_problems(root) + changelog_problems(root)
                    + citation_problems(root))
        assert not problems, "\n".join(problems)

    def test_plugin_shape(self) -> None:
        """``plugin.py`` holds metadata and thin hook adapters only, the default jobs live in
        a typed ``job.py``, and ``config.py``, ``tests/test_conformance.py`` and ``results/``
        exist.

        Troubleshooting: move each hook's body into ``job.py`` (``def train(ctx:
        icml.RunContext, config: TrainConfig) -> icml.RunResult``) and call it from the hook;
        derive ``capabilities`` from the configs dict (``capabilities=tuple(CONFIGS)``).
        """
        if not self.shape_checks:
            pytest.skip("shape checks are opt-in: set shape_checks = True")
        from icml.testing.shape import plugin_shape_problems

        package = self._record().target.split(":")[0].rsplit(".", 1)[0]
        problems = plugin_shape_problems(self._root(), package)
        assert not problems, "\n".join(problems)


def _has_path(schema: type, path: str) -> bool:
    import dataclasses

    from icml.config import fields_of

    tp: Any = schema
    for part in [p for p in path.split(".") if p]:
        hit = [t for f, t in fields_of(tp) if f.name == part]
        if not hit or not (isinstance(hit[0], type) and dataclasses.is_dataclass(hit[0])):
            return False
        tp = hit[0]
    return True
