"""benchmarks/bench.py writes its tables as a results file (what the README renders), on a tiny
setting: 16 sentences, one run per variant, the planted model and the byte model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from icml import results as R
from icml.testing import load_script

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench.py"


@pytest.mark.slow
def test_bench_writes_its_results_file(tmp_path):
    out = tmp_path / "bench.json"
    subprocess.run([sys.executable, str(BENCH), "--n", "16", "--repeats", "1", "--models",
                    "planted", "--threads", "1", "--skip-protocol", "--out-results", str(out)],
                   check=True, capture_output=True, text=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    data = R.load(out)
    names = [t["name"] for t in data["tables"]]
    assert names == ["extraction", "speedup", "early_stop"]
    assert [r[1] for r in data["tables"][0]["rows"]][:2] == ["naive loop",
                                                             "batched (batch_tokens=1024)"]
    # clock readings are declared timing (never compared); labels are compared
    assert "full pipeline sent/s wall / CPU" in data["tolerance"]
    assert "method" not in data["tolerance"] and "model" not in data["tolerance"]
    assert data["command"].startswith("python plugins/synsem/benchmarks/bench.py --n 16")
    assert "flags:" in data["notes"]  # the CPU flags (avx512_bf16, amx_bf16, ...) are recorded


def test_precision_rows_pair_the_right_arms():
    """The precision table's ratios (issue 70): the goal's cross-precision ratio is the float32
    naive loop's time over the batched bfloat16 path's, and each same-precision ratio pairs arms
    of one dtype."""
    bench = load_script(BENCH, "synsem_bench")
    secs = {"naive": 8.0, "batched": 4.0, "naive:bfloat16": 6.0, "batched:bfloat16": 1.0,
            "batched-nobucket": 5.0, "batched-nobucket:bfloat16": 1.5}
    res = {v: {"full": s, "full_cpu": s, "extract": s / 2, "extract_cpu": s / 2}
           for v, s in secs.items()}
    rows = {r[0].strip("*").split(":")[0]: r[1:] for r in bench.precision_rows(
        res, {"bucketed": 1.02, "input order": 1.3})}
    assert rows["cross-precision (the goal, >= 5x)"][0] == "**8.0x / 8.0x**"
    assert rows["same precision, float32"][:2] == ["2.0x / 2.0x", "2.0x / 2.0x"]
    assert rows["same precision, bfloat16"][0] == "6.0x / 6.0x"
    assert rows["bucketing, float32"] == ["1.2x / 1.2x", "1.2x / 1.2x", "1.02 / 1.30"]
    assert rows["bucketing, bfloat16"][0] == "1.5x / 1.5x"
    assert rows["precision alone, batched"][0] == "4.0x / 4.0x"
