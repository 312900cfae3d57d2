"""Issue 16 for this plugin: bad values are one-line config errors (exit 2), diverged arms are
results, finished arms survive a failure."""

from __future__ import annotations

import json
from pathlib import Path

from icml.testing import icml_cli

SMOKE = ["pretrain_steps=5", "steps=3", "n_strong=16", "n_weak=16", "n_test=8",
         "objectives=logp,p", "batch_size=8"]


def test_divergence_is_flagged_not_silent(tmp_path: Path) -> None:
    proc = icml_cli("run", "beyond-nll", *(f"--set={s}" for s in SMOKE), "--set", "lr=1e9",
                    "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "diverged" in proc.stderr
    (run_dir,) = tmp_path.iterdir()
    from icml.runner import load_result

    res = load_result(run_dir)
    assert any(k.startswith("diverged_") and v >= 1 for k, v in res.metrics.items())
    assert "**Diverged**" in res.notes


def test_sane_lr_does_not_flag_divergence(tmp_path: Path) -> None:
    from icml.runner import run

    res = run("beyond-nll", overrides=SMOKE, out=tmp_path, show_progress=False, device="cpu")
    assert not any(k.startswith("diverged_") for k in res.metrics)


def test_default_threads_is_one() -> None:
    proc = icml_cli("info", "beyond-nll", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["default_threads"] == 1
