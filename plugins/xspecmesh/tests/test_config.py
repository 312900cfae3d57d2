import pytest
from icml_xspecmesh.config import EvaluateConfig, InferConfig, TrainConfig

from icml import ConfigError
from icml.config import build_config


def test_defaults_build():
    for schema in (InferConfig, TrainConfig, EvaluateConfig):
        cfg = build_config(schema, {}, [])
        assert isinstance(cfg, schema) and cfg == schema()  # the dataclass defaults, unchanged
    cfg = build_config(InferConfig, {}, ["acceptance=greedy", "num_heads=2"])
    assert (cfg.acceptance, cfg.num_heads) == (["greedy"], 2)  # acceptance is a list of rules


@pytest.mark.parametrize("overrides, key", [
    (["acceptance=fast"], "acceptance"),
    (["decode.tree_width=2"], "decode.tree_width"),
    (["num_heads=10", "max_new_tokens=10"], "num_heads"),
    (["hidden_size=30"], "hidden_size"),
    (["loss=mse"], "loss"),
    (["decode.accept_top_k=-1"], "decode.accept_top_k"),
    (["decode.top_p=0"], "decode.top_p"),
])
def test_bad_values_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key):
        build_config(InferConfig, {}, overrides)


def test_bad_losses_list():
    with pytest.raises(ConfigError, match="losses"):
        build_config(EvaluateConfig, {}, ["losses=kl,mse"])
