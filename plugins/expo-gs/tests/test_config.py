"""Bad values are one-line config errors before any training (issue 49)."""

import pytest
from icml_expo_gs.config import InferConfig, TrainConfig

from icml.config import ConfigError, build_config


@pytest.mark.parametrize("bad", ["inf", "nan", "0", "-1"])
def test_a_non_finite_or_non_positive_exposure_is_refused_before_training(bad):
    """exposure=inf used to fail after all three training stages."""
    with pytest.raises(ConfigError, match="exposure") as err:
        build_config(InferConfig, {}, [f"exposure={bad}"])
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="exposure"):
        InferConfig(exposure=float(bad))


@pytest.mark.parametrize("schema", [TrainConfig, InferConfig])
def test_zero_views_is_refused_at_config_time(schema):
    """n_views=0 was a ZeroDivisionError in the scene generator (from Python)."""
    with pytest.raises(ConfigError, match="n_views") as err:
        build_config(schema, {}, ["n_views=0"])
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="n_views"):
        schema(n_views=0)


def test_the_scene_generator_refuses_zero_views():
    from icml_expo_gs.scene import make_synthetic_hdr_scene

    with pytest.raises(ValueError, match="n_views"):
        make_synthetic_hdr_scene(resolution=8, n_views=0, n_test=1)
