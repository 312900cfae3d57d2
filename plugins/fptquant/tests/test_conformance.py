from icml.testing import PluginConformance

_SMOKE = {"train_steps": 3, "training": {"local_steps": 3, "e2e_steps": 2}, "hidden_size": 32,
          "seq_len": 32, "calib_samples": 2, "eval_samples": 2}


class TestConformance(PluginConformance):
    slug = "fptquant"
    shape_checks = True
    smoke = {
        "quantize": {**_SMOKE, "arms": ["fp", "rtn", "fptquant_e2e"]},
        "train": dict(_SMOKE),
        "evaluate": {**_SMOKE, "arms": ["fp", "fptquant_local"]},
    }
    # The config is the API (issue 48): every job config is an FPTQuantConfig, whose sections
    # are the option objects the API reads (apply_fpt_transforms: `transforms`,
    # merge_and_quantize / attach_quantizers / round_weights: `quant`, optimize_local /
    # optimize_e2e: `training`); the job hands its config itself to them (tests/test_config.py
    # checks that the very object arrives).
    api = {"quant": "icml_fptquant.config:QuantOptions",
           "transforms": "icml_fptquant.config:TransformOptions",
           "training": "icml_fptquant.config:TrainingOptions"}
    probe_values = {"model": "smollm2-135m-instruct"}  # a packaged name (not loaded)
