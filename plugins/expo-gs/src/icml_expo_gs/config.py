"""Typed configs. ``ExpoGSConfig`` is the trainer's config (Python API and CLI alike: field names
are the ``--set`` keys); the hook configs add the scene and the run's arms."""

from __future__ import annotations

from dataclasses import dataclass

from icml import ConfigError, option

METHODS = ("hdrgs", "expo-gs")


@dataclass
class ExpoGSConfig:
    """Every constant of HDR-GS (scaled down) and of the Expo-GS stages."""

    method: str = option("expo-gs", help="expo-gs (three stages) or hdrgs (the baseline: "
                         "stage 1 only, for the same number of GS iterations)", choices=METHODS)
    # stage 1: irradiance field (HDR-GS)
    iters_irradiance: int = option(150, help="stage-1 GS iterations (HDR-GS: 30k)", ge=0)
    iters_geometry: int = option(60, help="stage-2 SDF iterations (GS frozen)", ge=0)
    iters_joint: int = option(150, help="stage-3 joint iterations (the baseline runs the same "
                              "number of plain HDR-GS iterations)", ge=0)
    crf: str = option("per_gaussian", help="tone mapping per Gaussian (HDR-GS) or per pixel "
                      "(physically correct option)", choices=("per_gaussian", "per_pixel"))
    tonemapper_hidden: int = option(16, help="hidden width of each per-channel tone-mapper MLP "
                                    "(HDR-GS: 128)", ge=1)
    monotone_tonemapper: bool = option(False, help="positive MLP weights so g' >= 0")
    lambda_hdr: float = option(0.6, help="weight of the HDR (mu-law) term, HDR-GS 0.6; 0 = "
                               "LDR supervision only", ge=0)
    lambda_dssim: float = option(0.2, help="SSIM share of each photometric term (HDR-GS 0.2)",
                                 ge=0, le=1)
    mu: float = option(5000.0, help="mu of the mu-law used in the HDR loss and metrics", gt=0)
    lr_means: float = option(1.6e-3, help="position lr (decays x0.01 over training; HDR-GS "
                             "1.6e-4 at scene scale)", gt=0)
    lr_scales: float = option(5e-3, help="log-scale lr", gt=0)
    lr_quats: float = option(1e-3, help="quaternion lr", gt=0)
    lr_opacity: float = option(5e-2, help="opacity lr", gt=0)
    lr_color: float = option(2.5e-2, help="log-irradiance lr", gt=0)
    lr_decay: float = option(1.0, help="final factor of the log-irradiance (SH bands too), "
                             "opacity, scale and quaternion lrs (exponential decay over "
                             "training; 1 = constant, the default and 3DGS's choice; the "
                             "converge30 benchmark: 0.1)",
                             gt=0, le=1)
    lr_tonemapper: float = option(5e-3, help="tone-mapper lr (decays x0.1; HDR-GS 5e-4)", gt=0)
    sh_degree: int = option(0, help="SH degree of the (log-irradiance) colours, 0-3 (0 = DC "
                            "only, the default; HDR-GS 3); higher bands lr = lr_color/20",
                            ge=0, le=3)
    init_scale: float = option(0.06, help="initial Gaussian scale", gt=0)
    init_opacity: float = option(0.3, help="initial opacity", gt=0, lt=1)
    n_floaters: int = option(64, help="random Gaussians added to the SfM-like init", ge=0)
    # density control (HDR-GS schedule, scaled)
    densify_from: int = option(30, help="first densification iteration", ge=0)
    densify_until: int = option(250, help="last densification iteration", ge=0)
    densify_every: int = option(30, help="densify/prune interval", ge=1)
    grad_threshold: float = option(1.5e-3, help="mean NDC screen-space position-gradient "
                                   "threshold (HDR-GS 1.6e-4 at 400-800 px images)", gt=0)
    percent_dense: float = option(0.03, help="clone below / split above this share of extent",
                                  gt=0)
    prune_opacity: float = option(0.005, help="prune Gaussians below this opacity", ge=0)
    opacity_reset_every: int = option(0, help="opacity reset interval (0 = off; HDR-GS 3000)",
                                      ge=0)
    max_gaussians: int = option(800, help="densification cap", ge=1)
    # stage 2: Expo-SDF (reconstructed)
    sdf_hidden: int = option(64, help="SDF MLP width", ge=4)
    sdf_layers: int = option(2, help="SDF hidden layers", ge=1)
    sdf_radius: float = option(0.8, help="geometric-init sphere radius", gt=0)
    lr_sdf: float = option(2e-3, help="SDF lr", gt=0)
    rays_per_step: int = option(512, help="GS surface points per SDF step", ge=8)
    reliability: str = option("mertens", help="exposure reliability weight", choices=(
        "mertens", "triangle", "uniform"))
    mertens_sigma: float = option(0.2, help="Mertens well-exposedness sigma", gt=0)
    window: int = option(5, help="odd window of the localised reliability mean", ge=1)
    consistency: bool = option(False, help="multiply by cross-exposure consistency "
                               "exp(-(g^-1(I)-ln dt-ln E)^2/tau)")
    consistency_tau: float = option(0.5, help="tau of the consistency term", gt=0)
    reliability_every: int = option(50, help="dynamic recomputation interval in stage 3 (0 = "
                                    "computed once)", ge=0)
    lambda_normal: float = option(0.1, help="normal-consistency weight lambda_n", ge=0)
    lambda_eik: float = option(0.1, help="eikonal weight", ge=0)
    near_k: float = option(4.0, help="near-surface samples within 2k|s| of the GS depth", ge=0)
    # stage 3: joint
    lambda_geo: float = option(0.05, help="weight of L_geo on the Gaussians in stage 3", ge=0)
    sdf_densify_omega: float = option(7.5e-4, help="omega of the SDF densification bonus (half "
                                      "of grad_threshold: SDF proximity alone never densifies)",
                                      ge=0)
    sdf_sigma: float = option(0.05, help="sigma of exp(-s^2/2sigma^2)", gt=0)
    sdf_prune_tau: float = option(0.01, help="prune when exp(-s^2/2sigma^2) < tau_p", ge=0,
                                  lt=1)
    # rendering
    tile: int = option(16, help="rasterizer tile size (pixels)", ge=1)
    eps2d: float = option(0.3, help="2D covariance dilation (px^2)", gt=0)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"config key 'method': {self.method!r}; use one of {METHODS}")
        if self.window % 2 == 0:
            raise ConfigError(f"config key 'window': {self.window} must be odd")
        if self.densify_until < self.densify_from:
            raise ConfigError("config key 'densify_until' must be >= 'densify_from'")


