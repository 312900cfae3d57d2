"""The per-step profile's results-file path on a tiny setting (issue 54): it writes every
component row, declares every number a clock reading, and leaves the decoder unwrapped."""

import json
import sys
from pathlib import Path

from icml.testing import load_script

PROFILE = Path(__file__).resolve().parents[1] / "benchmarks" / "profile_step.py"


def test_profile_writes_a_results_file_and_restores_the_loop(tmp_path, monkeypatch):
    from icml_xspecmesh import speculative as S

    before = (S._forward, S._draft_chains, S.crop_cache, S.Sampler.verify, S.Sampler.n_matching)
    prof = load_script(PROFILE, "xspecmesh_profile")
    out = tmp_path / "profile_tiny.json"
    argv = ["--meshes", "2", "--n-train", "32", "--backbone-steps", "2", "--distill-steps", "2",
            "--max-new-tokens", "20", "--out-results", str(out)]
    monkeypatch.setattr(sys, "argv", [str(PROFILE), *argv])
    monkeypatch.delenv("ICML_RESULTS_DIR", raising=False)
    prof.main()
    after = (S._forward, S._draft_chains, S.crop_cache, S.Sampler.verify, S.Sampler.n_matching)
    assert after == before
    data = json.loads(out.read_text())
    assert data["command"] == ("python plugins/xspecmesh/benchmarks/profile_step.py "
                               + " ".join(argv))
    (table,) = data["tables"]
    names = [r[0] for r in table["rows"]]
    assert names[:len(prof.COMPONENTS)] == list(prof.COMPONENTS)
    assert "total per step" in names and "wall speed-up vs AR (same grad mode)" in names
    assert all(data["tolerance"][c]["timing"] for c in table["columns"][1:])
    assert data["quick"] is False
