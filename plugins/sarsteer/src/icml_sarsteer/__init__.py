"""SARSteer: safe-ablated refusal steering for (audio-)language models. Nothing heavy is
imported here; torch and transformers load when an attribute is first used.

>>> steer = SARSteer(alpha=0.1, k=10, lam=1.0).fit(model, harmful, benign, prompt)
>>> with steer.apply(model):
...     out = model.generate(**inputs)
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SARSteer": "icml_sarsteer.steering",
    "steering_hooks": "icml_sarsteer.steering",
    "hook_count": "icml_sarsteer.steering",
    "NoDefense": "icml_sarsteer.baselines",
    "PromptDefense": "icml_sarsteer.baselines",
    "PlainSteering": "icml_sarsteer.baselines",
    "LLMSteering": "icml_sarsteer.baselines",
    "make_defense": "icml_sarsteer.baselines",
    "refusal_direction": "icml_sarsteer.safe_space",
    "benign_subspace": "icml_sarsteer.safe_space",
    "safe_ablate": "icml_sarsteer.safe_space",
    "last_position_hidden": "icml_sarsteer.activations",
    "collect_activations": "icml_sarsteer.activations",
    "find_decoder_layers": "icml_sarsteer.layers",
    "resolve_layers": "icml_sarsteer.layers",
    "DEFAULT_INSTRUCTION": "icml_sarsteer.refusal",
    "REFUSAL_TEXTS": "icml_sarsteer.refusal",
    "refusal_text": "icml_sarsteer.refusal",
    "REFUSAL_MARKERS": "icml_sarsteer.metrics",
    "KeywordJudge": "icml_sarsteer.metrics",
    "ModelJudge": "icml_sarsteer.metrics",
    "refusal_rate": "icml_sarsteer.metrics",
    "bootstrap_ci": "icml_sarsteer.metrics",
    "evaluate_defense": "icml_sarsteer.evaluation",
    "compare_defenses": "icml_sarsteer.evaluation",
    "ChatPrompt": "icml_sarsteer.prompts",
    "generate_responses": "icml_sarsteer.prompts",
    "render_speech": "icml_sarsteer.audio",
    "espeak_available": "icml_sarsteer.audio",
    "make_benchmark": "icml_sarsteer.data",
    "query_pairs": "icml_sarsteer.data",
    "ToyLALMConfig": "icml_sarsteer.toy_lalm",
    "build_toy_lalm": "icml_sarsteer.toy_lalm",
    "train_toy_lalm": "icml_sarsteer.toy_lalm",
    "AudioPrompt": "icml_sarsteer.toy_lalm",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'icml_sarsteer' has no attribute {name!r}")
