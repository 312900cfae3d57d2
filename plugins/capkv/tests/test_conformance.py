from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "capkv"
    shape_checks = True
    smoke = {
        "infer": {"train_steps": 2, "eval_samples": 8, "context_len": 24, "n_pairs": 4,
                  "ratios": [0.5], "policies": ["capkv", "streaming"]},
        "evaluate": {"T": 32, "seeds": [0], "ratios": [0.5], "policies": ["capkv", "random"]},
    }
    # the config is the API (issue 48): the press section is what CapKVPress is (a subclass of
    # PressConfig); the compression ratio is swept by the jobs, not a setting
    api = {"press": "icml_capkv.presses:CapKVPress"}
    api_runtime = {"press": {"compression_ratio": 0.5}}
