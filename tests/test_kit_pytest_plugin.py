"""icml-core's pytest plugin: one torch thread per test unless OMP_NUM_THREADS says otherwise,
restored afterwards, and never an import of torch the session did not make (issue 48)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from icml.testing.pytest_plugin import default_threads, torch_threads

CONFTEST = """
import json, os, sys

def pytest_sessionfinish(session):
    torch = sys.modules.get("torch")
    out = {"after": torch.get_num_threads() if torch else None}
    with open(os.environ["PROBE_OUT"], "w") as fh:
        json.dump(out, fh)
"""

WITH_TORCH = """
import pytest
import torch

torch.set_num_threads(3)  # the count the session had before any test


def test_default_is_one_or_omp():
    import os
    assert torch.get_num_threads() == int(os.environ.get("OMP_NUM_THREADS") or 1)


@pytest.mark.torch_threads(2)
def test_mark_sets_the_count():
    assert torch.get_num_threads() == 2


def test_count_came_back_between_tests():
    import os
    assert torch.get_num_threads() == int(os.environ.get("OMP_NUM_THREADS") or 1)
"""

WITHOUT_TORCH = """
import sys


def test_torch_is_not_imported_by_the_plugin():
    assert "torch" not in sys.modules
"""


def test_entry_point_is_registered() -> None:
    eps = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert eps.get("icml_testing") == "icml.testing.pytest_plugin", \
        "reinstall icml-core (pip install -e core) to register its pytest plugin"


def _run(tmp_path: Path, body: str, **env: str) -> tuple[subprocess.CompletedProcess, str]:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(body))
    probe = tmp_path / "probe.json"
    full = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    full.update(env, PROBE_OUT=str(probe))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(tmp_path)], capture_output=True, text=True, env=full,
                          timeout=300, cwd=tmp_path)
    return proc, probe.read_text() if probe.exists() else ""


def test_one_thread_per_test_and_restored(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc, probe = _run(tmp_path, WITH_TORCH)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout
    assert probe == '{"after": 3}'  # the session's own count is back after the last test


def test_omp_num_threads_wins(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc, _ = _run(tmp_path, WITH_TORCH, OMP_NUM_THREADS="2")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_plugin_never_imports_torch(tmp_path: Path) -> None:
    proc, probe = _run(tmp_path, WITHOUT_TORCH)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert probe == '{"after": null}'


def test_default_threads_reads_omp(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, want in (("", 1), ("4", 4), ("0", 1), ("x", 1)):
        monkeypatch.setenv("OMP_NUM_THREADS", value)
        assert default_threads() == want
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert default_threads() == 1


def test_context_manager_restores() -> None:
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    with torch_threads(2) as n:
        assert n == 2 and torch.get_num_threads() == 2
    assert torch.get_num_threads() == before
