import pytest
from icml_smart.config import DifferentiateConfig, InferConfig, TrainConfig

from icml.config import ConfigError, build_config


def test_defaults_build_and_lists_parse():
    cfg = build_config(TrainConfig, overrides=["models=smart,transolver", "case=sphere"])
    assert cfg.models == ["smart", "transolver"] and cfg.case == "sphere"


@pytest.mark.parametrize("schema,override,match", [
    (TrainConfig, "num_supernodes=100", "num_supernodes=100 exceeds n_boundary"),
    (TrainConfig, "models=smart,gino", "each must be one of"),
    (TrainConfig, "dim=50", "not divisible"),
    (TrainConfig, "case=airfoil", "case"),
    (TrainConfig, "stepz=3", "did you mean 'steps'"),
    (InferConfig, "chunk_size=0", "chunk_size"),
    (DifferentiateConfig, "case=sphere", "parametrises ellipses"),
    (TrainConfig, "supernode_radius=-1", "supernode_radius"),   # ran before (issue 49)
    (TrainConfig, "supernode_radius=0", "supernode_radius"),
    (TrainConfig, "supernode_radius=inf", "supernode_radius"),
])
def test_bad_values_are_one_line_errors(schema, override, match):
    with pytest.raises(ConfigError, match=match) as err:
        build_config(schema, overrides=[override])
    assert "\n" not in str(err.value)


def test_the_model_config_refuses_a_non_positive_radius():
    from icml_smart import SMARTConfig

    for bad in (-1.0, 0.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="supernode_radius"):
            SMARTConfig(supernode_radius=bad)
    assert SMARTConfig(supernode_radius=0.5).supernode_radius == 0.5
