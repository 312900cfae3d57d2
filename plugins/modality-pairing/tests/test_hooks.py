"""Hook-level bad input: clear one-line config errors, and evaluate on a saved model."""

from __future__ import annotations

import pytest
from icml_modality_pairing import plugin
from icml_modality_pairing.config import DifferentiateConfig, EvaluateConfig, TrainConfig

import icml


def _ctx(tmp_path):
    return icml.RunContext(out_dir=tmp_path, seed=0, device="cpu", show_progress=False)


def test_bad_regime_and_arm_are_config_errors(tmp_path):
    with pytest.raises(icml.ConfigError, match="regimes.*<n_train>x<epochs>"):
        plugin.icml_train(_ctx(tmp_path), TrainConfig(regimes=["2000 epochs"]))
    with pytest.raises(icml.ConfigError, match="arms"):
        plugin.icml_train(_ctx(tmp_path), TrainConfig(regimes=["100x1"], arms=["late"]))


def test_missing_model_path_is_a_config_error(tmp_path):
    with pytest.raises(icml.ConfigError, match="model_path.*does not exist"):
        plugin.icml_evaluate(_ctx(tmp_path), EvaluateConfig(model_path=str(tmp_path / "x.pt")))
    bad = tmp_path / "bad.pt"
    bad.write_text("nope")
    with pytest.raises(icml.ConfigError, match="cannot load"):
        plugin.icml_differentiate(_ctx(tmp_path), DifferentiateConfig(model_path=str(bad)))


def test_train_saves_a_model_that_evaluate_reads(tmp_path):
    train_dir, eval_dir = tmp_path / "t", tmp_path / "e"
    train_dir.mkdir()
    eval_dir.mkdir()
    cfg = TrainConfig(regimes=["200x2"], seeds=1, arms=["stochastic"], n_test=50, width=4,
                      hidden=4, power_iters=5, trace_samples=0, gauss_samples=1,
                      landscape_steps=0, surface_steps=0)
    res = plugin.icml_train(_ctx(train_dir), cfg)
    assert res.artifacts["model"] == "model.pt"
    ev = plugin.icml_evaluate(_ctx(eval_dir), EvaluateConfig(
        model_path=str(train_dir / "model.pt"), n_test=50, power_iters=5, lanczos_iters=3,
        trace_samples=2, gauss_samples=1, landscape_steps=0, surface_steps=0))
    assert ev.metrics["n_params"] == res_params(train_dir / "model.pt")
    assert "trained here" not in ev.tables[0].title


def res_params(path):
    from icml_modality_pairing.models import load_model

    model, _ = load_model(path)
    return sum(p.numel() for p in model.parameters())


def test_differentiate_checks_agree_with_the_explicit_hessian(tmp_path):
    res = plugin.icml_differentiate(_ctx(tmp_path), DifferentiateConfig(
        n_train=200, epochs=2, n_test=100, width=3, hidden=3))
    m = res.metrics
    assert m["hvp_vs_explicit_rel"] < 1e-5
    assert m["hvp_vs_fd_rel"] < 1e-3
    assert m["lanczos_abs_error"] < 1e-3
    assert m["power_abs_error"] < 1e-3
