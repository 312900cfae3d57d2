"""Differential syntactic and semantic encoding in LLMs (Acevedo, Laio, Baroni): sentence
representations per layer, syntactic and semantic centroids, projection ablation, recall@k and
the Information Imbalance, on any transformers model.

The public API is re-exported here lazily (icml.lazy.lazy_exports), so importing the package
loads no torch.
"""

from __future__ import annotations

from icml.lazy import lazy_exports

_EXPORTS = {
    "ExtractionOptions": "config", "AnalysisOptions": "config", "EvaluateConfig": "config",
    "SynSemData": "data", "load_synsem_dir": "data",
    "Lexicon": "generate", "make_toy_data": "generate",
    "planted_llama": "toy_model", "toy_tokenizer": "toy_model", "toy_setup": "toy_model",
    "extract_sentence_reps": "representations", "default_layers": "representations",
    "resolve_layers": "representations", "clip_quantiles": "representations",
    "load_model": "representations", "num_layers": "representations",
    "cast_parameters": "representations",
    "remove_projection": "centroids", "subtract": "centroids", "orthogonalize": "centroids",
    "ablate": "centroids", "explained_sq_norm": "centroids", "group_centroids": "centroids",
    "syntactic_centroids": "centroids", "semantic_centroids": "centroids",
    "derangement": "centroids", "permuted_ablation": "centroids",
    "recall_at_k": "retrieval", "recall_hits": "retrieval", "cosine_matrix": "retrieval",
    "rowwise_cosine": "retrieval",
    "information_imbalance": "imbalance", "centroid_imbalance": "imbalance",
    "distance_matrix": "imbalance", "rank_matrix": "imbalance", "neighbour_ranks": "imbalance",
    "official_imbalance": "imbalance", "split_half": "imbalance",
    "make_english_data": "english", "translate": "english",
    "SentenceReps": "protocol", "ProfileResult": "protocol", "sentence_reps": "protocol",
    "analyse_reps": "protocol", "centroid_ablation_profile": "protocol",
    "CONDITIONS": "protocol", "CENTERINGS": "protocol", "center_sets": "protocol",
    "profile_tables": "report", "profile_plots": "report",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
