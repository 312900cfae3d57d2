"""``SMARTConfig``: the transformers configuration of the SMART surrogate."""

from __future__ import annotations

import dataclasses
from typing import Any

from transformers import PretrainedConfig

from icml_smart.config import CONDITIONING, SMARTSettings

DECODERS = ("cross_layer", "last_layer", "concat")
__all__ = ["CONDITIONING", "DECODERS", "SMARTConfig"]


class SMARTConfig(PretrainedConfig, SMARTSettings):
    """Hyper-parameters of :class:`~icml_smart.modeling_smart.SMARTModel`: the architecture
    settings of :class:`~icml_smart.config.SMARTSettings` (the job configs' ``model.*``
    section; defaults written there only) plus what the data and the trainer set. Build one
    from a section with :meth:`from_config`.

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
        normalize_params: z-score ``params`` with ``param_mean`` / ``param_std`` (set by the
            trainer from the training set) before embedding them.
        query_params: also add the parameter embedding to every query's embedding at the
            decoder's input (off: the queries see the parameters only through the latents and
            the AdaLN modulation).
        target_mean, target_std: per-channel normalisation of the targets (set by the trainer);
            ``predict`` returns physical units.
    """

    model_type = "smart"

    def __init__(self, space_dim: int = 2, param_dim: int = 4, out_dim: int = 3,
                 decoder_depth: int | None = None, decoder: str = "cross_layer",
                 target_mean: list[float] | None = None, target_std: list[float] | None = None,
                 param_mean: list[float] | None = None, param_std: list[float] | None = None,
                 initializer_range: float = 0.02, **kwargs: Any) -> None:
        # the architecture settings: SMARTSettings' fields, its defaults, its validation
        for f in dataclasses.fields(SMARTSettings):
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            setattr(self, f.name, kwargs.pop(f.name, default))
        SMARTSettings.__post_init__(self)
        depth = self.depth
        if decoder not in DECODERS:
            raise ValueError(f"decoder={decoder!r}: use one of {DECODERS}")
        decoder_depth = depth if decoder_depth is None else decoder_depth
        if decoder == "cross_layer" and decoder_depth != depth:
            raise ValueError(f"the cross-layer decoder pairs decoder layer l with encoder layer "
                             f"l, so decoder_depth ({decoder_depth}) must equal depth ({depth})")
        for name, v in (("space_dim", space_dim), ("param_dim", param_dim), ("out_dim", out_dim)):
            if v < 1:
                raise ValueError(f"{name}={v} must be >= 1")
        for name, stats in (("target_mean", target_mean), ("target_std", target_std)):
            if stats is not None and len(stats) != out_dim:
                raise ValueError(f"{name} has {len(stats)} entries, out_dim is {out_dim}")
        self.space_dim, self.param_dim, self.out_dim = space_dim, param_dim, out_dim
        self.decoder_depth = decoder_depth
        self.decoder = decoder
        self.target_mean = list(target_mean) if target_mean is not None else None
        self.target_std = list(target_std) if target_std is not None else None
        for name, stats in (("param_mean", param_mean), ("param_std", param_std)):
            if stats is not None and len(stats) != param_dim:
                raise ValueError(f"{name} has {len(stats)} entries, param_dim is {param_dim}")
        self.param_mean = list(param_mean) if param_mean is not None else None
        self.param_std = list(param_std) if param_std is not None else None
        self.initializer_range = initializer_range
        super().__init__(**kwargs)

    @classmethod
    def from_config(cls, settings: SMARTSettings, **kwargs: Any) -> SMARTConfig:
        """The config with the architecture ``settings`` (a ``model.*`` section) and the
        data- and arm-specific ``kwargs`` (``space_dim``, ``param_dim``, ``out_dim``,
        ``decoder``, ...)."""
        own = {f.name: getattr(settings, f.name) for f in dataclasses.fields(SMARTSettings)}
        return cls(**own, **kwargs)
