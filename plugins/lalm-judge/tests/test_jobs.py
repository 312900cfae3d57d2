import json

import pytest
from icml_lalm_judge import espeak_available

from icml.testing import icml_cli, one_line_error

_TINY = ["--set", "n_base=1", "--set", "judge.n_train_base=1", "--set", "judge.cnn_steps=2",
         "--set", "stats.n_boot=100", "--set", "dialogues.max_turns=4"]


@pytest.mark.parametrize("args, needle", [
    (["--set", "judges=[\"oracle\",\"gpt\"]"], "judges"),
    (["--set", "modalities=[\"V\"]"], "modalities"),
    (["--set", "dialogues.min_turns=2"], "dialogues.min_turns"),
    (["--set", "dialogues.min_turns=6", "--set", "dialogues.max_turns=4"],
     "dialogues.min_turns"),
    (["--set", "speech.backend=say"], "speech.backend"),
    (["--set", "speech.espeak_engine=festival"], "speech.espeak_engine"),
    (["--set", "backend=tones"], "backend"),  # a key renamed in 0.2.x is refused, named
])
def test_bad_config_is_one_line(args, needle):
    proc = icml_cli("run", "lalm-judge", *args)
    assert proc.returncode != 0
    assert needle in one_line_error(proc)


def test_lalm_judge_in_the_job(tmp_path):
    proc = icml_cli("run", "lalm-judge", *_TINY, "--set", 'judges=["oracle","lalm"]',
                    "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    res = json.loads(next(tmp_path.rglob("result.json")).read_text())
    assert res["metrics"]["oracle_AT_specificity"] == 1.0
    assert "lalm_A_sensitivity" in res["metrics"] and "lalm_T_sensitivity" not in res["metrics"]
    cat = next(t for t in res["tables"] if t["title"] == "Sensitivity per category")
    assert len(cat["columns"]) == 2 + 8
    oracle = [r for r in cat["rows"] if r[0] == "oracle (reads label)"]
    assert len(oracle) == 3 and all(abs(v - 0.6) < 1e-9 for r in oracle for v in r[2:])


@pytest.mark.skipif(not espeak_available(), reason="espeak-ng is not installed")
def test_espeak_job(tmp_path):
    proc = icml_cli("run", "lalm-judge", *_TINY, "--set", "speech.backend=espeak-ng",
                    "--set", "speech.workers=2", "--set", 'judges=["oracle","audio-cnn"]',
                    "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    res = json.loads(next(tmp_path.rglob("result.json")).read_text())
    assert res["metrics"]["synthesise_s"] > 0 and "audio-cnn_A_sensitivity" in res["metrics"]
    bad = icml_cli("run", "lalm-judge", *_TINY, "--set", "speech.backend=espeak-ng",
                   "--set", 'judges=["rule-asr"]')
    assert "rule-asr" in one_line_error(bad)
