from icml.testing import PluginConformance

_SMOKE = {"rounds": 1, "local_steps": 2, "pretrain_steps": 2, "train_size": 8, "test_size": 4,
          "hidden_size": 32, "strategies": ["het-cpflora", "fedit"]}


class TestConformance(PluginConformance):
    slug = "het-cpflora"
    smoke = {"train": _SMOKE, "evaluate": _SMOKE,
             "infer": {**_SMOKE, "strategies": ["het-cpflora"]}}
