"""A third party's transform for testing consumers of the composition contract (issue 50).

:func:`rotated_copy` rotates a transformers Llama/Qwen2-style model's residual stream by a random
orthogonal ``Q`` (``h' = h Q``) and marks it with :mod:`icml.compose`: the logits are unchanged
(float error aside), every intermediate state is in another basis. A consumer that reads layers
must map (``readout_basis``/``to_original``) or refuse (``require_original_basis``); a consumer of
logits alone must give the same answer. RMSNorm gains are folded into the linears that read the
norms first (untying the head where needed), so the rotation is exact for any such model, not
only for tiny ones with unit gains.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from icml.compose import Transform, mark

__all__ = ["rotated_copy"]


def rotated_copy(model: Any, *, seed: int = 0, maps: bool = True,
                 on_map: Callable[[int], None] | None = None, name: str = "random rotation",
                 producer: str = "icml.testing") -> Any:
    """A deep copy of ``model`` with its residual stream rotated and marked.

    ``maps=False`` marks the basis change without maps (what a careless producer does: readers
    must refuse). ``on_map(index)`` is called whenever a reader maps a state (to see which
    depths it read)."""
    import torch

    m = copy.deepcopy(model)
    inner = m.model
    with torch.no_grad():
        _fold_norms(m)
        width = m.config.hidden_size
        gen = torch.Generator().manual_seed(seed)
        q64, _ = torch.linalg.qr(torch.randn(width, width, generator=gen, dtype=torch.float64))
        q = q64.to(m.lm_head.weight.dtype)
        inner.embed_tokens.weight.copy_(inner.embed_tokens.weight @ q)
        m.lm_head.weight.copy_(m.lm_head.weight @ q)
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            for lin in (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj):
                lin.weight.copy_(lin.weight @ q)
            for lin in (attn.o_proj, mlp.down_proj):
                lin.weight.copy_(q.T @ lin.weight)
                if lin.bias is not None:
                    lin.bias.copy_(lin.bias @ q)

    def to_original(h: Any, index: int) -> Any:
        if on_map is not None:
            on_map(index)
        return h @ q.T.to(device=h.device, dtype=h.dtype)

    def from_original(h: Any, index: int) -> Any:
        return h @ q.to(device=h.device, dtype=h.dtype)

    return mark(m, Transform(name, producer, preserves_function=True,
                             changes_residual_basis=True,
                             to_original=to_original if maps else None,
                             from_original=from_original if maps else None,
                             notes="residual stream rotated by a random orthogonal matrix"))


def _fold_norms(m: Any) -> None:
    """Move every RMSNorm gain into the linears that read it (gains become 1)."""
    import torch

    inner = m.model
    if m.config.tie_word_embeddings or m.lm_head.weight is inner.embed_tokens.weight:
        m.lm_head.weight = torch.nn.Parameter(inner.embed_tokens.weight.detach().clone())
        m.config.tie_word_embeddings = False
    for layer in inner.layers:
        attn, mlp = layer.self_attn, layer.mlp
        for norm, readers in ((layer.input_layernorm, (attn.q_proj, attn.k_proj, attn.v_proj)),
                              (layer.post_attention_layernorm, (mlp.gate_proj, mlp.up_proj))):
            _fold(norm, readers)
    _fold(inner.norm, (m.lm_head,))


def _fold(norm: Any, readers: tuple[Any, ...]) -> None:
    gain = norm.weight.detach().clone()
    for lin in readers:
        lin.weight.mul_(gain.to(lin.weight.dtype))
    norm.weight.fill_(1.0)
