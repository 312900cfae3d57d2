from icml.testing import PluginConformance

_SMOKE = {"hidden_size": 32, "num_layers": 4, "led.depth": 3, "sft_steps": 5, "post_steps": 1,
          "num_problems": 3, "num_samples": 4, "ks": [1, 4], "num_terms": 3}


class TestConformance(PluginConformance):
    slug = "led"
    shape_checks = True
    smoke = {"infer": dict(_SMOKE), "evaluate": {**_SMOKE, "temperatures": [0.6, 1.2]}}
    # The config is the API (issue 48): both jobs' `led` section is the LEDConfig that
    # LEDDecoding takes and keeps (`LEDDecoding(config).config`).
    api = {"infer:led": "icml_led.generate:LEDDecoding",
           "evaluate:led": "icml_led.generate:LEDDecoding"}
