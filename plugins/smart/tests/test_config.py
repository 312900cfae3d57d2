import pytest
from icml_smart.config import DifferentiateConfig, InferConfig, TrainConfig

from icml.config import ConfigError, build_config


def test_defaults_build_and_lists_parse():
    cfg = build_config(TrainConfig, overrides=["models=smart,transolver", "case=sphere"])
    assert cfg.models == ["smart", "transolver"] and cfg.case == "sphere"


@pytest.mark.parametrize("schema,override,match", [
    (TrainConfig, "model.num_supernodes=100", "num_supernodes=100 exceeds n_boundary"),
    (TrainConfig, "models=smart,gino", "each must be one of"),
    (TrainConfig, "model.dim=50", "not divisible"),
    (TrainConfig, "case=airfoil", "case"),
    (TrainConfig, "stepz=3", "did you mean 'steps'"),
    (InferConfig, "chunk_size=0", "chunk_size"),
    (DifferentiateConfig, "case=sphere", "parametrises ellipses"),
    (TrainConfig, "model.supernode_radius=-1", "supernode_radius"),   # ran before (issue 49)
    (TrainConfig, "model.supernode_radius=0", "supernode_radius"),
    (TrainConfig, "model.supernode_radius=inf", "supernode_radius"),
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


def test_the_model_section_is_what_the_model_takes():
    """``--set model.*`` builds the SMARTSettings that SMARTConfig subclasses: the config the
    job builds holds every setting unchanged, SMARTConfig's defaults are the section's (one
    place), a saved config round-trips, and the old flat keys are one-line errors."""
    import dataclasses

    from icml_smart import SMARTConfig
    from icml_smart.config import SMARTSettings

    cfg = build_config(TrainConfig, overrides=["model.dim=32", "model.max_freq=2.5",
                                               "model.supernode_radius=0.3",
                                               "model.param_conditioning=token"])
    assert isinstance(cfg.model, SMARTSettings)
    smart = SMARTConfig.from_config(cfg.model, space_dim=3, out_dim=4, decoder="concat")
    assert isinstance(smart, SMARTSettings)
    for f in dataclasses.fields(SMARTSettings):
        assert getattr(smart, f.name) == getattr(cfg.model, f.name), f.name
        assert getattr(SMARTConfig(), f.name) == getattr(SMARTSettings(), f.name), f.name
    assert (smart.space_dim, smart.out_dim, smart.decoder) == (3, 4, "concat")
    back = SMARTConfig.from_dict(smart.to_dict())
    assert all(getattr(back, f.name) == getattr(smart, f.name)
               for f in dataclasses.fields(SMARTSettings))
    for old in ("dim=32", "max_freq=2.5", "num_supernodes=8"):
        with pytest.raises(ConfigError, match=old.split("=")[0]):
            build_config(TrainConfig, overrides=[old])
