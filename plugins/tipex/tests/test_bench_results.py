"""The benchmark scripts write the results files the README renders or will render (issue 47),
checked on tiny settings: the command as typed, the tables, and the clock columns declared."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from icml import results

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
ROOT = Path(__file__).resolve().parents[3]


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / script), *args], cwd=ROOT,
                          capture_output=True, text=True)


def test_batch_part_tiny_model_writes_results_file(tmp_path):
    out = tmp_path / "batch.json"
    args = ["--parts", "batch", "--batch-models", "tiny", "--batch-requests", "4",
            "--batch-tokens", "3", "--out-results", str(out)]
    done = _run("bench.py", *args)
    assert done.returncode == 0, done.stderr
    data = results.load(out)
    assert data["command"] == "python plugins/tipex/benchmarks/bench.py " + " ".join(args)
    rows = results.find_table(data, "batch")["rows"]
    assert [r[1] for r in rows] == [1, 4, 16]
    assert [r[2] for r in rows] == [4, 1, 1]          # generate calls: one per request, then one
    assert all(r[-1] == "yes" for r in rows)            # same texts in every arm
    assert all(data["tolerance"][c]["timing"]
               for c in ("wall s", "tokens per s", "speed-up vs batch_size=1"))


def test_batch_models_are_checked(tmp_path):
    done = _run("bench.py", "--parts", "batch", "--batch-models", "tiny,huge",
                "--out-results", str(tmp_path / "x.json"))
    assert done.returncode != 0 and "--batch-models" in done.stderr
    assert not (tmp_path / "x.json").exists()


def test_throughput_ab_writes_results_file(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git repository (git archive of --ref)")
    out = tmp_path / "ab.json"
    done = _run("throughput_ab.py", "--ref", "HEAD", "--tasks", "2", "--rounds", "1",
                "--out-results", str(out))
    assert done.returncode == 0, done.stderr
    data = results.load(out)
    rows = results.find_table(data, "throughput_ab")["rows"]
    assert len(rows) == 24 and all(r[-1] == "yes" for r in rows)  # same results both versions
    assert data["tolerance"]["speed-up"]["timing"]


@pytest.mark.slow
def test_instructions_ab_writes_results_file(tmp_path):
    if shutil.which("valgrind") is None or not (ROOT / ".git").exists():
        pytest.skip("needs valgrind and the git repository")
    out = tmp_path / "ins.json"
    done = _run("instructions_ab.py", "--ref", "HEAD", "--tasks", "2", "--rows", "1",
                "--out-results", str(out))
    assert done.returncode == 0, done.stderr
    rows = results.find_table(results.load(out), "instructions_ab")["rows"]
    assert [r[6] for r in rows] == ["run", "model alone"]


def test_peer_langgraph_writes_results_file(tmp_path):
    pytest.importorskip("langgraph")
    out = tmp_path / "peer.json"
    done = _run("peer_langgraph.py", "--tasks", "3", "--out-results", str(out))
    assert done.returncode == 0, done.stderr
    data = results.load(out)
    sem = results.find_table(data, "semantics")["rows"]
    assert [r[4] for r in sem] == ["3/3"] * 8            # same answers on every task
    assert all(r[5] == r[6] for r in sem)                # same tokens
    over = results.find_table(data, "overhead")["rows"]
    assert over[0][1] == over[1][1]                       # same model calls
    assert data["tolerance"]["us per call"]["timing"]


def test_real_table_and_calibration_write_results_files(tmp_path):
    """The real-model table's script on the tiny random model (the plumbing: replicas, N rows,
    gains, cost, the calibration data) and the calibration on its file."""
    out = tmp_path / "real.json"
    args = ["--model", "tiny", "--levels", "1", "--tasks", "2", "--replicas", "3",
            "--out-results", str(out)]
    done = _run("real_table.py", *args)
    assert done.returncode == 0, done.stderr
    data = results.load(out)
    assert data["command"] == "python plugins/tipex/benchmarks/real_table.py " + " ".join(args)
    rows = results.find_table(data, "accuracy")["rows"]
    assert [(r[1].split(" ")[0], r[2]) for r in rows] == [
        ("bare", 1), ("bare", 3), ("DAG", 1), ("DAG", 3)]
    assert all(0 <= r[4] <= 1 and r[3] == 2 for r in rows)
    assert len(results.find_table(data, "gains")["rows"]) == 4
    assert all(data["tolerance"][c]["timing"] for c in ("wall s", "wall s per path"))
    m = data["metrics"]
    assert m["steps"] and all(s[m["steps_columns"].index("right")] in (0, 1) for s in m["steps"])
    assert len(m["paths"]) == 2 * 2 * 3  # structures x tasks x replicas
    cal = tmp_path / "cal.json"
    done = _run("calibrate.py", "--real", str(out), "--tasks", "4", "--out-results", str(cal))
    if "too few to fit" in done.stderr:  # (a random model may fetch almost nothing)
        return
    assert done.returncode == 0, done.stderr
    c = results.load(cal)
    assert [r[0] for r in results.find_table(c, "claims")["rows"]] == ["assumed"] * 4 + [
        "calibrated"] * 4
