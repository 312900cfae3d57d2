from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "lalm-judge"
    smoke = {"evaluate": {"n_base": 1, "n_train_base": 1, "cnn_steps": 3, "n_boot": 100,
                          "max_turns": 4}}
    shape_checks = True
