"""benchmarks/gpu_check.py (every plugin's default job on one device) runs end to end on the CPU,
and a device the machine lacks fails the job cleanly without stopping the script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


def _check(tmp_path: Path, device: str) -> tuple[int, dict]:
    out = tmp_path / device
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", device, "--only", "dxpp",
                           "--no-bench", "--jobs", "1", "--deadline", "240", "--out", str(out),
                           "--work", str(tmp_path / f"work-{device}")],
                          capture_output=True, text=True, timeout=300)
    assert (out / "summary.md").exists() and (out / "runs.tar.gz").exists(), proc.stderr
    return proc.returncode, json.loads((out / "summary.json").read_text(encoding="utf-8"))


def test_default_job_runs_and_is_summarised(tmp_path: Path) -> None:
    rc, summary = _check(tmp_path, "cpu")
    (job,) = summary["jobs"]
    assert (rc, job["name"], job["status"], job["rc"]) == (0, "dxpp", "ok", 0), job
    assert job["result_json"] and job["line"].startswith("ok")
    assert (tmp_path / "work-cpu" / job["result_json"].removeprefix("runs/")).exists()


def test_missing_device_fails_the_job_not_the_script(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    rc, summary = _check(tmp_path, "cuda")
    (job,) = summary["jobs"]
    assert (rc, job["status"], job["rc"]) == (1, "failed", 2), job
    assert "CUDA" in job["line"] or "cuda" in job["line"]
