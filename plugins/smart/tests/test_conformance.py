from icml.testing import PluginConformance

_SMOKE = {"n_train": 8, "n_test": 4, "n_boundary": 24, "n_queries": 32, "dim": 16, "depth": 2,
          "num_supernodes": 8, "steps": 3, "batch_size": 2, "query_subsample": 16,
          "fourier_features": 4}


class TestConformance(PluginConformance):
    slug = "smart"
    smoke = {"train": {**_SMOKE, "plot_resolution": 16},
             "infer": {**_SMOKE, "n_query_points": 2000, "chunk_size": 512},
             "evaluate": {**_SMOKE, "models": ["smart", "pointnet"]},
             "differentiate": {**_SMOKE, "opt_steps": 2}}
    # no `api` yet: the job's flat model keys are copied into SMARTConfig (a transformers
    # PretrainedConfig) by job.smart_config; see the CHANGELOG
    shape_checks = True
