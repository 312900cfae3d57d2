"""The benchmark scripts that write README tables run on a tiny setting and write a valid
results file (the full runs are what the README prints)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from icml import results as R

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def test_outlier_controls_writes_its_results_file(tmp_path):
    out = tmp_path / "outlier_controls.json"
    tiny = ["train_steps=2", "hidden_size=32", "seq_len=16", "calib_samples=2",
            "eval_samples=2", "training.local_steps=1", "training.e2e_steps=1",
            "arms=[fp,rtn,fptquant_local]"]
    subprocess.run([sys.executable, str(BENCH / "outlier_controls.py"), "--alphas", "0.5",
                    *(a for s in tiny for a in ("--set", s)), "--out-results", str(out)],
                   check=True, capture_output=True, text=True,
                   env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    data = R.load(out)
    controls, alpha = data["tables"]
    assert [r[0] for r in controls["rows"]] == ["FP", "RTN", "FPTQuant-local"]
    # without injected outliers nothing differs between the FP rows of the three settings
    assert controls["rows"][0][1] == controls["rows"][0][2] == controls["rows"][0][3]
    assert alpha["rows"][0][0] == 0.5 and alpha["rows"][0][1] > 0
    assert data["command"].startswith("python plugins/fptquant/benchmarks/outlier_controls.py")
