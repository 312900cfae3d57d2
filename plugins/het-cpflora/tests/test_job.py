"""Config validation and the job's arms (small, seconds)."""

import pytest
from icml_het_cpflora.config import TrainConfig


def test_config_rejects_mismatched_rank_lists():
    with pytest.raises(ValueError, match="one rank per client"):
        TrainConfig(r_shared=[1, 2], r_personal=[1])
    with pytest.raises(ValueError, match="r_shared \\+ r_personal"):
        TrainConfig(r_shared=[0, 2], r_personal=[0, 1])


def test_model_dependent_errors_are_config_errors(tmp_path):
    from icml_het_cpflora.job import _check
    from icml_het_cpflora.ranks import ClientRankSpec

    import icml
    from icml.models import tiny_causal_lm

    base = tiny_causal_lm("llama", hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2)
    cfg = TrainConfig(target_modules=["w_qkv"])
    with pytest.raises(icml.ConfigError, match="target_modules"):
        _check(cfg, base, [ClientRankSpec(1, 1)])
    with pytest.raises(icml.ConfigError, match="exceeds"):
        _check(TrainConfig(), base, [ClientRankSpec(30, 30)])
