"""The benchmark scripts write the results files the README tables are rendered from (issue 47),
checked at a tiny setting."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def test_bench_flower_writes_a_results_file(tmp_path):
    from icml import results

    out = tmp_path / "flower.json"
    args = ["--arms", "inprocess", "--rounds", "2", "--local-steps", "1", "--pretrain-steps", "1",
            "--out-results", str(out)]
    subprocess.run([sys.executable, str(BENCH / "bench_flower.py"), *args], check=True,
                   capture_output=True, text=True)
    data = results.load(out)
    assert data["command"] == ("OMP_NUM_THREADS=1 python plugins/het-cpflora/benchmarks/"
                               "bench_flower.py " + " ".join(args))
    (table,) = data["tables"]
    assert table["columns"][0] == "backend" and table["columns"][-1] == (
        "final adapters identical to in-process")
    ((label, _r1, _r2, ratio, _total, up, wire, same),) = table["rows"]
    assert label == "in-process simulator" and ratio == 1.0 and same is True
    assert up > 0 and wire is None
    for col in ("round 1 s", "rounds 2+ s/round", "vs in-process", "total s"):
        assert data["tolerance"][col]["timing"] is True   # clock readings: shown, not compared
    assert "upload B/round (tensors)" not in data["tolerance"]   # bytes are exact


def test_flower_table_rows_ratio_and_identity():
    sys.path.insert(0, str(BENCH))
    try:
        from bench_flower import table_rows
    finally:
        sys.path.remove(str(BENCH))
    rows = [("in-process", [1.0, 2.0, 2.0], 5.0, 100.0, None, "inprocess"),
            ("sim", [60.0, 3.0, 3.0], 66.0, 100.0, 160.0, "simulation")]
    got = table_rows(rows, {"inprocess": True, "simulation": False})
    assert got[0][2:4] == [2.0, 1.0] and got[1][2:4] == [3.0, 1.5]
    assert got[1][-1] is False and got[1][-2] == 160.0
    # without the in-process arm there is no ratio
    assert table_rows(rows[1:], {})[0][3] is None


@pytest.mark.pretrained
@pytest.mark.slow
def test_bench_pretrained_writes_a_results_file(tmp_path):
    from icml.testing import pretrained_or_skip

    pretrained_or_skip("smollm2-135m-instruct")
    from icml import results

    out = tmp_path / "pre.json"
    args = ["--rounds", "1", "--local-steps", "1", "--strategies", "local",
            "--out-results", str(out)]
    subprocess.run([sys.executable, str(BENCH / "bench_pretrained.py"), *args], check=True,
                   capture_output=True, text=True)
    data = results.load(out)
    assert data["command"] == ("python plugins/het-cpflora/benchmarks/bench_pretrained.py "
                               + " ".join(args))
    assert [r[0] for r in data["tables"][0]["rows"]] == ["local"]
    assert data["tolerance"]["s/round"]["timing"] is True


@pytest.mark.pretrained
@pytest.mark.slow
def test_bench_rouge_writes_a_results_file(tmp_path):
    from icml.testing import pretrained_or_skip

    pretrained_or_skip("smollm2-135m-instruct")
    from icml import results

    out = tmp_path / "rouge.json"
    args = ["--seeds", "0", "--strategies", "het-cpflora", "local", "--rounds", "1",
            "--local-steps", "1", "--train-size", "4", "--test-size", "2",
            "--max-new-tokens", "4", "--r-shared", "2", "2", "--r-personal", "1", "1",
            "--out-results", str(out)]
    subprocess.run([sys.executable, str(BENCH / "bench_rouge.py"), *args], check=True,
                   capture_output=True, text=True)
    data = results.load(out)
    assert data["command"] == "python plugins/het-cpflora/benchmarks/bench_rouge.py " + \
        " ".join(args)
    main, claims = data["tables"]
    arms = [r[0] for r in main["rows"]]
    assert arms == ["het-cpflora (fixed)", "het-cpflora (OOD)", "local"]
    assert main["rows"][2][7] == 0                      # local-only sends nothing
    assert main["rows"][0][7] > 0
    assert data["tolerance"]["s/run"]["timing"] is True
    assert any(r[0] == "generalization vs local-only" for r in claims["rows"])
