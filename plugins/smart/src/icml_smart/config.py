"""Typed configs, one per capability. Field names are the CLI's --set keys."""

from __future__ import annotations

from dataclasses import dataclass

from icml import option


@dataclass
class _Data:
    case: str = option("ellipse", help="simulation family: exact 2-D ellipse flow with "
                       "circulation, exact 3-D sphere flow, or finite-difference flow past random "
                       "smooth bodies", choices=("ellipse", "sphere", "laplace"))
    n_train: int = option(256, help="training cases", ge=1)
    n_test: int = option(64, help="test cases", ge=1)
    n_boundary: int = option(64, help="surface points per geometry point cloud", ge=1)
    n_queries: int = option(256, help="volume query points per case", ge=1)
    min_aspect: float = option(0.4, help="smallest ellipse aspect ratio b/a (thin ellipses "
                               "have huge suction peaks)", gt=0, le=1)
    max_circulation: float = option(0.2, help="largest |gamma| = |Gamma| / (2 pi U R) of "
                                    "the ellipse cases", ge=0)


CONDITIONING = ("both", "token", "adaln")


@dataclass
class SMARTSettings:
    """SMART's architecture settings: the ``model.*`` section of every job config and what
    :class:`~icml_smart.configuration_smart.SMARTConfig` (a subclass, also a transformers
    ``PretrainedConfig``) is made of. Each default is written here only."""

    dim: int = option(48, help="SMART width", ge=8)
    depth: int = option(3, help="encoder depth = cross-layer decoder depth", ge=1)
    heads: int = option(4, help="attention heads (dim must be divisible)", ge=1)
    mlp_ratio: float = option(2.0, help="MLP expansion of every block", gt=0)
    num_supernodes: int = option(32, help="supernode geometry tokens (<= n_boundary)", ge=1)
    num_neighbors: int = option(8, help="points pooled into each supernode", ge=1)
    supernode_radius: float | None = option(None, help="pool only neighbours within this "
                                            "radius, a finite number > 0 (none: k nearest)",
                                            gt=0)
    fourier_features: int = option(16, help="sin-cos frequencies per coordinate", ge=1)
    max_freq: float = option(4.0, help="highest encoding frequency (cycles per domain "
                             "half-width)", gt=0)
    coord_scale: float = option(1.5, help="coordinates are divided by this before the "
                                "encoding (the domain half-width)", gt=0)
    param_conditioning: str = option("both", help="simulation parameters as an encoder token, "
                                     "AdaLN modulation, or both", choices=CONDITIONING)
    normalize_params: bool = option(False, help="z-score the simulation parameters with the "
                                    "training set's statistics (stored in the model's config) "
                                    "before embedding them; fixes SMART's lift (force diagnosis)")
    query_params: bool = option(False, help="also add the parameter embedding to every "
                                "query's embedding at the decoder's input (a direct parameter "
                                "path for each query, as PointNet-MLP has)")

    def __post_init__(self) -> None:
        if self.param_conditioning not in CONDITIONING:
            raise ValueError(f"param_conditioning={self.param_conditioning!r}: use one of "
                             f"{CONDITIONING}")
        if self.dim % self.heads:
            raise ValueError(f"dim={self.dim} is not divisible by heads={self.heads}")
        for name in ("depth", "num_supernodes", "num_neighbors"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        r = self.supernode_radius
        if r is not None and not 0 < r < float("inf"):
            raise ValueError(f"supernode_radius={r!r} must be a finite number > 0 (or none for "
                             "the k nearest neighbours)")


@dataclass
class _Model:
    model: SMARTSettings = option(default_factory=SMARTSettings,
                                  help="SMART's architecture (SMARTSettings, which SMARTConfig "
                                  "subclasses)")


@dataclass
class _Train:
    steps: int = option(150, help="optimizer steps per model", ge=1)
    batch_size: int = option(16, help="cases per step", ge=1)
    lr: float = option(2e-3, help="peak learning rate (one-cycle AdamW)", gt=0)
    query_subsample: int = option(128, help="volume queries drawn per case per step", ge=1)
    surface_weight: float = option(0.1, help="weight of the surface-point loss", ge=0)


@dataclass
class TrainConfig(_Data, _Model, _Train):
    models: list[str] = option(["smart", "last_layer", "pointnet"],
                               help="arms to train: smart (cross-layer decoder), last_layer "
                               "(ablation), concat (decoder reads all layers), pointnet, "
                               "transolver (Transolver-style peer, ours)")
    plot_resolution: int = option(96, help="grid points per side of the field plot", ge=8)

    def __post_init__(self) -> None:
        _validate(self)
        bad = [m for m in self.models if m not in ARMS]
        if bad or not self.models:
            raise ValueError(f"models={self.models}: each must be one of {ARMS}")


@dataclass
class InferConfig(_Data, _Model, _Train):
    model_path: str = option("", help="folder of a saved SMARTModel (save_pretrained); empty: "
                             "train SMART briefly first")
    n_query_points: int = option(200_000, help="query points answered on one geometry", ge=1)
    chunk_size: int = option(16_384, help="queries decoded per chunk", ge=1)

    def __post_init__(self) -> None:
        _validate(self)


@dataclass
class EvaluateConfig(TrainConfig):
    pass


@dataclass
class DifferentiateConfig(_Data, _Model, _Train):
    opt_steps: int = option(20, help="shape-optimisation gradient steps", ge=0)
    opt_lr: float = option(0.05, help="shape-optimisation step size", gt=0)
    fd_eps: float = option(1e-5, help="finite-difference step of the gradient checks", gt=0)

    def __post_init__(self) -> None:
        _validate(self)
        if self.case != "ellipse":
            raise ValueError(f"case={self.case!r}: the shape-optimisation example "
                             "parametrises ellipses; use case=ellipse")


ARMS = ("smart", "last_layer", "concat", "pointnet", "transolver")


def _validate(cfg: _Data | _Model) -> None:
    m = cfg.model  # type: ignore[union-attr]
    if m.num_supernodes > cfg.n_boundary:  # type: ignore[union-attr]
        raise ValueError(f"model.num_supernodes={m.num_supernodes} exceeds n_boundary="
                         f"{cfg.n_boundary}: supernodes are picked from the surface points; "  # type: ignore[union-attr]
                         "lower model.num_supernodes or raise n_boundary")
