"""Issue 16 for this plugin: bad values are one-line config errors (exit 2), diverged arms are
results, finished arms survive a failure."""

from __future__ import annotations

from pathlib import Path

from icml.testing import icml_cli, one_line_error

SMOKE = ["train_steps=3", "training.local_steps=3", "training.e2e_steps=2", "hidden_size=32",
         "seq_len=32",
         "calib_samples=2", "eval_samples=2"]


def test_heads_that_do_not_divide_exit_2(tmp_path: Path) -> None:
    proc = icml_cli("run", "fptquant", "--set", "num_heads=3", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "num_heads" in one_line_error(proc)
    assert not (tmp_path / "o").exists()


def test_diverged_arm_is_a_result_and_the_others_survive(tmp_path: Path) -> None:
    proc = icml_cli("run", "fptquant", *(f"--set={s}" for s in SMOKE), "--set",
                    "training.local_lr=1e9",
                    "--set", "training.local_steps=20", "--set", "arms=[fp,rtn,fptquant_local]",
                    "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = tmp_path.iterdir()
    from icml.runner import load_result

    res = load_result(run_dir)
    assert res.status == "ok" and res.metrics["rtn.ppl"] > 0
    assert res.metrics["fptquant_local.ppl"] != res.metrics["fptquant_local.ppl"]  # nan
    assert res.metrics["fptquant_local.max_logit_err"] != res.metrics[
        "fptquant_local.max_logit_err"]  # nan, not max(0, nan) == 0
    assert [row[0] for row in res.tables[0].rows] == ["FP", "RTN", "FPTQuant-local"]
