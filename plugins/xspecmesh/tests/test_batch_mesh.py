"""The batch benchmark's results-file path on a tiny setting (issue 54): rows decoded together
and one after another, for AR and XSpecMesh greedy, every row equal to its AR greedy output,
fewer backbone calls when rows go together, every clock column declared a timing."""

import json
import sys
from pathlib import Path

from icml.testing import load_script

BATCH = Path(__file__).resolve().parents[1] / "benchmarks" / "batch_mesh.py"


def test_batch_bench_writes_a_results_file_with_lossless_rows(tmp_path, monkeypatch):
    bench = load_script(BATCH, "xspecmesh_batch")
    out = tmp_path / "batch_tiny.json"
    argv = ["--prompts", "6", "--batch", "3", "--n-train", "32", "--backbone-steps", "2",
            "--distill-steps", "2", "--max-new-tokens", "20", "--out-results", str(out)]
    monkeypatch.setattr(sys, "argv", [str(BATCH), *argv])
    monkeypatch.delenv("ICML_RESULTS_DIR", raising=False)
    bench.main()
    data = json.loads(out.read_text())
    assert data["command"] == ("python plugins/xspecmesh/benchmarks/batch_mesh.py "
                               + " ".join(argv))
    (table,) = data["tables"]
    cols = table["columns"]
    rows = {r[0]: r for r in table["rows"]}
    assert len(rows) == 4
    assert all(r[cols.index("rows = AR greedy")] == "6/6" for r in rows.values())
    calls = cols.index("backbone calls / batch")
    one, together = (rows[f"AR greedy, rows {w}"][calls] for w in ("one after another",
                                                                    "together"))
    assert together < one
    assert set(data["tolerance"]) == set(bench.TIMING)
    assert data["quick"] is False
