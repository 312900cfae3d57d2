"""FPTQuant models among other plugins (the ``icml.compose`` contract, issue 50).

* :func:`mark_fpt` records what fptquant did on the model as an ``icml.compose.Transform``:
  whether the logits are unchanged (transforms only) or quantized, and — when the residual
  rotation Q is on — the maps of the residual stream between the rotated basis and the original
  one. Row vectors: the embedding becomes ``E Q^T``, so a state ``h`` of the transformed model
  is ``x Q^T`` and ``to_original(h, i) = h Q`` at every depth ``i`` (the dynamic residual scaling
  is internal to each layer: the stream between layers is in the model's own scale).
* :func:`unwrap` returns a plain transformers model (``nn.Linear`` layers, no online ops, no
  quantizers, the model's own attention) computing the same function as the merged, unquantized
  transformed model: in the original residual basis with the RMSNorm gains back in the norms
  (``basis="original"``: every reader, including a logit lens without the final norm, sees the
  original model), or in the rotated basis (``basis="transformed"``, marked with the maps).
* :func:`save_fpt_model` / :func:`load_fpt_model` pass models between runs: the folder holds the
  merged unquantized model as plain ``save_pretrained`` files (original basis) and, for a
  quantized model, ``quantized/`` (:func:`icml_fptquant.save_quantized`), which the loader
  rebuilds with its quantizers and marks.

Note for readers: RMSNorm gains are folded into the linears that read the norms (the rotation
needs it), so on a rotated model ``lm_head(h)`` *without* the final norm is not the original's
``lm_head(x)`` for any basis map of ``h`` (``lm_head`` now holds ``W diag(g) Q^T``); with the
final norm, :func:`icml.compose.readout_basis` + the model's norm + ``lm_head`` is exact. A
no-norm read-out needs :func:`unwrap` (``attrs["final_norm_folded"]`` says so).
"""

from __future__ import annotations

import copy
import functools
import weakref
from pathlib import Path
from typing import Any

import torch

PRODUCER = "fptquant"
LOADER = "icml_fptquant.interop:load_fpt_model"
QUANTIZED_DIR = "quantized"


# -- the residual-stream maps ---------------------------------------------------------------------
def residual_rotation(model: Any) -> torch.Tensor | None:
    """The residual rotation Q of ``model`` (live while the transforms are unmerged, frozen
    after :func:`icml_fptquant.merge_transforms`), or ``None`` when there is none."""
    ops = getattr(model, "_modules", {}).get("fpt_transforms")
    rot = getattr(ops, "rotation", None) if ops is not None else None
    if rot is not None:
        return rot.matrix().detach()
    return getattr(model, "fpt_rotation", None)


def _q(source: Any) -> torch.Tensor:
    if isinstance(source, torch.Tensor):
        return source
    return source.matrix().detach()  # a live ResidualRotation


def _to_original(source: Any, hidden: torch.Tensor, index: int) -> torch.Tensor:
    q = _q(source)
    up = torch.promote_types(hidden.dtype, q.dtype)
    return (hidden.to(up) @ q.to(device=hidden.device, dtype=up)).to(hidden.dtype)


def _from_original(source: Any, hidden: torch.Tensor, index: int) -> torch.Tensor:
    q = _q(source)
    up = torch.promote_types(hidden.dtype, q.dtype)
    return (hidden.to(up) @ q.to(device=hidden.device, dtype=up).T).to(hidden.dtype)


def _source(model: Any) -> Any:
    ops = getattr(model, "_modules", {}).get("fpt_transforms")
    rot = getattr(ops, "rotation", None) if ops is not None else None
    return rot if rot is not None else getattr(model, "fpt_rotation", None)


