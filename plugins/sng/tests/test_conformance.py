from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "sng"
    smoke = {
        "train": {"steps": 3, "eval_every": 1, "n_interior": 12, "hidden": [6],
                  "time_limit": 0, "batch_size": 6, "line_search": 2},
        "evaluate": {"decays": [0.0, 1.0], "n": 40, "p": 10, "batch_size": 5, "steps": 20,
                     "sgd_lr_grid": [1.0, 2.0]},
    }
    shape_checks = True
