"""SMART (reconstructed): a mesh-free transformer surrogate that predicts physical fields at
arbitrary query points from a point-cloud geometry and simulation parameters. Nothing heavy is
imported here; torch and transformers load when an attribute is first used."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SMARTConfig": "icml_smart.configuration_smart",
    "SMARTModel": "icml_smart.modeling_smart",
    "FourierFeatures": "icml_smart.fourier",
    "SupernodePooling": "icml_smart.supernodes",
    "farthest_point_sampling": "icml_smart.supernodes",
    "BaselineConfig": "icml_smart.baselines",
    "PointNetMLP": "icml_smart.baselines",
    "TransolverLite": "icml_smart.baselines",
    "Ellipse": "icml_smart.potential_flow",
    "Sphere": "icml_smart.potential_flow",
    "solve_stream_function": "icml_smart.laplace",
    "PotentialFlowDataset": "icml_smart.data",
    "FlowRanges": "icml_smart.data",
    "ChannelNormalizer": "icml_smart.data",
    "collate": "icml_smart.data",
    "relative_l2": "icml_smart.metrics",
    "force_coefficients": "icml_smart.metrics",
    "train_surrogate": "icml_smart.training",
    "evaluate_surrogate": "icml_smart.training",
    "ellipse_surface": "icml_smart.shape_opt",
    "optimize_ellipse": "icml_smart.shape_opt",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'icml_smart' has no attribute {name!r}")
