"""Issue 66: CI cannot skip the TRL route. icml-core's pytest plugin (>= 0.1.7) turns a
``pytest.importorskip`` of a module that this distribution declares (``dependencies`` or the
``test`` extra) into a failure under ``ICML_STRICT_PLUGINS=1``, which CI sets. These tests
check that every module our tests import-or-skip is declared, so the mechanism covers it, and
that a test run without trl fails."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from icml.testing.pytest_plugin import declared_modules

HERE = Path(__file__).parent
PYPROJECT = HERE.parent / "pyproject.toml"


def _skipped_modules() -> set[str]:
    found = set()
    for f in HERE.glob("*.py"):
        found |= set(re.findall(r"importorskip\(\s*[\"']([\w.]+)[\"']", f.read_text()))
    return found


def test_every_import_or_skip_module_is_declared():
    declared = declared_modules(PYPROJECT)
    skipped = _skipped_modules()
    assert {"trl", "datasets", "peft"} <= skipped     # the scan sees the tests' skips
    missing = {m for m in skipped if m.split(".")[0].replace("_", "-") not in declared}
    assert not missing, f"declare {sorted(missing)} in pyproject's test extra"
    assert "trl" in declared                          # the TRL route's tests cannot skip


def test_missing_trl_fails_under_strict_mode(tmp_path):
    """A trl that does not import (a stub first on the path raising ModuleNotFoundError, as a
    missing package does): the TRL adapter's test module fails under ``ICML_STRICT_PLUGINS=1``
    instead of skipping (that it skips without the variable is icml-core's test)."""
    stub = tmp_path / "stub" / "trl"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'trl' (test stub)\", name='trl')\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("ICML_OPTIONAL_DEPS", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "stub"), env.get("PYTHONPATH", "")])
    env["ICML_STRICT_PLUGINS"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(HERE / "test_trl_adapter.py")],
        capture_output=True, text=True, env=env, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode in (1, 2), out[-2000:]     # failed (a module-level skip: 2, an
    assert "ICML_STRICT_PLUGINS=1: the test needs 'trl'" in out, out[-2000:]  # error in collection)
    assert "skipped" not in out.strip().splitlines()[-1], out[-2000:]
