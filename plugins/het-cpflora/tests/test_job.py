"""Config validation and the job's arms (small, seconds)."""

import logging
import math

import pytest
from icml_het_cpflora.config import FederationConfig, LoRAConfig, TrainConfig

import icml
from icml.config import build_config


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
    cfg = TrainConfig(lora=LoRAConfig(target_modules=["w_qkv"]))
    with pytest.raises(icml.ConfigError, match="lora.target_modules"):
        _check(cfg, base, [ClientRankSpec(1, 1)])
    with pytest.raises(icml.ConfigError, match="exceeds"):
        _check(TrainConfig(), base, [ClientRankSpec(30, 30)])


@pytest.mark.parametrize("bad, key", [
    ("federation.lr=inf", "federation.lr"),     # was: LinAlgError in the SVD after training
    ("federation.lr=nan", "federation.lr"),
    ("lora.target_modules=[]", "lora.target_modules"),   # was: a traceback, exit 1
    ("r_shared=[]", "r_shared"),
])
def test_bad_values_are_one_line_config_errors(bad, key):
    overrides = [bad, "r_personal=[]"] if bad.startswith("r_shared") else [bad]
    with pytest.raises(icml.ConfigError) as err:
        build_config(TrainConfig, {}, overrides)
    assert key in str(err.value) and "\n" not in str(err.value)


def test_a_diverged_strategy_is_recorded_as_nan_not_a_traceback(tmp_path):
    """lr=1e37 is finite (accepted) but diverges: the strategy's row says so, with NaN
    accuracies, and the other strategies still run. (At 1e30 the local loss stayed finite,
    5.57, about ln(256), with torch 2.13 / transformers 5.25 on this machine, so the test
    failed; 1e37 gives a NaN loss in the first round.)"""
    from icml_het_cpflora.job import train_job

    ctx = icml.RunContext(out_dir=tmp_path, seed=0, show_progress=False,
                          logger=logging.getLogger("test"))
    cfg = TrainConfig(r_shared=[2, 1], r_personal=[1, 1], strategies=["het-cpflora", "fedit"],
                      federation=FederationConfig(rounds=1, local_steps=3, lr=1e37),
                      pretrain_steps=0, train_size=8, test_size=4, hidden_size=32)
    result = train_job(ctx, cfg)
    rows = {r[0]: r for r in result.tables[0].rows}
    assert set(rows) == {"het-cpflora (fixed) (diverged)", "het-cpflora (OOD) (diverged)",
                         "fedit (diverged)"}
    assert all(math.isnan(r[1]) and math.isnan(r[2]) for r in rows.values())
    assert result.metrics["diverged_strategies"] == 2
