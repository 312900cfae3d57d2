"""Issue 66: under ``ICML_STRICT_PLUGINS=1`` (CI) a test that skips because a module its
distribution declares does not import fails instead of skipping; undeclared optional modules
still skip (icml-core's pytest plugin, ``icml.testing.pytest_plugin``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from icml.testing.pytest_plugin import declared_modules

PYPROJECT = """\
[project]
name = "icml-demo"
version = "0.0.1"
dependencies = ["numpy>=1", "nosuch_base_mod_icml>=1"]

[project.optional-dependencies]
test = ["pytest>=7", "icml-demo[extra]"]
extra = ["Nosuch.Extra-Mod_icml"]
other = ["nosuch_other_mod_icml"]
"""

TESTS = """\
import pytest

def test_declared_in_test_extra():
    pytest.importorskip("nosuch_extra_mod_icml")

def test_declared_in_dependencies():
    pytest.importorskip("nosuch_base_mod_icml.sub")

def test_not_declared():
    pytest.importorskip("nosuch_other_mod_icml")

def test_plain_skip():
    pytest.skip("not an import")
"""

MODULE_LEVEL = """\
import pytest

pytest.importorskip("nosuch_extra_mod_icml")

def test_never_runs():
    pass
"""


def _run(tmp_path: Path, strict: bool, optional: str = "") -> str:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    tests = tmp_path / "tests"
    tests.mkdir(exist_ok=True)
    (tests / "test_a.py").write_text(TESTS)
    (tests / "test_b.py").write_text(MODULE_LEVEL)
    env = {k: v for k, v in os.environ.items()
           if k not in ("ICML_STRICT_PLUGINS", "ICML_OPTIONAL_DEPS", "PYTEST_ADDOPTS")}
    if strict:
        env["ICML_STRICT_PLUGINS"] = "1"
    if optional:
        env["ICML_OPTIONAL_DEPS"] = optional
    proc = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider",
                           "--continue-on-collection-errors", str(tests)],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    return proc.stdout + proc.stderr


def test_declared_modules_follow_the_test_extra(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    names = declared_modules(tmp_path / "pyproject.toml")
    assert {"numpy", "nosuch-base-mod-icml", "nosuch-extra-mod-icml", "pytest"} <= names
    assert "nosuch-other-mod-icml" not in names  # an extra the test extra does not name


def test_without_strict_every_import_skip_skips(tmp_path: Path) -> None:
    out = _run(tmp_path, strict=False)
    assert "5 skipped" in out and "failed" not in out and " error" not in out.lower(), out


def test_strict_fails_declared_modules_and_keeps_other_skips(tmp_path: Path) -> None:
    out = _run(tmp_path, strict=True)
    assert "FAILED tests/test_a.py::test_declared_in_test_extra" in out, out
    assert "FAILED tests/test_a.py::test_declared_in_dependencies" in out, out
    assert "ERROR tests/test_b.py" in out, out  # module-level importorskip: collection error
    assert "SKIPPED" in out and "2 failed" in out and "2 skipped" in out, out
    assert "ICML_STRICT_PLUGINS=1: the test needs 'nosuch_extra_mod_icml'" in out, out


def test_optional_deps_may_skip_under_strict(tmp_path: Path) -> None:
    out = _run(tmp_path, strict=True, optional="nosuch_extra_mod_icml,nosuch_base_mod_icml")
    assert "5 skipped" in out and "failed" not in out, out
