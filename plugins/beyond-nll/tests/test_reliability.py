"""Issue 16 for this plugin: bad values are one-line config errors (exit 2), diverged arms are
results, finished arms survive a failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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

SMOKE = ["pretrain_steps=5", "steps=3", "n_strong=16", "n_weak=16", "n_test=8",
         "objectives=logp,p", "batch_size=8"]


def test_divergence_is_flagged_not_silent(tmp_path: Path) -> None:
    proc = icml_cli("run", "beyond-nll", *(f"--set={s}" for s in SMOKE), "--set", "lr=1e9",
                    "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "diverged" in proc.stderr
    (run_dir,) = tmp_path.iterdir()
    from icml.runner import load_result

    res = load_result(run_dir)
    assert any(k.startswith("diverged_") and v >= 1 for k, v in res.metrics.items())
    assert "**Diverged**" in res.notes


def test_sane_lr_does_not_flag_divergence(tmp_path: Path) -> None:
    from icml.runner import run

    res = run("beyond-nll", overrides=SMOKE, out=tmp_path, show_progress=False, device="cpu")
    assert not any(k.startswith("diverged_") for k in res.metrics)


def test_default_threads_is_one() -> None:
    proc = icml_cli("info", "beyond-nll", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["default_threads"] == 1
