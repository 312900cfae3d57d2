"""Typed configs. The config is the API: ``FPTQuantConfig`` (sections ``quant``,
``transforms``, ``training``) is what the Python API takes, and the hook configs extend it, so
``--set quant.w_bits=8`` on the CLI is ``FPTQuantConfig(quant=QuantOptions(w_bits=8))`` in
Python and reaches the method unchanged (no copies of the settings, each default written
once)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from icml import option
from icml.config import check_bounds, to_dict

ARMS = ("fp", "rtn", "smoothquant", "quarot", "fptquant_local", "fptquant_e2e",
        "quarot_static", "nf4", "bnb_nf4", "bnb_int8")


@dataclass
class QuantOptions:
    """The quantizers: what :func:`~icml_fptquant.quantize.merge_and_quantize`,
    :func:`~icml_fptquant.quantize.attach_quantizers` and
    :func:`~icml_fptquant.quantize.round_weights` read (``--set quant.<key>=...``)."""

    w_bits: int = option(4, help="weight bits (per output channel, symmetric); 16 = off",
                         ge=2, le=16)
    a_bits: int = option(4, help="activation bits (static per tensor, asymmetric); 16 = off",
                         ge=2, le=16)
    kv_bits: int = option(4, help="KV-cache bits (static per KV head, asymmetric); 16 = off",
                          ge=2, le=16)
    weight_quantizer: str = option("rtn", help="weight rounding: round-to-nearest or GPTQ-style "
                                   "error correction", choices=("rtn", "gptq"))
    gptq_sequential: bool = option(True, help="GPTQ layer by layer with already-quantized "
                                   "predecessors (false = all Hessians from one FP pass)")
    gptq_dtype: str = option("float64", help="GPTQ's arithmetic (Hessians, Choleskys, column "
                             "updates): float64, or float32 as the reference GPTQ code does",
                             choices=("float64", "float32"))
    act_range: str = option("mse", help="how static activation/KV ranges are set from the "
                            "calibration set", choices=("mse", "minmax"))
    act_dynamic: bool = option(False, help="QuaRot-style dynamic quantization instead of "
                               "static ranges: activations per token (symmetric, clip "
                               "act_clip), KV cache per token and head (asymmetric, clip "
                               "kv_clip)")
    act_clip: float = option(0.9, help="clip ratio of dynamic per-token activations", gt=0,
                             le=1)
    kv_clip: float = option(0.95, help="clip ratio of the dynamic per-token KV cache", gt=0,
                            le=1)
    quantize_lm_head: bool = option(False, help="also quantize lm_head weights and inputs")
    int_exact: bool = option(False, help="evaluate quantized linears (static per-tensor "
                             "activations, RTN/GPTQ weights) as an integer kernel does: "
                             "integer codes summed exactly, then scaled; equal to "
                             "to_kernels('w8a8') bit for bit (false: dequantize, then a float "
                             "matmul, whose rounding differs by ulps). Training keeps the "
                             "float path")

    def __post_init__(self) -> None:
        check_bounds(self, "quant.")  # Python construction checks what build_config checks


@dataclass
class TransformOptions:
    """The function-preserving transforms: what
    :func:`~icml_fptquant.apply.apply_fpt_transforms` reads (``--set transforms.<key>=...``)."""

    residual_rotation: str = option("hadamard", help="residual rotation Q init (learnable): "
                                    "normalised Hadamard, random orthogonal, or none",
                                    choices=("hadamard", "random", "none"))
    orthogonal_map: str = option("cayley", help="parametrisation that keeps Q orthogonal",
                                 choices=("cayley", "matrix_exp"))
    solve_threads: int = option(1, help="torch threads of the Cayley map's linear solve "
                                "(LAPACK's LU rounds differently at each thread count, so Q "
                                "and every weight and range calibrated after the merge would "
                                "differ in the last bits); 0 = the caller's count, as before "
                                "0.3.10", ge=0)
    prerope: bool = option(True, help="pre-RoPE scaled-rotation transform for queries/keys")
    value: bool = option(True, help="per-KV-head invertible value transform (v_proj/o_proj)")
    value_init: str = option("identity", help="value transform init (hadamard = QuaRot R2)",
                             choices=("identity", "hadamard"))
    mlp_scale: bool = option(True, help="per-channel up/down scaling in the MLP")
    down_hadamard: bool = option(True, help="online grouped Hadamard before down_proj")
    qk_hadamard: bool = option(False, help="online Hadamard on post-RoPE queries and keys "
                               "(QuaRot R3; not part of FPTQuant)")
    o_head_mix: bool = option(False, help="online orthogonal mix across heads before o_proj "
                              "(QuaRot's across-head Hadamard; a seeded random orthogonal "
                              "matrix when the head count has no Sylvester Hadamard)")
    dynamic_residual_scaling: bool = option(True, help="cheap dynamic per-token residual "
                                            "scaling (1/c at o_proj/down_proj input)")
    untie_embeddings: bool = option(False, help="untie embed_tokens and lm_head when tied "
                                    "(the residual rotation needs untied ones)")

    def __post_init__(self) -> None:
        check_bounds(self, "transforms.")  # Python construction checks what build_config checks


@dataclass
class TrainingOptions:
    """The two training stages of the transforms: what
    :func:`~icml_fptquant.training.optimize_local` and
    :func:`~icml_fptquant.training.optimize_e2e` read (``--set training.<key>=...``)."""

    # local, data-free objective
    local_steps: int = option(150, help="steps of the local (weight outlier) objective", ge=0)
    local_lr: float = option(1e-2, help="AdamW learning rate of the local objective", gt=0)
    local_p: float = option(4.0, help="p of the (mean |W|^p)^(1/p) outlier norm", ge=1)
    local_row_fraction: float = option(1.0, help="fraction of random weight rows per local "
                                       "step (1 = exact objective; < 1 = cheaper stochastic "
                                       "estimate, used on the real model)", gt=0, le=1)
    # end-to-end objective
    e2e_steps: int = option(60, help="steps of end-to-end training (quantized student vs FP "
                            "teacher)", ge=0)
    e2e_lr: float = option(1e-2, help="AdamW learning rate of end-to-end training", gt=0)
    e2e_loss: str = option("kl", help="end-to-end loss: KL(teacher||student) or logit MSE",
                           choices=("kl", "mse"))
    e2e_batch_size: int = option(4, help="sequences per end-to-end step", ge=1)
    e2e_recalibrate_every: int = option(20, help="recalibrate static ranges every N e2e steps",
                                        ge=1)
    threads: int = option(1, help="torch threads of the two training stages, restored "
                          "afterwards (0 = the caller's setting; a fixed count makes the "
                          "trained transforms the same at any thread count of the caller)",
                          ge=0)

    def __post_init__(self) -> None:
        check_bounds(self, "training.")  # Python construction checks what build_config checks


@dataclass
class FPTQuantConfig:
    """Settings of the method, one section per part: the transforms, the quantizers and the two
    training stages. The API's functions take it (or a job config, which is one) and read their
    section; a job config's ``quant`` / ``transforms`` / ``training`` sections are these
    classes, so ``--set quant.w_bits=8`` is ``FPTQuantConfig(quant=QuantOptions(w_bits=8))``."""

    quant: QuantOptions = option(default_factory=QuantOptions,
                                 help="the quantizers (weights, activations, KV cache)")
    transforms: TransformOptions = option(default_factory=TransformOptions,
                                          help="the function-preserving transforms")
    training: TrainingOptions = option(default_factory=TrainingOptions,
                                       help="the local and end-to-end training of the "
                                       "transforms")

    def sections(self) -> dict[str, dict[str, Any]]:
        """The method's settings alone (a job config's own keys left out), as plain values."""
        return {"quant": to_dict(self.quant), "transforms": to_dict(self.transforms),
                "training": to_dict(self.training)}

    @classmethod
    def from_sections(cls, data: dict[str, Any]) -> FPTQuantConfig:
        """The inverse of :meth:`sections`; a flat dict (what ``save_quantized`` wrote before
        0.3.7, format 2) is read by putting each key into its section."""
        if not any(k in data for k in ("quant", "transforms", "training")):
            owner = {f.name: sec for sec, tp in _SECTIONS.items() for f in fields(tp)}
            nested: dict[str, dict[str, Any]] = {sec: {} for sec in _SECTIONS}
            for k, v in data.items():
                if k in owner:
                    nested[owner[k]][k] = v
            data = nested
        return cls(**{sec: tp(**data.get(sec, {})) for sec, tp in _SECTIONS.items()})


_SECTIONS = {"quant": QuantOptions, "transforms": TransformOptions, "training": TrainingOptions}


@dataclass
class QuantizeConfig(FPTQuantConfig):
    """The default job: a tiny Llama with injected outliers, quantized by every arm."""

    model: str = option("", help="model to quantize: packaged name | local HF folder | previous "
                        "run folder (icml.compose.load_model); empty = built-in tiny model "
                        "trained for a few seconds")
    arms: list[str] = option(list(ARMS[:6]), help=f"arms to compare, from {', '.join(ARMS)}")
    arch: str = option("llama", help="tiny model architecture", choices=("llama", "qwen2"))
    hidden_size: int = option(64, help="tiny model hidden size", ge=8)
    num_layers: int = option(2, help="tiny model layers", ge=1)
    num_heads: int = option(4, help="tiny model attention heads", ge=1)
    num_kv_heads: int = option(2, help="tiny model KV heads (GQA when < num_heads)", ge=1)
    train_steps: int = option(150, help="steps to pre-train the tiny model", ge=0)
    train_lr: float = option(3e-3, help="learning rate of the tiny model's pre-training", gt=0)
    seq_len: int = option(64, help="tokens per sequence", ge=8)
    outlier_strength: float = option(30.0, help="function-preserving outlier factor injected "
                                     "into the model (0 = none)", ge=0)
    outlier_sites: list[str] = option(["norm", "mlp", "key", "value"], help="outlier kinds "
                                      "to inject: norm, mlp, key, value")
    calib_samples: int = option(8, help="calibration sequences", ge=1)
    eval_samples: int = option(16, help="held-out sequences for perplexity/KL", ge=1)
    smoothquant_alpha: float = option(0.5, help="SmoothQuant migration strength", ge=0, le=1)

    def __post_init__(self) -> None:
        bad = [a for a in self.arms if a not in ARMS]
        _check_model(self.model)
        if bad:
            raise ValueError(f"arms {bad} unknown: use some of {', '.join(ARMS)}")
        if not self.arms:
            raise ValueError("arms is empty: name at least one of " + ", ".join(ARMS))
        from icml_fptquant.outliers import check_sites

        check_sites(self.outlier_sites)
        if not self.model and (self.hidden_size % self.num_heads
                               or self.num_heads % self.num_kv_heads):
            raise ValueError(f"hidden_size {self.hidden_size} must divide by num_heads "
                             f"{self.num_heads}, and num_heads by num_kv_heads "
                             f"{self.num_kv_heads} (e.g. hidden_size=64 num_heads=4 "
                             "num_kv_heads=2)")


@dataclass
class TrainConfig(QuantizeConfig):
    """Train the transforms (local then end-to-end), report the arms, and save the trained,
    merged and quantized model to ``<run>/quantized`` (load it with ``load_quantized`` or
    ``icml run fptquant evaluate --set quantized=...``)."""

    arms: list[str] = option(["fp", "rtn", "fptquant_local", "fptquant_e2e"],
                             help=f"arms to compare, from {', '.join(ARMS)}")


@dataclass
class EvaluateConfig(QuantizeConfig):
    """Perplexity and KL-to-FP of a few arms (or of a saved quantized model)."""

    arms: list[str] = option(["fp", "rtn", "fptquant_local"],
                             help=f"arms to compare, from {', '.join(ARMS)}")
    quantized: str = option("", help="folder written by save_quantized to evaluate instead")


def _check_model(model: str) -> None:
    """``model`` names a packaged model, a local folder or a run folder (cheap: no loading)."""
    from icml.compose import is_model_spec

    if model and not is_model_spec(model):
        from icml.pretrained import PACKAGED_MODELS

        raise ValueError(f"model={model!r} is not a packaged model name "
                         f"({', '.join(sorted(PACKAGED_MODELS))}), a local transformers folder "
                         "or a previous run folder")
