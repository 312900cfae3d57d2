from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "synsem"
    smoke = {"evaluate": {"toy": {"n_templates": 6, "per_template": 3, "num_layers": 2},
                          "imbalance_resamples": 5}}
