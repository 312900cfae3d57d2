from icml.testing import PluginConformance

_SMOKE = {"resolution": 8, "n_views": 2, "n_test": 1, "n_points": 16, "n_floaters": 4,
          "iters_irradiance": 2, "iters_geometry": 2, "iters_joint": 2, "rays_per_step": 16,
          "densify_from": 1, "densify_until": 2, "densify_every": 1}


class TestConformance(PluginConformance):
    slug = "expo-gs"
    smoke = {"train": dict(_SMOKE), "infer": dict(_SMOKE),
             "evaluate": {**_SMOKE, "seeds": 1}, "differentiate": {"n_gaussians": 2, "size": 4}}
    # the config is the API: every hook config *is* an ExpoGSConfig (what ExpoGSTrainer takes)
    api = {f"{cap}:": "icml_expo_gs.config:ExpoGSConfig" for cap in ("train", "infer",
                                                                       "evaluate")}
    shape_checks = True
