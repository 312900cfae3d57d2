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
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from icml.config import ConfigError, build_config, schema_rows, to_dict
from icml.hookspecs import CAPABILITY_HOOKS
from icml.loader import GROUP, HEAVY_MODULES, PluginHost, PluginRecord, discover, load_plugins

__all__ = ["PluginConformance", "assert_light_import", "icml_cli", "one_line_error",
           "pretrained_or_skip"]


def icml_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
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
    import pytest

    from icml.pretrained import PretrainedModelError, load_pretrained

    try:
        return load() if load is not None else load_pretrained(name, **kwargs)
    except PretrainedModelError as exc:
        if os.environ.get("ICML_REQUIRE_PRETRAINED") == "1":
            pytest.fail(f"ICML_REQUIRE_PRETRAINED=1 but the model cannot be loaded: {exc}")
        pytest.skip(f"packaged model not installed: {exc}")


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
    """

    slug: ClassVar[str] = ""
    smoke: ClassVar[dict[str, dict[str, Any]]] = {}
    smoke_device: ClassVar[str] = "cpu"

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
