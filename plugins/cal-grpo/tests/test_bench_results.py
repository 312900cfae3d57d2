"""The benchmark scripts write the results files the README renders (issue 47), checked on a tiny
setting: tables, the command as typed, and the exact tables equal to the library's numbers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from icml import results

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
ROOT = Path(__file__).resolve().parents[3]


def _run(script: str, *args: str) -> None:
    subprocess.run([sys.executable, str(BENCH / script), *args], check=True, cwd=ROOT,
                   capture_output=True, text=True)


def test_bench_writes_results_file(tmp_path):
    out = tmp_path / "bench.json"
    _run("bench.py", "--parts", "tabular", "--tabular-seeds", "2", "--tabular-steps", "2",
         "--out-results", str(out))
    data = results.load(out)
    assert data["command"] == ("python plugins/cal-grpo/benchmarks/bench.py --parts tabular "
                               f"--tabular-seeds 2 --tabular-steps 2 --out-results {out}")
    names = [t["name"] for t in data["tables"]]
    assert names == ["tabular-training", "uniform", "random", "variance-ratio", "variance-split"]
    split = results.find_table(data, "variance-split")
    g3 = next(r for r in split["rows"] if r[0] == "uniform" and r[1] == 3)
    assert g3[2] == "1.0218" and float(g3[-1]) > 1       # at G=3 the extra noise > the gain
    train = results.find_table(data, "tabular-training")
    assert len(train["rows"]) == 6 and train["columns"][-1] == "MDE"
    # trajectory is the reference arm: no difference, no MDE
    assert [r[-2:] for r in train["rows"] if r[0] == "trajectory"] == [["-", "-"]] * 2
    uniform = results.find_table(data, "uniform")
    # CAL and trajectory GRPO are unbiased without scaling (round-off only)
    for row in uniform["rows"]:
        if row[0] in ("cal", "trajectory") and row[1] == "none":
            assert float(row[3]) < 1e-12 and row[4] == "1.000"


def test_bench_rejects_unknown_part(tmp_path):
    with pytest.raises(subprocess.CalledProcessError) as e:
        _run("bench.py", "--parts", "tabular,nope", "--out-results", str(tmp_path / "x.json"))
    assert "unknown ['nope']" in e.value.stderr
    assert not (tmp_path / "x.json").exists()


def test_bench_rollout_writes_timing_results_file(tmp_path):
    pytest.importorskip("trl")
    out = tmp_path / "rollout.json"
    _run("bench_rollout.py", "--model", "tiny", "--reps", "1", "--prompts", "2",
         "--num-generations", "2", "--tokens", "3", "--out-results", str(out))
    data = results.load(out)
    table = results.find_table(data, "rollout")
    assert [r[0] for r in table["rows"]][0] == "ours, cache, K=3 (feedback turns)"
    assert all(data["tolerance"][c]["timing"] for c in table["columns"][1:])


@pytest.mark.pretrained
def test_real_task_writes_results_file(tmp_path):
    """The superseded 0.2.0 capitals script (tables archived in CHANGELOG.md) still writes its
    results file: one seed, one update, two held-out questions on SmolLM2."""
    pytest.importorskip("peft")
    out = tmp_path / "real_task.json"
    _run("real_task.py", "--modes", "cal", "--seeds", "0", "--steps", "1",
         "--num-generations", "2", "--prompts-per-step", "1", "--eval-gens", "1",
         "--test-questions", "2", "--out", str(tmp_path / "runs.jsonl"),
         "--out-results", str(out))
    data = results.load(out)
    rows = results.find_table(data, "per_run")["rows"]
    assert [r[0] for r in rows] == ["base", "cal"]
    assert all(0 <= r[2] <= r[3] <= 1 for r in rows)  # Ver@1 <= Ver@3
    assert [r[0] for r in results.find_table(data, "arms")["rows"]] == ["base", "cal"]
    assert data["tolerance"]["train wall s"]["timing"]


def test_real_task_arith_rejects_bad_settings():
    """Bad settings are one-line errors before the model loads."""
    for args, what in ((["--dtype", "float16"], "--dtype"), (["--threads", "0"], "--threads")):
        with pytest.raises(subprocess.CalledProcessError) as e:
            _run("real_task_arith.py", "run", *args, "--out", "/dev/null")
        assert what in e.value.stderr.strip().splitlines()[-1]


@pytest.mark.pretrained
def test_real_task_arith_bf16_run_and_report(tmp_path):
    """The powered comparison's path on a tiny slice: a bf16 run (one update, two arms, four
    held-out questions) and its report's results file with the setting in the titles."""
    pytest.importorskip("peft")
    runs, out = tmp_path / "runs.jsonl", tmp_path / "r.json"
    _run("real_task_arith.py", "run", "--modes", "trajectory,cal", "--seeds", "0", "--steps",
         "1", "--num-generations", "2", "--prompts-per-step", "1", "--n-test", "4",
         "--dtype", "bfloat16", "--out", str(runs))
    _run("real_task_arith.py", "report", str(runs), "--out-results", str(out))
    data = results.load(out)
    assert "bfloat16, G=2 x 1 questions" in results.find_table(data, "arms")["title"]
    paired = results.find_table(data, "paired")
    assert [r[0] for r in paired["rows"]] == ["cal - trajectory"] * 2
    assert paired["columns"][-1] == "verdict"