def head_bases_changed(model: Any) -> bool:
    """Whether fptquant re-parametrised each head's key/value spaces on ``model``: a pre-RoPE
    or value transform that is not the identity (live transforms are read now; after
    :func:`icml_fptquant.merge_transforms` the flag it kept, ``model.fpt_head_bases``).
    Attention is unchanged, but keys and values are not (their norms, cosines, leverage):
    the mark says so (``Transform.changes_head_bases``) and readers of them refuse."""
    ops = getattr(model, "_modules", {}).get("fpt_transforms")
    live = False
    if ops is not None:
        with torch.no_grad():
            for t in getattr(ops, "prerope", ()):
                live |= bool(t.theta.any()) or bool(t.log_scale.any())
            for v in getattr(ops, "value", ()):
                m = v.matrices()
                live |= not torch.equal(m, torch.eye(m.shape[-1], dtype=m.dtype,
                                                     device=m.device).expand_as(m))
    return live or bool(getattr(model, "fpt_head_bases", False))


class _Unwrap:
    """``Transform.unwrap`` of a marked model: a weak reference (no model -> mark -> model
    cycle keeping a large model alive), re-pointed to the copy by ``copy.deepcopy``."""

    def __init__(self, model: Any) -> None:
        self.ref = weakref.ref(model)

    def __call__(self) -> Any:
        model = self.ref()
        if model is None:
            raise RuntimeError("the model this transform marked no longer exists")
        return unwrap(model)

    def __deepcopy__(self, memo: dict) -> _Unwrap:
        model = self.ref()
        return _Unwrap(memo.get(id(model), model))


def mark_fpt(model: Any, stage: str) -> Any:
    """Record fptquant's transform on ``model`` (replacing an earlier fptquant mark: the stages
    ``transformed`` -> ``merged`` -> ``quantized`` describe one transform, not three)."""
    from icml import compose

    if stage not in ("transformed", "merged", "quantized", "unwrapped"):
        raise ValueError(f"stage {stage!r} unknown")
    source = _source(model)
    qcfg = getattr(model, "fpt_quant_config", None)
    quantized = stage == "quantized"
    folded = bool(getattr(model, "fpt_norm_gains", None))
    attrs: dict[str, Any] = {"stage": stage, "residual_rotation": source is not None,
                             "final_norm_folded": folded,
                             "dynamic_residual_scaling": bool(getattr(model, "fpt_drs", False))}
    if quantized and qcfg is not None:
        attrs.update(w_bits=qcfg.quant.w_bits, a_bits=qcfg.quant.a_bits, kv_bits=qcfg.quant.kv_bits,
                     act_dynamic=bool(qcfg.quant.act_dynamic))
    name = (f"fptquant W{qcfg.quant.w_bits}A{qcfg.quant.a_bits}KV{qcfg.quant.kv_bits}"
            if quantized and qcfg is not None else f"fptquant {stage} transforms")
    notes = ("residual stream rotated by Q (maps given, exact at every depth)"
             if source is not None else "residual stream in the original basis")
    heads = head_bases_changed(model)
    attrs["head_bases_changed"] = heads
    if heads:
        notes += ("; pre-RoPE/value transforms re-parametrise each head's keys and values "
                  "(attention unchanged)")
    if folded:
        notes += ("; RMSNorm gains folded into q/k/v, gate/up and lm_head: read intermediate "
                  "layers through the final norm (readout_basis), or unwrap() for lm_head(h)")
    t = compose.Transform(
        name=name, producer=PRODUCER, preserves_function=not quantized,
        changes_residual_basis=source is not None, changes_head_bases=heads,
        quantized=quantized,
        to_original=functools.partial(_to_original, source) if source is not None else None,
        from_original=functools.partial(_from_original, source) if source is not None else None,
        unwrap=None if quantized else _Unwrap(model),
        notes=notes, attrs=attrs)
    return compose.mark(model, t, replace=True)


