from icml.testing import PluginConformance

_SMOKE = {"n_fit": 8, "n_eval": 6, "train_steps": 3, "hidden_size": 32, "num_layers": 2,
          "k": 4, "audio_backend": "tones"}


class TestConformance(PluginConformance):
    slug = "sarsteer"
    shape_checks = True
    smoke = {"evaluate": {**_SMOKE, "alphas": [0.5], "max_new_tokens": 4},
             "infer": {**_SMOKE, "n_show": 2, "max_new_tokens": 4},
             "train": _SMOKE}
