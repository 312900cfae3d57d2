"""The hooks' config handling, the user-model path, and the recall task."""

import json

import pytest
import torch
from icml_capkv.config import EvaluateConfig, InferConfig
from icml_capkv.recall import BOS, QUERY, RecallTask, train_recall_model

from icml.config import ConfigError, build_config


def test_user_model_path_runs(tmp_path) -> None:
    from icml.models import byte_tokenizer, tiny_causal_lm
    from icml.runner import run

    folder = tmp_path / "tiny"
    tiny_causal_lm("qwen2", hidden_size=32, num_heads=4, num_kv_heads=2).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    result = run("capkv", "infer", overrides=[f"model={folder}", "eval_samples=4",
                                              "context_len=24", "n_pairs=3", "ratios=[0.5]",
                                              "policies=capkv,h2o"],
                 out=tmp_path / "run", device="cpu", show_progress=False)
    assert result.status == "ok", result.error
    assert "train_loss" not in result.metrics
    assert 0.0 <= result.metrics["kl/capkv/0.5"] < float("inf")
    data = json.loads((tmp_path / "run").glob("**/result.json").__next__().read_text())
    assert data["config"]["model"] == str(folder)


def test_bad_config_values_are_one_line_errors() -> None:
    for bad in (["ratios=[0.5, 1.0]"], ["policies=capkv,h3o"], ["ratios=[]"],
                ["press.capacity_vectors=queries"], ["press.ridge=0"]):
        with pytest.raises(ConfigError) as exc:
            build_config(InferConfig, {}, bad)
        assert "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match="seeds"):
        build_config(EvaluateConfig, {}, ["seeds=[]"])


def test_recall_task_layout() -> None:
    task = RecallTask(context_len=32, n_pairs=5)
    g = torch.Generator().manual_seed(0)
    s = task.sample(3, g)
    assert bool((s["context"][:, 0] == BOS).all())
    rows = torch.arange(3)[:, None]
    assert torch.equal(s["context"][rows, s["slots"]], s["keys"])
    assert torch.equal(s["context"][rows, s["slots"] + 1], s["values"])
    assert all(len(set(k.tolist())) == 5 for k in s["keys"])
    ids, labels = task.training_batch(2, g)
    assert ids.shape == (2, 32 + 3 * task.n_queries)
    ans = labels != -100
    assert int(ans.sum()) == 2 * task.n_queries
    assert bool((ids[:, 32::3] == QUERY).all())
    ctx, q, a = task.eval_batch(4, g)
    assert q.shape == (4, 2) and a.shape == (4,)
    with pytest.raises(ValueError, match="too short"):
        RecallTask(context_len=8, n_pairs=5)


def test_training_reduces_loss() -> None:
    task = RecallTask(context_len=24, n_pairs=3, n_queries=8)
    ids, labels = task.training_batch(64, torch.Generator().manual_seed(9))
    m0, _ = train_recall_model(task, steps=0, hidden_size=32)
    with torch.no_grad():
        l0 = float(m0(input_ids=ids, labels=labels).loss)
    m, stats = train_recall_model(task, steps=30, batch_size=16, lr=1e-2, hidden_size=32)
    with torch.no_grad():
        l1 = float(m(input_ids=ids, labels=labels).loss)
    assert l1 < l0 - 0.3, (l0, l1)
    assert stats["train_s"] > 0 and stats["train_loss"] < l0
