"""SMART (reconstructed): a mesh-free transformer surrogate that predicts physical fields at
arbitrary query points from a point-cloud geometry and simulation parameters. Nothing heavy is
imported here; torch and transformers load when an attribute is first used."""

from __future__ import annotations

from icml.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "SMARTConfig": "configuration_smart",
    "SMARTModel": "modeling_smart",
    "load_smart": "modeling_smart",
    "FourierFeatures": "fourier",
    "SupernodePooling": "supernodes",
    "farthest_point_sampling": "supernodes",
    "BaselineConfig": "baselines",
    "PointNetMLP": "baselines",
    "TransolverLite": "baselines",
    "Ellipse": "potential_flow",
    "Sphere": "potential_flow",
    "solve_stream_function": "laplace",
    "PotentialFlowDataset": "data",
    "FlowRanges": "data",
    "ChannelNormalizer": "data",
    "collate": "data",
    "relative_l2": "metrics",
    "force_coefficients": "metrics",
    "train_surrogate": "training",
    "evaluate_surrogate": "training",
    "ellipse_surface": "shape_opt",
    "optimize_ellipse": "shape_opt",
})
