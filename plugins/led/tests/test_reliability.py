"""Issue 16 for this plugin: bad values are one-line config errors (exit 2), diverged arms are
results, finished arms survive a failure."""

from __future__ import annotations

import json
from pathlib import Path

from icml.testing import icml_cli

SMOKE = ["hidden_size=32", "num_layers=4", "led.depth=3", "sft_steps=5", "post_steps=1",
         "num_problems=3", "num_samples=4", "ks=[1,4]", "num_terms=3"]


def test_infinite_temperature_keeps_the_run(tmp_path: Path) -> None:
    """Issue 16: `temperature=inf` used to lose the finished run to a JSON error."""
    proc = icml_cli("run", "led", *(f"--set={s}" for s in SMOKE), "--set", "temperature=inf",
                    "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = tmp_path.iterdir()
    raw = json.loads((run_dir / "result.json").read_text())
    assert raw["config"]["temperature"] == {"$float": "inf"} and raw["status"] == "ok"
    assert (run_dir / "report.md").is_file()
    assert proc.stderr.splitlines()[0] == f"run folder: {run_dir}"
