"""The overhead benchmark's results-file path (issue 47), on the tiny models only: every clock
column is declared `timing` (shown, never compared) and the command is the invocation."""

import json
import sys
from pathlib import Path

from icml.testing import load_script

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_overhead.py"


def test_overhead_writes_a_results_file_with_timing_columns(tmp_path, monkeypatch):
    bench = load_script(BENCH, "sarsteer_bench_overhead")
    out = tmp_path / "overhead.json"
    monkeypatch.setattr(sys, "argv", [str(BENCH), "--tokens", "4", "--repeats", "1",
                                      "--out-results", str(out)])
    monkeypatch.delenv("ICML_RESULTS_DIR", raising=False)
    bench.main()
    data = json.loads(out.read_text())
    assert data["command"] == ("python plugins/sarsteer/benchmarks/bench_overhead.py --tokens 4 "
                               f"--repeats 1 --out-results {out}")
    (table,) = data["tables"]
    assert table["name"] == "overhead" and table["columns"] == bench.COLUMNS
    assert [r[:3] for r in table["rows"]] == [["tiny llama (hidden 64, 4 layers)", 4, 4],
                                              ["tiny qwen2 (hidden 64, 4 layers)", 4, 4]]
    assert all(data["tolerance"][c]["timing"] is True for c in bench.COLUMNS[3:])
