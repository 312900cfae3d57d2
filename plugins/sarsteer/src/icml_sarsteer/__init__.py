"""SARSteer: safe-ablated refusal steering for (audio-)language models. Nothing heavy is
imported here; torch and transformers load when an attribute is first used.

>>> steer = SARSteer(alpha=0.1, k=10, lam=1.0).fit(model, harmful, benign, prompt)
>>> with steer.apply(model):
...     out = model.generate(**inputs)
"""

from __future__ import annotations

from icml.lazy import lazy_exports

_EXPORTS = {
    "SARSteer": "steering",
    "steering_hooks": "steering",
    "hook_count": "steering",
    "NoDefense": "baselines",
    "PromptDefense": "baselines",
    "PlainSteering": "baselines",
    "LLMSteering": "baselines",
    "make_defense": "baselines",
    "refusal_direction": "safe_space",
    "benign_subspace": "safe_space",
    "safe_ablate": "safe_space",
    "last_position_hidden": "activations",
    "collect_activations": "activations",
    "find_decoder_layers": "layers",
    "resolve_layers": "layers",
    "DEFAULT_INSTRUCTION": "refusal",
    "REFUSAL_TEXTS": "refusal",
    "refusal_text": "refusal",
    "REFUSAL_MARKERS": "metrics",
    "KeywordJudge": "metrics",
    "ModelJudge": "metrics",
    "refusal_rate": "metrics",
    "bootstrap_ci": "metrics",
    "evaluate_defense": "evaluation",
    "compare_defenses": "evaluation",
    "ChatPrompt": "prompts",
    "generate_responses": "prompts",
    "render_speech": "audio",
    "espeak_available": "audio",
    "make_benchmark": "data",
    "query_pairs": "data",
    "ToyLALMConfig": "toy_lalm",
    "build_toy_lalm": "toy_lalm",
    "train_toy_lalm": "toy_lalm",
    "AudioPrompt": "toy_lalm",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
