"""Fixtures for cross-package tests: fake installed distributions on a temporary sys.path entry,
so discovery is exercised through real entry points without pip."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
_SCRIPT = Path(sys.executable).parent / "icml"
# The installed console script when present (as users run it), else the module.
ICML = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "icml.cli"]


class Site:
    """A folder on sys.path (and PYTHONPATH for subprocesses) holding fake distributions."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(self, dist: str, entry_points: dict[str, str], *, version: str = "0.1.0",
            modules: dict[str, str] | None = None, requires: tuple[str, ...] = (),
            summary: str = "a test plugin") -> None:
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        meta = ["Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}",
                f"Summary: {summary}"] + [f"Requires-Dist: {r}" for r in requires]
        (info / "METADATA").write_text("\n".join(meta) + "\n")
        eps = "[icml.plugins]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items())
        (info / "entry_points.txt").write_text(eps)
        for name, source in (modules or {}).items():
            (self.root / f"{name}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()

    def add_example(self, dist: str = "icml-example", slug: str = "example") -> None:
        self.add(dist, {slug: "icml_example"},
                 modules={"icml_example": (FIXTURES / "icml_example.py").read_text()})

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ICML_")}
        env["PYTHONPATH"] = os.pathsep.join([str(self.root), env.get("PYTHONPATH", "")])
        env.update(extra)
        return env


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    for var in [v for v in os.environ if v.startswith("ICML_")]:
        monkeypatch.delenv(var)
    # Only the fake plugins of this test: hide the plugins installed in the environment.
    monkeypatch.setattr("icml.loader.md.distributions", _only_under(root))
    yield Site(root)
    for name in [m for m in sys.modules if m.startswith("icml_") and _from(m, root)]:
        del sys.modules[name]


def _from(module: str, root: Path) -> bool:
    f = getattr(sys.modules.get(module), "__file__", None) or ""
    return f.startswith(str(root))


def _only_under(root: Path) -> Callable[[], list]:
    import importlib.metadata as md

    def distributions() -> list:
        return list(md.Distribution.discover(path=[str(root)]))

    return distributions


@pytest.fixture
def cli(site: Site) -> Callable[..., subprocess.CompletedProcess]:
    """Run the installed console script in a fresh interpreter, seeing the fake site (and,
    through the real environment, the installed plugins unless ICML_PLUGINS restricts them)."""

    def run(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([*ICML, *args], capture_output=True, text=True, timeout=300,
                              cwd=cwd, env=site.env(**env))

    return run
