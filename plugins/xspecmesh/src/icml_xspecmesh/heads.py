"""Speculative decoding heads (Medusa-style, reconstructed): head k maps the backbone's last
hidden state at position t to a distribution over token t+k+1,

    z_k = h_t + SiLU(W_k h_t + b_k)            (W_k zero-initialised: z_k = h_t at start)
    z_k <- z_k + CrossAttn_k(LN(z_k), C)       (optional, C = condition hidden states)
    q_k = softmax(lm_head(z_k))                (lm_head shared with the backbone, frozen)

``h_t`` is ``hidden_states[-1]`` of a transformers causal LM, which is already normed by the
final norm, so no further norm is applied before the shared ``lm_head``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


class ResidualHead(nn.Module):
    """One head: ``num_layers`` residual SiLU blocks, then optional cross-attention."""

    def __init__(self, hidden_size: int, *, num_layers: int = 1, cross_attention: bool = False,
                 num_attention_heads: int = 4) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(hidden_size, hidden_size) for _ in range(num_layers))
        for lin in self.blocks:
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)
        self.cross = None
        if cross_attention:
            if hidden_size % num_attention_heads:
                raise ValueError(f"hidden_size {hidden_size} must divide by "
                                 f"num_attention_heads {num_attention_heads}")
            self.norm = nn.LayerNorm(hidden_size)
            self.cross = nn.MultiheadAttention(hidden_size, num_attention_heads, batch_first=True)
            nn.init.zeros_(self.cross.out_proj.weight)
            nn.init.zeros_(self.cross.out_proj.bias)

    def forward(self, h: torch.Tensor, condition: torch.Tensor | None = None,
                condition_mask: torch.Tensor | None = None) -> torch.Tensor:
        z = h
        for lin in self.blocks:
            z = z + F.silu(lin(z))
        if self.cross is not None:
            if condition is None:
                raise ValueError("this head has cross-attention: pass condition (the hidden "
                                 "states of the conditioning prompt, shape (batch, S, hidden))")
            pad = None if condition_mask is None else ~condition_mask.bool()
            a, _ = self.cross(self.norm(z), condition, condition, key_padding_mask=pad,
                              need_weights=False)
            z = z + a
        return z


class SpeculativeHeads(nn.Module):
    """``num_heads`` draft heads on top of a causal LM, sharing its (frozen) output layer.

    Build with :meth:`from_model`. ``forward(hidden)`` maps hidden states ``(B, T, D)`` to draft
    logits ``(B, T, K, V)``; slot ``k - 1`` predicts the token ``k + 1`` positions ahead.
    The shared ``lm_head`` is held by reference and not registered, so ``parameters()`` and
    ``state_dict()`` hold only the heads' own weights.
    """

    def __init__(self, hidden_size: int, lm_head: nn.Module, *, num_heads: int = 3,
                 num_layers: int = 1, cross_attention: bool = False,
                 num_attention_heads: int = 4) -> None:
        super().__init__()
        if num_heads < 1:
            raise ValueError(f"num_heads must be >= 1, got {num_heads}")
        if not isinstance(getattr(lm_head, "weight", None), torch.Tensor):
            raise TypeError("lm_head must be a module with a weight (the backbone's "
                            "get_output_embeddings())")
        self.num_heads = num_heads
        self.cross_attention = cross_attention
        self.heads = nn.ModuleList(
            ResidualHead(hidden_size, num_layers=num_layers, cross_attention=cross_attention,
                         num_attention_heads=num_attention_heads) for _ in range(num_heads))
        object.__setattr__(self, "_lm_head", lm_head)  # shared, not a submodule

    @classmethod
    def from_model(cls, model: Any, *, num_heads: int = 3, num_layers: int = 1,
                   cross_attention: bool = False, num_attention_heads: int = 4) -> SpeculativeHeads:
        """Heads for a transformers causal LM, on its device and dtype."""
        lm_head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if lm_head is None:
            raise TypeError(f"{type(model).__name__} has no output embeddings: the heads share "
                            "the backbone's lm_head, so pass a causal LM (e.g. "
                            "AutoModelForCausalLM)")
        hidden = model.config.hidden_size
        heads = cls(hidden, lm_head, num_heads=num_heads, num_layers=num_layers,
                    cross_attention=cross_attention, num_attention_heads=num_attention_heads)
        w = lm_head.weight
        return heads.to(device=w.device, dtype=w.dtype)

    @property
    def lm_head(self) -> nn.Module:
        return self._lm_head

    def project(self, z: torch.Tensor) -> torch.Tensor:
        """The frozen shared output layer."""
        w = self._lm_head.weight.detach()
        b = getattr(self._lm_head, "bias", None)
        return F.linear(z, w, None if b is None else b.detach())

    def forward(self, hidden: torch.Tensor, condition: torch.Tensor | None = None,
                condition_mask: torch.Tensor | None = None,
                num_heads: int | None = None) -> torch.Tensor:
        """Draft logits ``(B, T, K, V)`` (``K = num_heads`` or fewer when given)."""
        squeeze = hidden.dim() == 2
        if squeeze:
            hidden = hidden[:, None]
        k = self.num_heads if num_heads is None else num_heads
        zs = [head(hidden, condition, condition_mask) for head in self.heads[:k]]
        out = self.project(torch.stack(zs, dim=2))
        return out[:, 0] if squeeze else out
