"""Latent Exploration Decoding (LED): the public API. Nothing heavy is imported here; torch and
transformers load when an attribute is first used."""

from __future__ import annotations

from icml.lazy import lazy_exports

_EXPORTS = {
    "LEDConfig": "config",
    "LEDStepInfo": "led",
    "led_step": "led",
    "sample_sorted": "led",
    "layer_indices": "layers",
    "layerwise_logits": "layers",
    "layerwise_from_outputs": "layers",
    "entropy_profile": "layers",
    "LEDDecoding": "generate",
    "DoLaDecoding": "generate",
    "SamplingDecoding": "generate",
    "led_decoding": "generate",
    "dola_decoding": "generate",
    "led_generate": "generate",
    "think_state": "generate",
    "dola_candidate_layers": "dola",
    "dola_contrast": "dola",
    "relative_top_filter": "dola",
    "pass_at_k": "metrics",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
