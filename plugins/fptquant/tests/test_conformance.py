from icml.testing import PluginConformance

_SMOKE = {"train_steps": 3, "local_steps": 3, "e2e_steps": 2, "hidden_size": 32,
          "seq_len": 32, "calib_samples": 2, "eval_samples": 2}


class TestConformance(PluginConformance):
    slug = "fptquant"
    shape_checks = True
    smoke = {
        "quantize": {**_SMOKE, "arms": ["fp", "rtn", "fptquant_e2e"]},
        "train": dict(_SMOKE),
        "evaluate": {**_SMOKE, "arms": ["fp", "fptquant_local"]},
    }
