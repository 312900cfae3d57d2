"""Insert every FPTQuant transform into a transformers model (function-preserving) and merge
the mergeable ones back into plain weights."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn
from torch.nn.utils import parametrize

from icml_fptquant.arch import check_supported, fuse_norms, require_untied
from icml_fptquant.config import FPTQuantConfig
from icml_fptquant.interop import mark_fpt
from icml_fptquant.qlinear import as_fpt_linear
from icml_fptquant.residual_scaling import apply_dynamic_residual_scaling
from icml_fptquant.transforms import (
    ColHadamard,
    ColHeadMix,
    ColInverseScale,
    HeadLeft,
    MLPScale,
    OProjValueInverse,
    PreRoPETransform,
    ReaderRotation,
    ResidualRotation,
    RowScale,
    ValueTransform,
    WriterRotation,
    hadamard_block,
    head_mix_matrix,
)


class FPTTransforms(nn.Module):
    """Container of the learnable transform modules of one model."""

    def __init__(self) -> None:
        super().__init__()
        self.rotation: ResidualRotation | None = None
        self.prerope = nn.ModuleList()
        self.value = nn.ModuleList()
        self.mlp = nn.ModuleList()


def _reg(module: nn.Module, name: str, p: nn.Module) -> None:
    if getattr(module, name, None) is None:
        return
    parametrize.register_parametrization(module, name, p, unsafe=True)


def apply_fpt_transforms(model: Any, config: FPTQuantConfig | None = None,
                         seed: int = 0) -> Any:
    """Insert FPTQuant's transforms into ``model`` in place and return it.

    Mergeable transforms become ``torch.nn.utils.parametrize`` parametrizations of the weights
    (learnable, function-preserving); the online Hadamard and the dynamic residual scaling are
    installed on the modules. The learnable modules are reachable as ``model.fpt_transforms``.
    """
    cfg = config or FPTQuantConfig()
    opts = cfg.transforms
    geo = check_supported(model)
    if getattr(model, "fpt_transforms", None) is not None:
        raise ValueError("transforms are already applied to this model: call merge_transforms "
                         "first or start from a fresh model")
    ref = model.lm_head.weight
    device = ref.device
    # transform parameters live in float32 (float64 for float64 models) even for bf16/fp16
    dtype = ref.dtype if ref.dtype in (torch.float32, torch.float64) else torch.float32
    ops = FPTTransforms()
    if opts.residual_rotation != "none":
        require_untied(model, opts.untie_embeddings)
        fuse_norms(model)
        ops.rotation = ResidualRotation(geo.hidden, opts.residual_rotation,
                                        opts.orthogonal_map, seed, dtype, device,
                                        threads=opts.solve_threads)
    for layer in model.model.layers:
        a, m = layer.self_attn, layer.mlp
        for parent, name in ((a, "q_proj"), (a, "k_proj"), (a, "v_proj"), (a, "o_proj"),
                             (m, "gate_proj"), (m, "up_proj"), (m, "down_proj")):
            as_fpt_linear(parent, name)
        if opts.prerope:
            t = PreRoPETransform(geo.kv_heads, geo.head_dim, dtype, device)
            ops.prerope.append(t)
            for name in ("weight", "bias"):
                _reg(a.q_proj, name, HeadLeft(t, "query", geo.heads, geo.n_rep))
                _reg(a.k_proj, name, HeadLeft(t, "key", geo.kv_heads, 1))
        if opts.value:
            v = ValueTransform(geo.kv_heads, geo.head_dim, opts.value_init,
                               opts.orthogonal_map, dtype, device, threads=opts.solve_threads)
            ops.value.append(v)
            for name in ("weight", "bias"):
                _reg(a.v_proj, name, HeadLeft(v, "value", geo.kv_heads, 1))
            _reg(a.o_proj, "weight", OProjValueInverse(v, geo.heads, geo.n_rep))
        if opts.o_head_mix:  # after the value inverse: W M^-1 (P kron I)^T
            mix = head_mix_matrix(geo.heads, seed, ref.dtype, device)
            _reg(a.o_proj, "weight", ColHeadMix(mix))
            a.o_proj.fpt_head_mix = mix
        if opts.mlp_scale:
            s = MLPScale(m.up_proj.out_features, dtype, device)
            ops.mlp.append(s)
            _reg(m.up_proj, "weight", RowScale(s))
            _reg(m.up_proj, "bias", RowScale(s))
            _reg(m.down_proj, "weight", ColInverseScale(s))
        if opts.down_hadamard:
            block = hadamard_block(m.down_proj.in_features, ref.dtype, device)
            _reg(m.down_proj, "weight", ColHadamard(block))
            m.down_proj.fpt_hadamard = block
        if ops.rotation is not None:
            for lin in (a.q_proj, a.k_proj, a.v_proj, m.gate_proj, m.up_proj):
                _reg(lin, "weight", ReaderRotation(ops.rotation))
            for lin in (a.o_proj, m.down_proj):
                _reg(lin, "weight", WriterRotation(ops.rotation))
                _reg(lin, "bias", WriterRotation(ops.rotation))
    if ops.rotation is not None:
        _reg(model.model.embed_tokens, "weight", ReaderRotation(ops.rotation))
        as_fpt_linear(model, "lm_head")
        _reg(model.lm_head, "weight", ReaderRotation(ops.rotation))
    if opts.qk_hadamard:
        install_qk_hadamard(model, geo.head_dim)
    if opts.dynamic_residual_scaling:
        apply_dynamic_residual_scaling(model)
    # a registered submodule: in the module tree (``.to()``, ``state_dict()`` to resume
    # training, ``named_modules``) until merge_transforms removes it with the parametrizations
    model.add_module("fpt_transforms", ops)
    model.fpt_config = dataclasses.replace(cfg)  # a plain attribute (not a tensor or module)
    mark_fpt(model, "transformed")
    return model


def install_qk_hadamard(model: Any, head_dim: int) -> None:
    """Online Hadamard on post-RoPE queries and keys of every layer (QuaRot's R3)."""
    from icml_fptquant.qlinear import use_kv_attention

    ref = model.lm_head.weight
    block = hadamard_block(head_dim, ref.dtype, ref.device)
    for layer in model.model.layers:
        layer.self_attn.fpt_qk_hadamard = block
    use_kv_attention(model)


def transform_parameters(model: Any) -> list[nn.Parameter]:
    ops = getattr(model, "fpt_transforms", None)
    if ops is None:
        raise ValueError("no FPTQuant transforms on this model: call apply_fpt_transforms first")
    params = list(ops.parameters())
    if ops.rotation is not None:
        params.append(ops.rotation.a)
    seen, out = set(), []
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def parametrized_modules(model: Any) -> list[nn.Module]:
    return [m for m in model.modules() if parametrize.is_parametrized(m)]


@torch.no_grad()
def merge_transforms(model: Any) -> Any:
    """Fold every mergeable transform into plain weights (``remove_parametrizations`` keeping
    the transformed values); online parts (Hadamard, residual scaling) stay. The residual
    rotation Q is computed once for all weights (the same values as computing it per weight)."""
    from icml_fptquant.interop import head_bases_changed
    from icml_fptquant.transforms import cached_rotation

    ops = model._modules.get("fpt_transforms")
    rotation = getattr(ops, "rotation", None)
    if ops is not None and head_bases_changed(model):  # kept for the mark once merged
        model.fpt_head_bases = True
    with cached_rotation(rotation):
        if rotation is not None:  # kept (a plain attribute) for the residual-stream maps
            q = rotation.matrix().detach().clone()
            old = getattr(model, "fpt_rotation", None)
            model.fpt_rotation = q if old is None else q @ old.to(q)  # x -> x Q_old^T Q^T
        for mod in parametrized_modules(model):
            for name in list(mod.parametrizations.keys()):
                parametrize.remove_parametrizations(mod, name, leave_parametrized=True)
    if "fpt_transforms" in model._modules:
        del model.fpt_transforms  # merged into the weights: nothing left to train or save
    if ops is not None:
        mark_fpt(model, "merged")
    return model
