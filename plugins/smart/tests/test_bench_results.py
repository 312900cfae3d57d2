"""``benchmarks/bench_throughput.py --out-results`` writes the throughput/memory table as a
results file (issue 47), checked at a tiny query count."""

import subprocess
import sys
from pathlib import Path

from icml.testing import load_script

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _bench():
    # a plugin-qualified module name: another plugin's test may load its own bench_throughput.py
    return load_script(BENCH / "bench_throughput.py", "smart_bench_throughput")


def test_throughput_writes_a_results_file(tmp_path):
    from icml import results

    out = tmp_path / "thr.json"
    args = ["--queries", "100", "--out-results", str(out)]
    subprocess.run([sys.executable, str(BENCH / "bench_throughput.py"), *args], check=True,
                   capture_output=True, text=True)
    data = results.load(out)
    assert data["command"] == ("python plugins/smart/benchmarks/bench_throughput.py "
                               + " ".join(args))
    (table,) = data["tables"]
    assert [r[:2] for r in table["rows"]] == [[100, "chunks of 16,384"], [100, "unchunked"]]
    assert table["rows"][0][3] > 0 and table["rows"][1][3] is None   # ratio on chunked rows
    assert data["tolerance"]["queries/s"]["timing"] is True
    assert data["tolerance"]["peak RSS MB"]["rel"] == 0.25
    assert "| 100 | unchunked |" in results.render_table(table)


def test_table_rows_ratio_and_failed_settings():
    rows = [{"queries": 10, "chunk": 4, "queries_per_s": 30.0, "peak_rss_mb": 1.0,
             "peak_over_start_mb": 0.5, "inputs_outputs_mb": 0.1},
            {"queries": 10, "chunk": 10, "queries_per_s": 10.0, "peak_rss_mb": 2.0,
             "peak_over_start_mb": 1.5, "inputs_outputs_mb": 0.1},
            {"queries": 20, "chunk": 4, "error": "killed"}]
    got = _bench().table_rows(rows)
    assert got[0][3] == 3.0 and got[1][3] is None
    assert got[2][:3] == [20, "chunks of 4 (failed)", None]
