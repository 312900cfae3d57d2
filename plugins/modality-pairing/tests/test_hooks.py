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


@pytest.mark.parametrize("damage, words", [
    ("missing", ["does not exist"]),
    ("folder", ["is a folder"]),
    ("empty", ["is empty"]),
    ("garbled", ["not a readable torch checkpoint"]),
    ("foreign", ["not a model saved by"]),
])
def test_bad_model_file_is_one_line_naming_the_file(tmp_path, damage, words):
    """issue 49: a missing, empty or garbled model file is one line naming the file and what
    was expected (not torch's weights_only paragraph)."""
    import torch

    p = tmp_path / "model.pt"
    if damage == "folder":
        p.mkdir()
    elif damage == "empty":
        p.write_bytes(b"")
    elif damage == "garbled":
        p.write_bytes(b"garbage\n" * 20)
    elif damage == "foreign":
        torch.save({"weights": torch.zeros(2)}, p)
    for hook, cfg in ((plugin.icml_evaluate, EvaluateConfig), (plugin.icml_differentiate,
                                                               DifferentiateConfig)):
        with pytest.raises(icml.ConfigError) as info:
            hook(_ctx(tmp_path), cfg(model_path=str(p)))
        msg = str(info.value)
        assert "\n" not in msg and "model_path" in msg and str(p) in msg, msg
        assert "expected a model.pt" in msg and "weights_only" not in msg, msg
        for w in words:
            assert w in msg, msg


def test_diverged_arm_is_recorded_as_nan_not_an_abort(tmp_path):
    """issue 49: ``lr=1e30`` makes every arm diverge; the run finishes, each arm's row says
    diverged and its measurements are NaN (before: SharpnessError aborted the run)."""
    import math

    ctx = _ctx(tmp_path)
    cfg = TrainConfig(regimes=["100x2"], seeds=1, arms=["fixed", "stochastic"], lr=1e30,
                      n_test=40, width=4, hidden=4, power_iters=5, trace_samples=0,
                      gauss_samples=1, landscape_steps=3, surface_steps=2)
    res = plugin.icml_train(ctx, cfg)
    rows = res.tables[0].rows
    assert [r[1] for r in rows] == ["fixed (diverged: 1/1 seeds)",
                                    "stochastic (diverged: 1/1 seeds)"]
    assert math.isnan(res.metrics["100x2/stochastic/lambda_max_mean"])
    assert math.isnan(res.metrics["100x2/fixed/accuracy_mean"])
    assert res.metrics["diverged_runs"] == 2 and "diverged" in res.notes
    assert "model" not in res.artifacts  # a diverged model is not saved
    (partial,) = [t for t in ctx.partial.tables if t.title == "arms (as they finished)"]
    assert partial.columns[3] == "status"
    assert [r[3] for r in partial.rows] == ["diverged", "diverged"]


def test_diverged_arm_beside_a_healthy_one(tmp_path):
    """A diverged seed is NaN in its own row; other arms are measured as usual."""
    from icml_modality_pairing.experiment import Settings, run_arm

    ok = run_arm("fixed", 100, 1, 0, Settings(n_test=40, width=4, hidden=4, power_iters=5,
                                               trace_samples=0, gauss_samples=1))
    bad = run_arm("fixed", 100, 2, 0, Settings(n_test=40, width=4, hidden=4, lr=1e30,
                                                power_iters=5, trace_samples=0,
                                                gauss_samples=1))
    assert ok.metrics["diverged"] == 0.0 and 0 <= ok.metrics["accuracy"] <= 1
    assert bad.metrics["diverged"] == 1.0 and bad.model is None
