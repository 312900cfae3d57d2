from icml.testing import PluginConformance

_SMOKE = {"n_train": 8, "n_test": 4, "n_boundary": 24, "n_queries": 32, "model.dim": 16,
          "model.depth": 2, "model.num_supernodes": 8, "steps": 3, "batch_size": 2,
          "query_subsample": 16, "model.fourier_features": 4}


class TestConformance(PluginConformance):
    slug = "smart"
    smoke = {"train": {**_SMOKE, "plot_resolution": 16},
             "infer": {**_SMOKE, "n_query_points": 2000, "chunk_size": 512},
             "evaluate": {**_SMOKE, "models": ["smart", "pointnet"]},
             "differentiate": {**_SMOKE, "opt_steps": 2}}
    # the model.* section is SMARTSettings, which SMARTConfig (a PretrainedConfig) subclasses
    api = {"model": "icml_smart.configuration_smart:SMARTConfig"}
    shape_checks = True
