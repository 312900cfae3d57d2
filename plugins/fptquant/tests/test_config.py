"""The config is the API (issue 48): a job config is an ``FPTQuantConfig``, handed to the
method as it is (no copy of its settings), every default written once, and bad values refused
by the config itself, from the CLI and from Python alike."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from icml_fptquant import (
    FPTQuantConfig,
    QuantizeConfig,
    QuantOptions,
    TrainingOptions,
    TransformOptions,
)
from icml_fptquant.config import EvaluateConfig, TrainConfig

from icml.config import ConfigError, build_config


def test_job_configs_are_the_method_config_with_its_defaults():
    for job in (QuantizeConfig, TrainConfig, EvaluateConfig):
        cfg = job()
        assert isinstance(cfg, FPTQuantConfig)
        assert (cfg.quant, cfg.transforms, cfg.training) == (
            QuantOptions(), TransformOptions(), TrainingOptions())


def test_set_keys_reach_the_method_objects_unchanged():
    """``--set`` builds the sections the pipeline hands on: ``merge_and_quantize`` keeps the
    very config object the job built, and ``apply_fpt_transforms`` a copy equal to it."""
    from icml_fptquant.pipeline import build_model, run_arms

    cfg = build_config(QuantizeConfig, {}, [
        "quant.w_bits=8", "quant.a_bits=8", "quant.kv_bits=8", "transforms.value=false",
        "training.local_steps=2", "training.local_lr=0.005", "arms=[fp,fptquant_local]",
        "train_steps=2", "hidden_size=32", "seq_len=16", "calib_samples=2", "eval_samples=2"])
    assert (cfg.quant.w_bits, cfg.transforms.value, cfg.training.local_lr) == (8, False, 0.005)
    base = build_model(cfg, "cpu", torch.float32, seed=0)
    model = run_arms(cfg, base, keep=("fptquant_local",))["models"]["fptquant_local"]
    assert model.fpt_quant_config is cfg
    assert model.fpt_config == cfg and model.fpt_config.training.local_steps == 2


def test_bad_values_are_refused_by_the_config_from_python_too():
    with pytest.raises(ConfigError, match=r"quant\.kv_bits.*>= 2"):
        QuantOptions(kv_bits=1)
    with pytest.raises(ConfigError, match=r"transforms\.residual_rotation"):
        TransformOptions(residual_rotation="householder")
    with pytest.raises(ConfigError, match=r"training\.local_row_fraction"):
        dataclasses.replace(TrainingOptions(), local_row_fraction=0.0)
    with pytest.raises(ConfigError, match="w_bits"):  # the flat pre-0.3.7 keys are gone
        build_config(QuantizeConfig, {}, ["w_bits=8"])


def test_sections_round_trip_and_read_the_flat_format_2_files():
    cfg = FPTQuantConfig(quant=QuantOptions(w_bits=8, act_dynamic=True),
                         transforms=TransformOptions(prerope=False),
                         training=TrainingOptions(e2e_steps=3))
    assert FPTQuantConfig.from_sections(cfg.sections()) == cfg
    job = QuantizeConfig(quant=QuantOptions(w_bits=8), arms=["fp"])
    assert set(job.sections()) == {"quant", "transforms", "training"}  # job keys left out
    flat = {k: v for sec in cfg.sections().values() for k, v in sec.items()}
    assert FPTQuantConfig.from_sections(flat) == cfg  # what save_quantized wrote before 0.3.7
