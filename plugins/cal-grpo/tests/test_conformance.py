from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "cal-grpo"
    api = {"train:advantage": "icml_cal_grpo.config:AdvantageConfig"}
    shape_checks = True
    smoke = {
        "train": {"steps": 2, "seeds": 1, "estimator_groups": 100, "hidden_size": 32},
        "infer": {"num_generations": 2},
        "evaluate": {"num_generations": 16},
    }
