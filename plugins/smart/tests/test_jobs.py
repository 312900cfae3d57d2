"""The hooks end to end at smoke scale: train saves a model that infer reloads; queries inside
the body come back as NaN; a saved model of the wrong dimension is refused."""

import json

import pytest

from icml import runner
from icml.config import ConfigError

SMOKE = ["n_train=6", "n_test=3", "n_boundary=24", "n_queries=32", "model.dim=16",
         "model.depth=2", "model.num_supernodes=8", "steps=2", "batch_size=2",
         "query_subsample=16", "model.fourier_features=4"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("train")
    res = runner.run("smart", "train", overrides=SMOKE + ["models=smart", "plot_resolution=8"],
                     out=out, show_progress=False)
    return out / res.run_dir.split("/")[-1] / "smart_model"


def test_train_then_infer_from_the_saved_model(tmp_path, saved):
    assert (saved / "config.json").is_file()
    inf = runner.run("smart", "infer", overrides=SMOKE + [f"model_path={saved}",
                                                          "n_query_points=3000",
                                                          "chunk_size=700"],
                     out=tmp_path, show_progress=False)
    m = inf.metrics
    assert m["inside_body"] > 0  # some of the uniform queries hit the body ...
    assert m["chunked_vs_full_max_abs"] < 1e-5  # ... and chunking changes nothing
    data = json.loads((tmp_path / inf.run_dir.split("/")[-1] / "result.json").read_text())
    assert data["metrics"]["queries"] == 3000


def test_infer_refuses_a_model_of_the_wrong_dimension(tmp_path, saved):
    with pytest.raises(ConfigError, match="model_path"):
        runner.run("smart", "infer", overrides=SMOKE + [f"model_path={saved}", "case=sphere",
                                                        "n_query_points=100"],
                   out=tmp_path, show_progress=False)


def test_infer_with_a_garbled_model_file_is_a_one_line_error(tmp_path):
    """transformers answered with a "repo id" or weights_only paragraph; now one line naming
    the file, before any data is generated."""
    from icml.testing import icml_cli, one_line_error

    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text("{not json")
    proc = icml_cli("run", "smart", "infer", "--set", f"model_path={d}", "--out",
                    str(tmp_path / "out"))
    assert proc.returncode != 0
    line = one_line_error(proc)
    assert "model_path" in line and "config.json" in line
