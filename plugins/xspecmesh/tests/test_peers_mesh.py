"""The peers benchmark's results-file path on a tiny setting (issue 54): every arm (our AR loop,
transformers greedy, assisted generation with a draft model, prompt lookup, XSpecMesh chain and
tree) runs on the same prompts, stays lossless against AR greedy, and every clock column is
declared a timing."""

import json
import sys
from pathlib import Path

from icml.testing import load_script

PEERS = Path(__file__).resolve().parents[1] / "benchmarks" / "peers_mesh.py"


def test_peers_write_a_results_file_with_lossless_arms(tmp_path, monkeypatch):
    peers = load_script(PEERS, "xspecmesh_peers")
    out = tmp_path / "peers_tiny.json"
    argv = ["--prompts", "2", "--n-train", "32", "--backbone-steps", "2",
            "--distill", "data:2", "greedy:2", "--max-new-tokens", "20", "--tree-widths", "2",
            "--out-results", str(out)]
    monkeypatch.setattr(sys, "argv", [str(PEERS), *argv])
    monkeypatch.delenv("ICML_RESULTS_DIR", raising=False)
    peers.main()
    data = json.loads(out.read_text())
    assert data["command"] == ("python plugins/xspecmesh/benchmarks/peers_mesh.py "
                               + " ".join(argv))
    (table,) = data["tables"]
    names = [r[0] for r in table["rows"]]
    assert len(names) == 8 and names[0] == "AR greedy (our loop)"
    assert any("assisted" in n for n in names) and any("prompt lookup" in n for n in names)
    assert any("tree of 2" in n for n in names)
    same = table["columns"].index("output = AR greedy")
    assert all(r[same] == "2/2" for r in table["rows"])
    assisted = next(r for r in table["rows"] if "assisted" in r[0])
    assert assisted[table["columns"].index("draft-model calls/token")] > 0
    assert set(data["tolerance"]) == set(peers.TIMING)
    assert all(data["tolerance"][c]["timing"] for c in peers.TIMING)
    assert data["quick"] is False
