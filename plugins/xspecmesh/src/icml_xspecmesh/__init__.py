"""XSpecMesh: multi-head speculative decoding for autoregressive mesh generation. The public
API; nothing heavy is imported here (numpy, torch, transformers and trimesh load when an
attribute is first used)."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "MeshTokenizer": "icml_xspecmesh.tokenizer",
    "triangulate_faces": "icml_xspecmesh.tokenizer",
    "normalize_vertices": "icml_xspecmesh.tokenizer",
    "CLASSES": "icml_xspecmesh.dataset",
    "PrimitiveDataset": "icml_xspecmesh.dataset",
    "make_primitive_dataset": "icml_xspecmesh.dataset",
    "pad_collate": "icml_xspecmesh.dataset",
    "primitive": "icml_xspecmesh.dataset",
    "from_trimesh": "icml_xspecmesh.meshio",
    "to_trimesh": "icml_xspecmesh.meshio",
    "load_mesh": "icml_xspecmesh.meshio",
    "export_mesh": "icml_xspecmesh.meshio",
    "build_backbone": "icml_xspecmesh.backbone",
    "train_backbone": "icml_xspecmesh.backbone",
    "SpeculativeHeads": "icml_xspecmesh.heads",
    "ResidualHead": "icml_xspecmesh.heads",
    "distill_heads": "icml_xspecmesh.distill",
    "distillation_loss": "icml_xspecmesh.distill",
    "speculative_generate": "icml_xspecmesh.speculative",
    "autoregressive_generate": "icml_xspecmesh.speculative",
    "SpeculativeOutput": "icml_xspecmesh.speculative",
    "filtered_probs": "icml_xspecmesh.speculative",
    "XSpecDecoding": "icml_xspecmesh.generate",
    "chamfer_distance": "icml_xspecmesh.metrics",
    "bootstrap_ci": "icml_xspecmesh.metrics",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'icml_xspecmesh' has no attribute {name!r}")
