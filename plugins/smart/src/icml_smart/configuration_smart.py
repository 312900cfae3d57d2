"""``SMARTConfig``: the transformers configuration of the SMART surrogate."""

from __future__ import annotations

from transformers import PretrainedConfig

DECODERS = ("cross_layer", "last_layer", "concat")
CONDITIONING = ("both", "token", "adaln")


class SMARTConfig(PretrainedConfig):
    """Hyper-parameters of :class:`~icml_smart.modeling_smart.SMARTModel`.

    Args:
        space_dim: coordinates per point (2 or 3).
        param_dim: simulation parameters per case (the width of ``params``).
        out_dim: predicted channels per query point.
        dim, depth, heads, mlp_ratio: transformer width, encoder depth, heads, MLP expansion.
        decoder_depth: decoder layers (``None``: ``depth``; ``cross_layer`` needs ``depth``).
        num_supernodes, num_neighbors, supernode_radius: geometry tokenisation (``radius`` None:
            plain k nearest neighbours).
        fourier_features, max_freq, coord_scale: the sin-cos encoding of coordinates.
        decoder: ``"cross_layer"`` (decoder layer l reads encoder layer l, SMART),
            ``"last_layer"`` (every decoder layer reads the last encoder layer, the Perceiver-IO
            style ablation) or ``"concat"`` (every layer reads all encoder layers).
        param_conditioning: ``"token"`` (one extra encoder token from the parameters),
            ``"adaln"`` (scale/shift modulation in every block) or ``"both"``.
        target_mean, target_std: per-channel normalisation of the targets (set by the trainer);
            ``predict`` returns physical units.
    """

    model_type = "smart"

    def __init__(self, space_dim: int = 2, param_dim: int = 4, out_dim: int = 3, dim: int = 64,
                 depth: int = 3, heads: int = 4, mlp_ratio: float = 2.0,
                 decoder_depth: int | None = None, num_supernodes: int = 32,
                 num_neighbors: int = 8, supernode_radius: float | None = None,
                 fourier_features: int = 16, max_freq: float = 8.0, coord_scale: float = 1.5,
                 decoder: str = "cross_layer", param_conditioning: str = "both",
                 target_mean: list[float] | None = None, target_std: list[float] | None = None,
                 initializer_range: float = 0.02, **kwargs) -> None:
        if decoder not in DECODERS:
            raise ValueError(f"decoder={decoder!r}: use one of {DECODERS}")
        if param_conditioning not in CONDITIONING:
            raise ValueError(f"param_conditioning={param_conditioning!r}: use one of "
                             f"{CONDITIONING}")
        if dim % heads:
            raise ValueError(f"dim={dim} is not divisible by heads={heads}")
        decoder_depth = depth if decoder_depth is None else decoder_depth
        if decoder == "cross_layer" and decoder_depth != depth:
            raise ValueError(f"the cross-layer decoder pairs decoder layer l with encoder layer "
                             f"l, so decoder_depth ({decoder_depth}) must equal depth ({depth})")
        for name, v in (("space_dim", space_dim), ("param_dim", param_dim), ("out_dim", out_dim),
                        ("depth", depth), ("num_supernodes", num_supernodes),
                        ("num_neighbors", num_neighbors)):
            if v < 1:
                raise ValueError(f"{name}={v} must be >= 1")
        if supernode_radius is not None and not 0 < supernode_radius < float("inf"):
            raise ValueError(f"supernode_radius={supernode_radius} must be a finite number > 0 "
                             "(or None for the k nearest neighbours)")
        for name, stats in (("target_mean", target_mean), ("target_std", target_std)):
            if stats is not None and len(stats) != out_dim:
                raise ValueError(f"{name} has {len(stats)} entries, out_dim is {out_dim}")
        self.space_dim, self.param_dim, self.out_dim = space_dim, param_dim, out_dim
        self.dim, self.depth, self.heads, self.mlp_ratio = dim, depth, heads, mlp_ratio
        self.decoder_depth = decoder_depth
        self.num_supernodes, self.num_neighbors = num_supernodes, num_neighbors
        self.supernode_radius = supernode_radius
        self.fourier_features, self.max_freq, self.coord_scale = (fourier_features, max_freq,
                                                                  coord_scale)
        self.decoder, self.param_conditioning = decoder, param_conditioning
        self.target_mean = list(target_mean) if target_mean is not None else None
        self.target_std = list(target_std) if target_std is not None else None
        self.initializer_range = initializer_range
        super().__init__(**kwargs)
