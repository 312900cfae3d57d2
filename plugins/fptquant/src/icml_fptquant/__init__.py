"""FPTQuant: function-preserving transforms for static W4A4KV4 quantization of Llama- and
Qwen2-style transformers models.

The public API is imported lazily (``icml.lazy.lazy_exports``), so ``import icml_fptquant`` loads
no torch."""

from __future__ import annotations

from icml.lazy import lazy_exports
from icml_fptquant.config import (
    EvaluateConfig,
    FPTQuantConfig,
    QuantizeConfig,
    QuantOptions,
    TrainConfig,
    TrainingOptions,
    TransformOptions,
)

_API = {
    "apply_fpt_transforms": "apply", "merge_transforms": "apply",
    "transform_parameters": "apply",
    "optimize_local": "training", "optimize_e2e": "training", "outlier_norm": "training",
    "e2e_loss": "training",
    "merge_and_quantize": "quantize", "attach_quantizers": "quantize", "calibrate": "quantize",
    "round_weights": "quantize", "quant_disabled": "quantize",
    "perplexity": "evaluation", "compare_logits": "evaluation", "logits_of": "evaluation",
    "apply_smoothquant": "baselines", "apply_quarot": "baselines", "quarot_config": "baselines",
    "inject_outliers": "outliers",
    "save_quantized": "export", "load_quantized": "export",
    "apply_dynamic_residual_scaling": "residual_scaling",
    "ActQuantizer": "quantizers", "quantize_weight_rtn": "quantizers",
    "quantize_weight_gptq": "quantizers", "quantize_weight_nf4": "quantizers",
    "ResidualRotation": "transforms", "PreRoPETransform": "transforms",
    "ValueTransform": "transforms", "MLPScale": "transforms",
    "check_function_preservation": "evaluation",
    "unwrap": "interop", "save_fpt_model": "interop", "load_fpt_model": "interop",
    "mark_fpt": "interop", "residual_rotation": "interop",
}

__getattr__, __dir__, _lazy = lazy_exports(__name__, _API)
__all__ = ["EvaluateConfig", "FPTQuantConfig", "QuantOptions", "QuantizeConfig", "TrainConfig",
           "TrainingOptions", "TransformOptions", *_lazy]
