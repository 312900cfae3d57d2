"""Expo-GS: exposure-aware HDR novel-view synthesis with 3D Gaussians and an SDF. The public API;
nothing heavy is imported here (torch loads when an attribute is first used)."""

from __future__ import annotations

from icml.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "Camera": "rasterizer",
    "look_at": "rasterizer",
    "project": "rasterizer",
    "rasterize": "rasterizer",
    "rasterize_dense": "rasterizer",
    "rasterize_naive": "rasterizer",
    "render_gaussians": "rasterizer",
    "gradcheck_rasterizer": "rasterizer",
    "covariance_3d": "rasterizer",
    "ToneMapper": "tonemap",
    "camera_response": "tonemap",
    "GaussianModel": "gaussians",
    "SDFNetwork": "sdf",
    "geometric_loss": "sdf",
    "eikonal_loss": "sdf",
    "well_exposedness": "reliability",
    "view_reliability": "reliability",
    "make_synthetic_hdr_scene": "scene",
    "load_hdr_nerf": "scene",
    "scene_sdf": "scene",
    "HDRScene": "scene",
    "View": "scene",
    "ExpoGSConfig": "config",
    "ExpoGSTrainer": "trainer",
    "TrainedModel": "trainer",
    "evaluate_hdr_nvs": "metrics",
    "mu_law": "metrics",
    "psnr": "metrics",
    "ssim": "metrics",
    "floater_fraction": "metrics",
    "crf_error": "metrics",
    "train_ldr_psnr": "metrics",
    "rasterization": "api",
    "gsplat_available": "api",
    "eval_sh": "sh",
    "sh_basis": "sh",
})
