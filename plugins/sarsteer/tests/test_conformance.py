from icml.testing import PluginConformance

_SMOKE = {"n_fit": 8, "n_eval": 6, "train_steps": 11, "hidden_size": 32, "num_layers": 2,
          "steer.k": 4, "audio_backend": "tones"}


class TestConformance(PluginConformance):
    slug = "sarsteer"
    shape_checks = True
    smoke = {"evaluate": {**_SMOKE, "alphas": [0.5], "max_new_tokens": 4},
             "infer": {**_SMOKE, "n_show": 2, "max_new_tokens": 4},
             "train": _SMOKE}
    # The config is the API (issue 48): every job's `steer` section is SteerConfig, which
    # SARSteer subclasses (`SARSteer.from_config(cfg.steer)`); `layers` needs a spec the
    # built-in 4-layer model has.
    api = {"evaluate:steer": "icml_sarsteer.steering:SARSteer",
           "train:steer": "icml_sarsteer.steering:SARSteer",
           "infer:steer": "icml_sarsteer.steering:SARSteer"}
    probe_values = {"steer.layers": "0:2"}
