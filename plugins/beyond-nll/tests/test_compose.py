"""Issue 50: the train job saves its fine-tuned model for other plugins (icml.compose) and
starts from a packaged name, HF folder or previous run folder."""

from __future__ import annotations

from pathlib import Path

import torch

from icml import compose

SMOKE = ["pretrain_steps=5", "steps=3", "n_strong=16", "n_weak=16", "n_test=8",
         "objectives=logp,p", "batch_size=8"]


def test_train_saves_a_model_that_loads_back_with_the_same_answers(tmp_path: Path) -> None:
    from icml_beyond_nll.job import _regime_data
    from icml_beyond_nll.tasks import exact_match

    from icml.runner import run

    dirs: list[Path] = []
    res = run("beyond-nll", overrides=SMOKE, out=tmp_path / "runs", show_progress=False,
              device="cpu", on_run_dir=dirs.append)
    assert res.artifacts["model"] == "model"
    model, tok = compose.load_model(dirs[0])
    (t,) = compose.transforms(model)
    assert t.producer == "beyond-nll" and not t.preserves_function
    assert not t.changes_residual_basis and t.attrs["objective"] == "p"
    # the saved model is the strong-regime "p" model of seed 0: its test accuracy is the run's
    _, test = _regime_data("strong", tok, torch.device("cpu"), n_train=16, n_test=8, noise=0.3,
                           tail=0, seed=0)
    assert exact_match(model, test) == res.metrics["acc_strong_p"]
    # and a later run starts from it (a previous run folder as model=)
    again = run("beyond-nll", overrides=[*SMOKE, f"model={dirs[0]}", "pretrain_steps=0",
                                         "regimes=strong"],
                out=tmp_path / "runs", show_progress=False, device="cpu")
    assert again.metrics["acc_before_strong"] == res.metrics["acc_strong_p"]


def test_saved_model_has_the_trained_logits(tmp_path: Path) -> None:
    import logging
    from types import SimpleNamespace

    from icml_beyond_nll.config import TrainConfig
    from icml_beyond_nll.job import save_trained

    from icml.models import byte_tokenizer, tiny_causal_lm

    net = tiny_causal_lm("qwen2", hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                         seed=3)
    ctx = SimpleNamespace(out_dir=tmp_path, seed=0, logger=logging.getLogger("test"))
    save_trained(ctx, net, byte_tokenizer(), TrainConfig(steps=3), ("strong", "p"))
    loaded, tok = compose.load_model(tmp_path)
    ids = torch.randint(4, 260, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, net(ids).logits)
    assert tok is not None and compose.transforms(loaded)[0].producer == "beyond-nll"


def test_a_model_that_names_nothing_is_a_config_error_before_any_work():
    import pytest

    from icml.config import ConfigError, build_config
    from icml.loader import load_plugins

    info = load_plugins(only=["beyond-nll"]).loaded("beyond-nll").info
    for cls in info.configs.values():
        if "model" in getattr(cls, "__dataclass_fields__", {}):
            with pytest.raises(ConfigError, match="model='/no/such/folder' is not a packaged"):
                build_config(cls, {}, ["model=/no/such/folder"])