# -- unwrap: a plain transformers model -----------------------------------------------------------
def _fold_online(lin: Any, w: torch.Tensor) -> torch.Tensor:
    """``W`` with the linear's online input ops folded in: ``forward(x) = W M H (x)`` becomes
    ``W_eff x`` (the dynamic residual scale is dropped: it only moves a per-token factor)."""
    from icml_fptquant.hadamard import apply_grouped
    from icml_fptquant.qlinear import apply_head_mix

    had = getattr(lin, "fpt_hadamard", None)
    mix = getattr(lin, "fpt_head_mix", None)
    # online_input applies H, then the head mix M: forward = W M H x
    if mix is not None:
        w = apply_head_mix(w, mix.to(w.dtype).T)  # W (M kron I)
    if had is not None:
        w = apply_grouped(w, had.to(w.dtype).T)  # W blockdiag(H)
    return w


_READERS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj",
            "mlp.up_proj")
_WRITERS = ("self_attn.o_proj", "mlp.down_proj")


@torch.no_grad()
def unwrap(model: Any, basis: str = "original", weights: str = "full") -> Any:
    """A plain transformers model (its own classes, ``nn.Linear``, its own attention function;
    no parametrizations, online ops, residual scaling or quantizers) computing the same function
    as ``model``'s merged, unquantized transform. ``model`` is left unchanged.

    ``basis="original"`` (default) also undoes the residual rotation and puts the RMSNorm gains
    back into the norms (when none is zero): its residual stream, ``output_hidden_states`` and
    ``lm_head`` are the original model's (up to float error), so it carries no mark, except,
    where trained pre-RoPE/value transforms re-parametrised the heads' keys and values (still
    in the weights), a mark saying only that (``changes_head_bases``, no basis change).
    ``basis="transformed"`` keeps the rotated basis and the folded gains, marked with the maps.
    ``weights="rounded"`` uses the quantized (rounded) weights of a quantized model instead of
    the full-precision ones (activations and KV cache still unquantized)."""
    from transformers import AutoModelForCausalLM

    from icml_fptquant.qlinear import KV_PREFIX

    if basis not in ("original", "transformed"):
        raise ValueError(f"basis={basis!r}: use 'original' or 'transformed'")
    if weights not in ("full", "rounded"):
        raise ValueError(f"weights={weights!r}: use 'full' or 'rounded'")
    cfg = copy.deepcopy(model.config)
    impl = getattr(cfg, "_attn_implementation", None) or "sdpa"
    if impl.startswith(KV_PREFIX):
        impl = impl[len(KV_PREFIX):]
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    ref = model.lm_head.weight
    plain = AutoModelForCausalLM.from_config(cfg, attn_implementation=impl)
    plain = plain.to(device=ref.device, dtype=ref.dtype).eval()
    q = residual_rotation(model)
    gains = dict(getattr(model, "fpt_norm_gains", None) or {})
    derotate = basis == "original" and q is not None
    qd = q.to(device=ref.device, dtype=torch.promote_types(ref.dtype, q.dtype)) if derotate \
        else None
    for name, p in plain.named_parameters():
        modname, pname = name.rsplit(".", 1)
        src = model.get_submodule(modname)
        t = getattr(src, pname)
        if pname == "weight" and weights == "rounded" and \
                getattr(src, "fpt_qweight", None) is not None:
            t = src.fpt_qweight
        t = t.detach()
        if pname == "weight" and isinstance(src, torch.nn.Linear):
            t = _fold_online(src, t)
        if derotate:
            up = t.to(qd.dtype)
            if pname == "weight" and (modname in ("model.embed_tokens", "lm_head")
                                      or modname.endswith(_READERS)):
                up = up @ qd  # W Q^T Q = W (a reader's bias is in its output space)
            elif modname.endswith(_WRITERS):
                up = qd.T @ up  # Q^T Q W = W (bias: Q^T Q b)
            t = up.to(t.dtype)
        p.copy_(t.to(p.dtype))
    if basis == "original" and gains and all(bool((g != 0).all()) for g in gains.values()):
        _unfuse_norms(plain, gains)
        gains = {}
    if head_bases_changed(model):  # the head re-parametrisation stays in the weights
        plain.fpt_head_bases = True
    if not derotate and q is not None:
        plain.fpt_rotation = q.detach().clone()
    if gains:
        plain.fpt_norm_gains = {k: v.detach().clone() for k, v in gains.items()}
    if (not derotate and q is not None) or getattr(plain, "fpt_head_bases", False):
        mark_fpt(plain, "unwrapped")  # the maps, or only that the heads' bases changed
    return plain


