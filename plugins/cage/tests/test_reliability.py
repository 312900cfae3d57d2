"""Issue 16 for this plugin: bad values are one-line config errors (exit 2), diverged arms are
results, finished arms survive a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(sys.executable).parent / "icml"
ICML = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "icml.cli"]


def icml_cli(*args: str) -> subprocess.CompletedProcess:
    """The installed console script in a fresh interpreter, as a user runs it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run([*ICML, *args], capture_output=True, text=True, timeout=300, env=env)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    return line


@pytest.mark.parametrize("cap", ["evaluate", "train"])
def test_unknown_family_exits_2(tmp_path: Path, cap: str) -> None:
    proc = icml_cli("run", "cage", cap, "--set", "families=foo", "--set", "n_images=1",
                    "--out", str(tmp_path))
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert "'families'" in line and "'foo'" in line and "domino" in line
