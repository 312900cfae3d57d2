from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "cage"
    smoke = {"evaluate": {"n_images": 3, "responders": ["oracle", "unfaithful"],
                          "n_bootstrap": 100},
             "train": {"n_images": 3}}
    shape_checks = True
