"""The mesh benchmark's results-file path (issue 47), on a tiny setting: the README's mesh
tables are pending a rerun, and this is the path that rerun takes."""

import json
import sys
from pathlib import Path

from icml.testing import load_script

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench.py"
TINY = ["--set", "n_train=64", "--set", "hidden_size=16", "--set", "num_layers=1",
        "--set", "backbone_steps=2", "--set", "distill_steps=2", "--set", "batch_size=4",
        "--set", "max_new_tokens=24", "--set", "n_refs=1", "--set", "chamfer_points=32",
        "--set", "acceptance=topk", "--set", "losses=kl", "--set", "decode.accept_top_k=2"]


def test_mesh_part_writes_a_results_file(tmp_path, monkeypatch):
    bench = load_script(BENCH, "xspecmesh_bench")
    out = tmp_path / "mesh_tiny.json"
    argv = ["mesh", "--seeds", "1", "--meshes", "2", *TINY, "--out-results", str(out)]
    monkeypatch.setattr(sys, "argv", [str(BENCH), *argv])
    monkeypatch.delenv("ICML_RESULTS_DIR", raising=False)
    bench.main()
    data = json.loads(out.read_text())
    assert data["command"] == "python plugins/xspecmesh/benchmarks/bench.py " + " ".join(argv)
    (table,) = data["tables"]
    assert table["name"] == "mesh" and table["columns"][0] == "decoder"
    assert [r[0] for r in table["rows"]] == ["AR sampling", "KL heads, top-k criterion"]
    assert data["tolerance"]["speed-up (wall)"]["timing"] is True
    assert data["quick"] is False and data["seeds"] == [0]