def _check_scene(cfg: _SceneOpts) -> None:
    """The scene keys' bounds, for configs built in Python too (the CLI checks them as well)."""
    for key in ("resolution", "n_views", "n_test", "n_points"):
        value = getattr(cfg, key)
        low = 8 if key == "resolution" else 1
        if value < low:
            raise ConfigError(f"config key {key!r}: got {value}, must be >= {low}")


@dataclass
class _SceneOpts:
    resolution: int = option(32, help="image size of the synthetic scene", ge=8)
    n_views: int = option(12, help="training views (each at t1, t3, t5)", ge=1)
    n_test: int = option(3, help="test views (all five exposures)", ge=1)
    n_points: int = option(256, help="SfM-like init points", ge=1)
    plane_extent: float = option(0.0, help="synthetic scene's ground: 0 = infinite plane "
                                 "(default), > 0 = a square slab of this half-size (the converge "
                                 "benchmark's bounded scene: 1.2)", ge=0)
    supersample: int = option(1, help="synthetic scene: rays per pixel side for anti-aliased "
                              "HDR ground truth (1 = one ray per pixel, the default; the "
                              "converge benchmark's scene: 4)", ge=1)
    data_dir: str = option("", help="an HDR-NeRF scene folder instead of the synthetic scene")


@dataclass
class TrainConfig(ExpoGSConfig, _SceneOpts):
    methods: list[str] = option(["hdrgs", "expo-gs"], help="arms to train and compare")
    save_renders: bool = option(True, help="write PNG renders of a test view")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_scene(self)
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ConfigError(f"config key 'methods': {bad or self.methods}; use {METHODS}")


@dataclass
class EvaluateConfig(TrainConfig):
    seeds: int = option(2, help="seeds per arm", ge=1)


@dataclass
class InferConfig(ExpoGSConfig, _SceneOpts):
    exposure: float = option(2.0, help="exposure time to render at (finite, > 0)", gt=0)
    view: int = option(0, help="test view to render", ge=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_scene(self)
        if not 0 < self.exposure < float("inf"):  # inf failed only after training
            raise ConfigError(f"config key 'exposure': got {self.exposure!r}, must be a "
                              "finite number > 0")


@dataclass
class DifferentiateConfig:
    n_gaussians: int = option(3, help="Gaussians in the gradcheck scene", ge=1)
    size: int = option(6, help="image size of the gradcheck scene", ge=2)
    mode: str = option("tiled", help="rasterizer to check", choices=("tiled", "dense", "naive"))
    tile: int = option(4, help="tile size", ge=1)
