from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "modality-pairing"
    smoke = {
        "train": {"regimes": ["200x2"], "seeds": 2, "n_test": 100, "width": 8, "hidden": 8,
                  "power_iters": 10, "trace_samples": 2, "gauss_samples": 2,
                  "landscape_steps": 3, "surface_steps": 2},
        "evaluate": {"n_train": 200, "epochs": 1, "n_test": 100, "power_iters": 10,
                     "lanczos_iters": 5, "trace_samples": 2, "gauss_samples": 2,
                     "landscape_steps": 3, "surface_steps": 2},
        "differentiate": {"n_train": 100, "epochs": 1, "n_test": 50, "width": 3, "hidden": 3,
                          "power_iters": 20, "lanczos_iters": 10, "trace_samples": 4},
    }
    # the config is the API (issue 48): the train config is the Settings run_arm takes
    api = {"train:": "icml_modality_pairing.experiment:Settings"}
    probe_values = {"regimes": ["100x2"], "arms": ["fixed"]}
    shape_checks = True
