"""Latent Exploration Decoding (LED): the public API. Nothing heavy is imported here; torch and
transformers load when an attribute is first used."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "LEDConfig": "icml_led.led",
    "LEDStepInfo": "icml_led.led",
    "led_step": "icml_led.led",
    "sample_sorted": "icml_led.led",
    "layer_indices": "icml_led.layers",
    "layerwise_logits": "icml_led.layers",
    "layerwise_from_outputs": "icml_led.layers",
    "entropy_profile": "icml_led.layers",
    "LEDDecoding": "icml_led.generate",
    "DoLaDecoding": "icml_led.generate",
    "SamplingDecoding": "icml_led.generate",
    "led_decoding": "icml_led.generate",
    "dola_decoding": "icml_led.generate",
    "led_generate": "icml_led.generate",
    "think_state": "icml_led.generate",
    "dola_candidate_layers": "icml_led.dola",
    "dola_contrast": "icml_led.dola",
    "relative_top_filter": "icml_led.dola",
    "pass_at_k": "icml_led.metrics",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'icml_led' has no attribute {name!r}")
