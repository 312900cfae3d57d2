"""The hooks through the real CLI: the default job's table, saving and evaluating a policy,
and one-line errors for bad input."""

import json

import pytest

from icml.testing import icml_cli, one_line_error

SMALL = ["--set", "warm.steps=20", "--set", "steps=2", "--set", "hidden_size=16",
         "--set", "grpo.prompts_per_step=2", "--set", "eval_generations=1",
         "--set", "world.n_entities=12"]


def _result(out):
    (path,) = list(out.glob("*/result.json"))
    return json.loads(path.read_text()), path.parent


def test_train_table_save_and_evaluate(tmp_path):
    proc = icml_cli("run", "dr-mmsearch", "train", *SMALL, "--set", "save_model=both",
                    "--out", str(tmp_path / "t"))
    assert proc.returncode == 0, proc.stderr
    res, folder = _result(tmp_path / "t")
    (table,) = [t for t in res["tables"] if t["title"].startswith("Four arms")]
    assert [r[0] for r in table["rows"]] == ["warm start", "baseline", "gaussian", "proximity",
                                             "both"]
    assert "acc 3-hop" in table["columns"] and "collapse 3-hop" in table["columns"]
    assert "held-out acc 3-hop" in table["columns"]
    assert (folder / "turns.png").is_file() and (folder / "policy" / "drmm_world.json").is_file()
    proc = icml_cli("run", "dr-mmsearch", "evaluate", "--set", f"model={folder / 'policy'}",
                    "--set", "num_generations=1", "--out", str(tmp_path / "e"))
    assert proc.returncode == 0, proc.stderr
    ev, _ = _result(tmp_path / "e")
    assert 0 <= ev["metrics"]["accuracy"] <= 1 and "collapse_rate" in ev["metrics"]
    # the saved policy remembers its held-out companies: evaluate reports them separately
    assert 0 <= ev["metrics"]["heldout_accuracy"] <= 1 and "train_accuracy" in ev["metrics"]
    (rows,) = [t["rows"] for t in ev["tables"] if t["title"].startswith("Agent metrics")]
    assert {r[1] for r in rows} == {"all", "trained on", "held out"}


def test_infer_writes_transcripts(tmp_path):
    proc = icml_cli("run", "dr-mmsearch", "infer", "--set", "warm.steps=5", "--set",
                    "world.n_entities=12", "--set", "num_questions=3", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    _, folder = _result(tmp_path)
    text = (folder / "rollouts.txt").read_text()
    assert "[model turn 1]" in text and "gold=" in text


@pytest.mark.parametrize("args, words", [
    (["train", "--set", "arms=[\"baseline\",\"ppo\"]"], ["arms", "baseline"]),
    (["train", "--set", "grpo.hop_mix=[1.0,0.0]"], ["hop_mix", "three"]),
    (["train", "--set", "reward.sigma_neg=0"], ["reward.sigma_neg"]),
    (["train", "--set", "world.bm25_backend=lucene"], ["bm25_backend"]),
    (["infer", "--set", "model=/nonexistent/policy"], ["model", "could not load"]),
    (["train", "--set", "reward.kind=gaussian"], ["reward.kind", "arms"]),
])
def test_bad_input_is_one_line(args, words):
    proc = icml_cli("run", "dr-mmsearch", *args)
    assert proc.returncode != 0
    line = one_line_error(proc)
    for w in words:
        assert w in line


def _saved_policy(folder):
    from icml_dr_mmsearch.config import WorldConfig
    from icml_dr_mmsearch.experiment import build_world, make_tiny_model, save_policy

    _, _, tok = build_world(WorldConfig(n_entities=12))
    save_policy(folder, make_tiny_model(len(tok), hidden_size=16), tok, {})
    return folder


@pytest.mark.parametrize("damage, words", [
    ("missing", ["no such folder"]),
    ("file", ["is a file"]),
    ("empty dir", ["no config.json"]),
    ("empty config", ["config.json", "is empty"]),
    ("garbled config", ["config.json", "not valid JSON"]),
    ("no weights", ["no weights file"]),
    ("empty weights", ["model.safetensors", "is empty"]),
    ("garbled weights", ["could not load", "model.safetensors"]),
])
def test_bad_model_folder_is_one_line_naming_the_file(tmp_path, damage, words):
    """issue 49: a missing, empty or garbled model folder is one line naming the file and
    what was expected (not HF's "repo id" or torch's weights_only paragraphs)."""
    from icml_dr_mmsearch.experiment import load_policy

    p = tmp_path / "policy"
    if damage == "file":
        p.write_text("x")
    elif damage == "empty dir":
        p.mkdir()
    elif damage != "missing":
        _saved_policy(p)
        if damage == "empty config":
            (p / "config.json").write_text("")
        elif damage == "garbled config":
            (p / "config.json").write_text("{garbage")
        elif damage == "no weights":
            (p / "model.safetensors").unlink()
        elif damage == "empty weights":
            (p / "model.safetensors").write_bytes(b"")
        elif damage == "garbled weights":
            (p / "model.safetensors").write_bytes(b"\x00junk" * 50)
    with pytest.raises(ValueError) as info:
        load_policy(p)
    msg = str(info.value)
    assert "\n" not in msg and str(p) in msg and "expected" in msg, msg
    for w in words:
        assert w in msg, msg


def test_garbled_model_through_the_cli_is_one_line(tmp_path):
    p = tmp_path / "policy"
    p.mkdir()
    (p / "config.json").write_text("{garbage")
    proc = icml_cli("run", "dr-mmsearch", "infer", "--set", f"model={p}", "--out",
                    str(tmp_path / "o"))
    assert proc.returncode != 0
    line = one_line_error(proc)
    assert "model" in line and "config.json" in line and "not valid JSON" in line
