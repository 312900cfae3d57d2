import pytest
from icml_synsem.config import EvaluateConfig

from icml import ConfigError
from icml.config import build_config

SMALL = ["toy.n_templates=8", "toy.per_template=3", "toy.num_layers=2",
         "analysis.imbalance_resamples=5", "extraction.layers=[1,2]"]


def _run(tmp_path, overrides, name):
    from icml.runner import run

    return run("synsem", "evaluate", overrides=overrides, out=tmp_path / name, device="cpu",
               show_progress=False)


def test_user_model_path_reproduces_builtin_model(tmp_path):
    """--set model=PATH with the planted model saved by save_pretrained gives the same numbers
    as the built-in model (same weights, same generated data)."""
    from icml_synsem import make_toy_data, planted_llama, toy_tokenizer

    builtin = _run(tmp_path, SMALL, "builtin")
    _, lex = make_toy_data(n_templates=8, per_template=3)
    model = planted_llama(lex, num_layers=2, seed=0)
    model.save_pretrained(tmp_path / "model")
    toy_tokenizer(lex).save_pretrained(tmp_path / "model")
    loaded = _run(tmp_path, SMALL + [f"model={tmp_path / 'model'}"], "loaded")
    assert builtin.status == loaded.status == "ok"
    assert loaded.metrics == pytest.approx(builtin.metrics, abs=1e-6)
    # the layer-averaged headline (with its MDE column), then the per-layer tables
    assert len(builtin.tables) == 5 and builtin.tables[1].rows[0][0] == 1
    assert builtin.tables[0].columns[-1] == "MDE"
    assert set(builtin.artifacts) == {"semantics profile", "syntax profile",
                                      "centroid geometry"}


def test_user_data_folder(tmp_path):
    from icml_synsem import make_toy_data, planted_llama, toy_tokenizer

    data, lex = make_toy_data(n_templates=6, per_template=3, seed=5)
    data.save(tmp_path / "data")
    model = planted_llama(lex, num_layers=2, seed=0)
    model.save_pretrained(tmp_path / "model")
    toy_tokenizer(lex).save_pretrained(tmp_path / "model")
    res = _run(tmp_path, ["analysis.imbalance_resamples=5", f"model={tmp_path / 'model'}",
                          f"data={tmp_path / 'data'}"], "data")
    assert res.status == "ok" and res.metrics["n_queries"] == 18


def test_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"extraction\.clip_low"):
        build_config(EvaluateConfig, {}, ["extraction.clip_low=0.9", "extraction.clip_high=0.5"])
    with pytest.raises(ConfigError, match=r"extraction\.pool"):
        build_config(EvaluateConfig, {}, ["extraction.pool=max"])
    with pytest.raises(ConfigError, match="pool"):  # the pre-0.2.5 flat key is unknown
        build_config(EvaluateConfig, {}, ["pool=mean"])
    with pytest.raises(ConfigError, match="toy.n_templates"):
        build_config(EvaluateConfig, {}, ["toy.n_templates=1"])
    from icml.runner import RunFailed

    with pytest.raises((ConfigError, RunFailed), match="built-in planted model"):
        _run(tmp_path, ["data=/nowhere"], "bad")
