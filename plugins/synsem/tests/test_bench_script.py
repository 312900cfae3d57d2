"""benchmarks/bench.py writes its tables as a results file (what the README renders), on a tiny
setting: 16 sentences, one run per variant, the planted model and the byte model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from icml import results as R

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
