"""Architecture access for Llama- and Qwen2-style transformers models: support check, untying
embeddings, fusing RMSNorm scales into the linears that read them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

SUPPORTED = ("llama", "qwen2")


@dataclass
class Geometry:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int

    @property
    def n_rep(self) -> int:
        return self.heads // self.kv_heads

    def kv_of(self, head: int) -> int:
        """KV head read by query head ``head`` (transformers' ``repeat_kv``: ``h // n_rep``)."""
        return head // self.n_rep


def check_supported(model: Any) -> Geometry:
    """Raise a clear error unless ``model`` is a Llama- or Qwen2-style causal LM."""
    cfg = getattr(model, "config", None)
    mtype = getattr(cfg, "model_type", None)
    if mtype not in SUPPORTED:
        raise ValueError(f"model_type {mtype!r} is not supported by fptquant: use a Llama- or "
                         f"Qwen2-style causal LM (model_type one of {', '.join(SUPPORTED)})")
    if not hasattr(model, "model") or not hasattr(model, "lm_head"):
        raise ValueError("expected a *ForCausalLM model with .model and .lm_head: load it with "
                         "AutoModelForCausalLM")
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    rope = getattr(cfg, "partial_rotary_factor", 1.0) or 1.0
    if rope != 1.0 or head_dim % 2:
        raise ValueError("the pre-RoPE transform needs RoPE over the whole (even) head_dim; "
                         "this model has partial_rotary_factor != 1 or an odd head_dim")
    if getattr(cfg, "hidden_act", "silu") not in ("silu", "swish", "gelu", "gelu_pytorch_tanh"):
        raise ValueError(f"hidden_act {cfg.hidden_act!r}: the MLP scaling needs a gated MLP")
    return Geometry(cfg.hidden_size, heads, kv, head_dim)


def layers(model: Any) -> list[nn.Module]:
    return list(model.model.layers)


def is_tied(model: Any) -> bool:
    return model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


@torch.no_grad()
def untie_embeddings(model: Any) -> None:
    """Give ``lm_head`` its own copy of the embedding matrix (function unchanged)."""
    if is_tied(model):
        model.lm_head.weight = nn.Parameter(model.model.embed_tokens.weight.detach().clone())
    model.config.tie_word_embeddings = False
    if hasattr(model, "_tied_weights_keys"):
        model._tied_weights_keys = None


def require_untied(model: Any, untie: bool) -> None:
    if is_tied(model):
        if not untie:
            raise ValueError("the residual rotation needs untied embeddings, but embed_tokens "
                             "and lm_head share weights: pass untie_embeddings=True (or "
                             "--set untie_embeddings=true) to untie them, or residual_rotation="
                             "'none'")
        untie_embeddings(model)


@torch.no_grad()
def fuse_norms(model: Any) -> None:
    """Fold every RMSNorm scale gamma into the linears that read the normalised stream
    (q/k/v, gate/up, lm_head) and set gamma = 1. Exact. The gains are kept in
    ``model.fpt_norm_gains``."""
    gains = dict(getattr(model, "fpt_norm_gains", None) or {})

    def fold(name: str, norm: nn.Module, readers: list[nn.Linear]) -> None:
        g = norm.weight.detach().clone()
        for lin in readers:
            lin.weight.mul_(g.to(lin.weight.dtype).unsqueeze(0))
        norm.weight.fill_(1.0)
        gains[name] = g * gains[name] if name in gains else g

    for i, layer in enumerate(layers(model)):
        a, m = layer.self_attn, layer.mlp
        fold(f"model.layers.{i}.input_layernorm", layer.input_layernorm,
             [a.q_proj, a.k_proj, a.v_proj])
        fold(f"model.layers.{i}.post_attention_layernorm", layer.post_attention_layernorm,
             [m.gate_proj, m.up_proj])
    fold("model.norm", model.model.norm, [model.lm_head])
    # the gains, by norm name: a plain attribute, so icml_fptquant.interop.unwrap can put them
    # back into the norms (a logit lens without the final norm reads lm_head unfused)
    model.fpt_norm_gains = gains
