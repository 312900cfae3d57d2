from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "capkv"
    shape_checks = True
    smoke = {
        "infer": {"train_steps": 2, "eval_samples": 8, "context_len": 24, "n_pairs": 4,
                  "ratios": [0.5], "policies": ["capkv", "streaming"]},
        "evaluate": {"T": 32, "seeds": [0], "ratios": [0.5], "policies": ["capkv", "random"]},
    }
