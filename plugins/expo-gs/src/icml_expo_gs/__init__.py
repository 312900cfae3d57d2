"""Expo-GS: exposure-aware HDR novel-view synthesis with 3D Gaussians and an SDF. The public API;
nothing heavy is imported here (torch loads when an attribute is first used)."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Camera": "icml_expo_gs.rasterizer",
    "look_at": "icml_expo_gs.rasterizer",
    "project": "icml_expo_gs.rasterizer",
    "rasterize": "icml_expo_gs.rasterizer",
    "rasterize_dense": "icml_expo_gs.rasterizer",
    "rasterize_naive": "icml_expo_gs.rasterizer",
    "render_gaussians": "icml_expo_gs.rasterizer",
    "gradcheck_rasterizer": "icml_expo_gs.rasterizer",
    "covariance_3d": "icml_expo_gs.rasterizer",
    "ToneMapper": "icml_expo_gs.tonemap",
    "camera_response": "icml_expo_gs.tonemap",
    "GaussianModel": "icml_expo_gs.gaussians",
    "SDFNetwork": "icml_expo_gs.sdf",
    "geometric_loss": "icml_expo_gs.sdf",
    "eikonal_loss": "icml_expo_gs.sdf",
    "well_exposedness": "icml_expo_gs.reliability",
    "view_reliability": "icml_expo_gs.reliability",
    "make_synthetic_hdr_scene": "icml_expo_gs.scene",
    "load_hdr_nerf": "icml_expo_gs.scene",
    "scene_sdf": "icml_expo_gs.scene",
    "HDRScene": "icml_expo_gs.scene",
    "View": "icml_expo_gs.scene",
    "ExpoGSConfig": "icml_expo_gs.config",
    "ExpoGSTrainer": "icml_expo_gs.trainer",
    "TrainedModel": "icml_expo_gs.trainer",
    "evaluate_hdr_nvs": "icml_expo_gs.metrics",
    "mu_law": "icml_expo_gs.metrics",
    "psnr": "icml_expo_gs.metrics",
    "ssim": "icml_expo_gs.metrics",
    "floater_fraction": "icml_expo_gs.metrics",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'icml_expo_gs' has no attribute {name!r}")
