"""benchmarks/bench.py writes the cost table as a results file (issue 47), checked on a tiny
setting: the command as typed, one row per variant and dtype, clock columns declared timing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from icml import results

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench.py"
ROOT = Path(__file__).resolve().parents[3]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], cwd=ROOT, capture_output=True,
                          text=True)


def test_out_results_needs_one_part(tmp_path):
    done = _run("--part", "both", "--out-results", str(tmp_path / "x.json"))
    assert done.returncode != 0 and "--out-results needs --part claim or --part cost" in done.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_cost_writes_results_file(tmp_path):
    out = tmp_path / "cost.json"
    args = ["--part", "cost", "--tokens", "32", "--vocab", "256", "--reps", "1", "--rounds", "1",
            "--dtypes", "float32", "--out-results", str(out)]
    done = _run(*args)
    assert done.returncode == 0, done.stderr
    data = results.load(out)
    assert data["command"] == "python plugins/beyond-nll/benchmarks/bench.py " + " ".join(args)
    table = results.find_table(data, "cost")
    assert [r[0] for r in table["rows"]][:2] == ["hf_cross_entropy", "official_logsoftmax_p"]
    assert len(table["rows"]) == 11 and {r[1] for r in table["rows"]} == {"float32"}
    ce = table["rows"][0]
    assert ce[3] == 1.0 and ce[5] == 1.0  # CE against itself
    assert all(data["tolerance"][c]["timing"] for c in table["columns"][2:4])
    assert all(data["tolerance"][c]["rel"] == 0.15 for c in table["columns"][4:])