@torch.no_grad()
def _unfuse_norms(model: Any, gains: dict[str, torch.Tensor]) -> None:
    """Inverse of :func:`icml_fptquant.arch.fuse_norms`: gains back into the norms, the
    readers' columns divided by them."""
    for i, layer in enumerate(model.model.layers):
        a, m = layer.self_attn, layer.mlp
        for norm_name, norm, readers in (
                (f"model.layers.{i}.input_layernorm", layer.input_layernorm,
                 (a.q_proj, a.k_proj, a.v_proj)),
                (f"model.layers.{i}.post_attention_layernorm", layer.post_attention_layernorm,
                 (m.gate_proj, m.up_proj))):
            _unfuse(norm, readers, gains.get(norm_name))
    _unfuse(model.model.norm, (model.lm_head,), gains.get("model.norm"))


def _unfuse(norm: Any, readers: Any, g: torch.Tensor | None) -> None:
    if g is None:
        return
    for lin in readers:
        w = lin.weight
        lin.weight.copy_((w.to(torch.promote_types(w.dtype, g.dtype))
                          / g.to(w.device).unsqueeze(0)).to(w.dtype))
    norm.weight.copy_(g.to(device=norm.weight.device, dtype=norm.weight.dtype))


# -- passing models between runs ------------------------------------------------------------------
def save_fpt_model(run_dir: str | Path, model: Any, tokenizer: Any = None, *,
                   base: str = "") -> Path:
    """Save ``model`` (transformed, merged or quantized) with ``icml.compose.save_model`` into
    ``run_dir/model``: plain ``save_pretrained`` files of :func:`unwrap` (original basis, loads
    anywhere) plus, for a quantized model, ``quantized/`` rebuilt by :func:`load_fpt_model`."""
    from icml import compose
    from icml_fptquant.export import save_quantized

    quantized = getattr(model, "fpt_quant_config", None) is not None
    plain = unwrap(model, basis="original")
    descs = [t.to_dict() for t in compose.transforms(model)]  # earlier producers' too
    if not quantized:  # the plain files are the original basis: nothing left to map
        descs = [dict(d, changes_residual_basis=False, maps=False,
                      notes="saved unwrapped: original basis, function preserved")
                 if d["producer"] == PRODUCER else d for d in descs]
    folder = compose.save_model(run_dir, plain, tokenizer, producer=PRODUCER, base=base,
                                transform=descs, loader=LOADER if quantized else None)
    if quantized:
        save_quantized(model, folder / QUANTIZED_DIR, tokenizer)
    return folder


def load_fpt_model(path: str | Path, *, device: Any = "cpu", dtype: Any = None) -> tuple[Any, Any]:
    """``icml.compose`` loader of a folder :func:`save_fpt_model` wrote: the quantized model
    (quantizers, online ops, marks with the residual maps) and its tokenizer."""
    from icml.models import load_causal_lm
    from icml_fptquant.export import load_quantized

    folder = Path(path)
    qdir = folder / QUANTIZED_DIR
    if not qdir.is_dir():
        return load_causal_lm(str(folder), device=device, dtype=dtype)
    model, tok = load_quantized(qdir, device=device)
    if dtype is not None and dtype != next(model.parameters()).dtype:
        model = model.to(dtype)
    if tok is None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(folder)
    return model, tok  # icml.compose.load_model puts earlier producers' marks back
