"""Hooks: the `model` key loads a user's checkpoint; bad config values fail clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from icml import ConfigError
from icml.runner import run


def test_train_from_a_saved_model_folder(tmp_path, tok):
    from icml.models import tiny_causal_lm

    folder = tmp_path / "ckpt"
    tiny_causal_lm("llama", hidden_size=32, num_layers=1, num_heads=2,
                   num_kv_heads=1).save_pretrained(folder)
    tok.save_pretrained(folder)
    res = run("beyond-nll", "train",
              overrides=[f"model={folder}", "pretrain_steps=2", "steps=2", "n_strong=8",
                         "n_weak=8", "n_test=4", "batch_size=4", "objectives=logp,OnlyTopP-0.1"],
              out=tmp_path / "runs", device="cpu", show_progress=False)
    assert res.status == "ok"
    assert {"acc_strong_logp", "acc_weak_OnlyTopP-0.1", "prior_mean_p_weak"} <= set(res.metrics)


@pytest.mark.parametrize("cap,override,match", [
    ("train", "objectives=logp,focal", "valid keys"),
    ("train", "objectives=GeneralFamily-0", "alpha must be > 0"),
    ("train", "regimes=strong,middle", "regimes"),
    ("evaluate", "weak_at=0.9", "weak_at"),
    ("train", "normalize=mean", "normalize"),
    ("differentiate", "objectives=OnlyTopP-2", "outside"),
])
def test_bad_config_values(tmp_path, cap, override, match):
    with pytest.raises(ConfigError, match=match) as info:
        run("beyond-nll", cap, overrides=[override], out=tmp_path, device="cpu",
            show_progress=False)
    assert "\n" not in str(info.value)


def test_differentiate_reports_tiny_errors(tmp_path):
    res = run("beyond-nll", "differentiate", overrides=["n_tokens=64"], out=tmp_path,
              device="cpu", show_progress=False)
    assert res.status == "ok" and res.metrics["max_err_all"] < 2e-6
    assert (Path(res.run_dir) / res.artifacts["W(p)"]).is_file()
