"""XSpecMesh: multi-head speculative decoding for autoregressive mesh generation. The public
API; nothing heavy is imported here (numpy, torch, transformers and trimesh load when an
attribute is first used)."""

from __future__ import annotations

from icml.lazy import lazy_exports

_EXPORTS = {
    "MeshTokenizer": "tokenizer",
    "triangulate_faces": "tokenizer",
    "normalize_vertices": "tokenizer",
    "CLASSES": "dataset",
    "PrimitiveDataset": "dataset",
    "make_primitive_dataset": "dataset",
    "pad_collate": "dataset",
    "primitive": "dataset",
    "from_trimesh": "meshio",
    "to_trimesh": "meshio",
    "load_mesh": "meshio",
    "export_mesh": "meshio",
    "build_backbone": "backbone",
    "train_backbone": "backbone",
    "SpeculativeHeads": "heads",
    "ResidualHead": "heads",
    "distill_heads": "distill",
    "distillation_loss": "distill",
    "speculative_generate": "speculative",
    "autoregressive_generate": "speculative",
    "SpeculativeOutput": "speculative",
    "filtered_probs": "speculative",
    "XSpecDecoding": "generate",
    "chamfer_distance": "metrics",
    "bootstrap_ci": "metrics",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
