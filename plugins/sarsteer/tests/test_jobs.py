"""Hooks end to end: train -> infer from the saved files, and one-line CLI errors."""

from pathlib import Path

from icml.runner import run
from icml.testing import icml_cli, one_line_error

SMOKE = ["n_fit=8", "n_eval=4", "train_steps=11", "hidden_size=32", "num_layers=2", "steer.k=4",
         "audio_backend=tones"]


def test_train_then_infer_from_saved_files(tmp_path):
    tr = run("sarsteer", "train", overrides=SMOKE, out=tmp_path / "t", device="cpu",
             show_progress=False)
    rd = Path(tr.run_dir)
    assert (rd / "sarsteer_vectors.pt").is_file() and (rd / "toy_lalm").is_dir()
    assert all(r[4] != "nan" for r in tr.tables[0].rows)
    inf = run("sarsteer", "infer", out=tmp_path / "i", device="cpu", show_progress=False,
              overrides=SMOKE + [f"model_path={rd / 'toy_lalm'}",
                                 f"vectors_path={rd / 'sarsteer_vectors.pt'}", "n_show=2",
                                 "max_new_tokens=3"])
    assert inf.status == "ok" and inf.metrics["hooks_after_exit"] == 0
    assert len(inf.tables[0].rows) == 2


def test_cli_errors_are_one_line(tmp_path):
    line = one_line_error(icml_cli("run", "sarsteer", "--set", "steer.layers=9", "--set",
                                   "num_layers=2", "--out", str(tmp_path)))
    assert "out of range" in line
    line = one_line_error(icml_cli("run", "sarsteer", "train", "--set", "n_fit=5", "--set",
                                   "train_steps=11", "--set", "audio_backend=tones", "--out",
                                   str(tmp_path)))
    assert "'steer.k'" in line and "n_fit" in line
    line = one_line_error(icml_cli("run", "sarsteer", "infer", "--set", "model_path=/nope",
                                   "--set", "vectors_path=/nope.pt", "--out", str(tmp_path)))
    assert "model_path" in line
    line = one_line_error(icml_cli("run", "sarsteer", "--set", "defenses=[\"magic\"]",
                                   "--out", str(tmp_path)))
    assert "defenses" in line


def test_too_short_training_is_a_config_error(tmp_path):
    """The toy's training runs the core's one-cycle schedule, whose 10% warm-up must span more
    than one step: fewer than 11 steps is refused before any work, naming the key."""
    line = one_line_error(icml_cli("run", "sarsteer", "train", "--set", "train_steps=10",
                                   "--out", str(tmp_path / "o")))
    assert "'train_steps'" in line and "11" in line
    assert not (tmp_path / "o").exists()
