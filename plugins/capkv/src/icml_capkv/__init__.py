"""CapKV: capacity-aware KV cache eviction with leverage scores, for transformers models.

The public API is re-exported lazily (icml.lazy.lazy_exports): importing this package
loads no torch.
"""

from __future__ import annotations

from icml.lazy import lazy_exports

_EXPORTS = {
    # the objective and selectors
    "information_capacity": "capacity", "ridge_leverage": "capacity",
    "greedy_logdet_select": "capacity", "logdet_drop": "capacity", "gram": "capacity",
    # scorers
    "ScoreInputs": "scorers", "capkv_scores": "scorers", "capkv_relevance": "scorers",
    "snapkv_scores": "scorers", "h2o_scores": "scorers", "knorm_scores": "scorers",
    "streaming_scores": "scorers", "random_scores": "scorers",
    # presses and cache
    "KVPress": "presses", "CapKVPress": "presses", "LeveragePress": "presses",
    "GreedyLogDetPress": "presses", "StreamingLLMPress": "presses", "SnapKVPress": "presses",
    "H2OPress": "presses", "KnormPress": "presses", "RandomPress": "presses",
    "POLICIES": "presses", "make_press": "presses", "n_kept": "presses",
    "query_anchor": "presses", "attention_layers": "presses",
    "CapKVCache": "cache", "CompressibleLayer": "cache",
    "prefill": "generation", "continuation_logits": "generation",
    "generate_with_press": "generation",
    # evaluation
    "RecallTask": "recall", "train_recall_model": "recall",
    "fidelity_table": "fidelity", "tensor_benchmark": "fidelity",
    "GrammarCorpus": "lm", "train_lm_model": "lm", "continuation_fidelity": "lm",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
