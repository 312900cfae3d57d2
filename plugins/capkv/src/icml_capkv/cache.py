"""A transformers ``DynamicCache`` that stays correct after its entries are evicted.

After eviction a layer holds ``P`` physical entries for ``L >= P`` tokens seen. transformers uses
``cache.get_seq_length()`` both for the next position ids and (through ``get_mask_sizes`` /
``get_query_offset``) for the attention-mask geometry. :class:`CapKVCache` separates the two:

* ``get_seq_length()`` is the *logical* length ``L`` -> new tokens get positions ``L, L+1, ...``
  (the positions they would have had without eviction) and ``generate`` slices its inputs right;
* ``get_mask_sizes`` / ``get_query_offset`` use the *physical* length ``P`` -> every kept entry is
  visible to new tokens and new tokens stay causal among themselves.

Each layer also records ``positions`` ``(B, H_kv, P)``: the original position of every entry.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

__all__ = ["CapKVCache", "CompressibleLayer"]


class CompressibleLayer(DynamicLayer):
    """A ``DynamicLayer`` with a logical length and per-entry original positions."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cumulative_length = 0
        self.positions: torch.Tensor | None = None
        self.n_compressions = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        keys, values = super().update(key_states, value_states, *args, **kwargs)
        B, H, n = key_states.shape[0], key_states.shape[1], key_states.shape[-2]
        new = torch.arange(self.cumulative_length, self.cumulative_length + n,
                           device=key_states.device).expand(B, H, n)
        self.positions = new.clone() if self.positions is None else torch.cat(
            [self.positions, new], -1)
        self.cumulative_length += n
        return keys, values

    @property
    def physical_length(self) -> int:
        return super().get_seq_length()

    def get_seq_length(self) -> int:
        return self.cumulative_length if self.is_initialized else 0

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.physical_length + query_length, 0

    def keep(self, idx: torch.Tensor) -> None:
        """Keep only the entries ``idx`` (``(B, H_kv, K)`` indices into the physical axis)."""
        if not self.is_initialized:
            raise ValueError("cannot compress an empty cache layer: run the prefill first")
        B, H, P, d = self.keys.shape
        if idx.ndim != 3 or idx.shape[:2] != (B, H):
            raise ValueError(f"keep indices must have shape ({B}, {H}, K), got {tuple(idx.shape)}")
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= P):
            raise ValueError(f"keep indices must lie in [0, {P})")
        idx = idx.to(self.keys.device)
        g = idx.unsqueeze(-1).expand(B, H, idx.shape[-1], d)
        self.keys = self.keys.gather(2, g).contiguous()
        self.values = self.values.gather(2, g.expand(B, H, idx.shape[-1],
                                                     self.values.shape[-1])).contiguous()
        self.positions = self.positions.gather(2, idx)
        self.n_compressions += 1

    def reset(self) -> None:
        super().reset()
        self.positions = None
        self.n_compressions = 0

    def crop(self, tokens_to_remove: int) -> None:
        n = min(abs(tokens_to_remove), self.physical_length)
        super().crop(-n if n else 0)
        if n:
            self.positions = self.positions[..., :-n]
            self.cumulative_length -= n

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        if self.positions is not None:
            self.positions = self.positions.index_select(0, beam_idx.to(self.positions.device))

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        if self.positions is not None:
            self.positions = self.positions.repeat_interleave(repeats, dim=0)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        if self.positions is not None:
            self.positions = self.positions[indices, ...]


class CapKVCache(DynamicCache):
    """A ``DynamicCache`` of :class:`CompressibleLayer` s: pass it as ``cache=`` (or
    ``past_key_values=``) to a model or ``generate`` and compress it with a press."""

    def __init__(self) -> None:
        Cache.__init__(self, layer_class_to_replicate=CompressibleLayer)

    def get_query_offset(self, layer_idx: int = 0) -> int:
        if layer_idx >= len(self.layers):
            return 0
        return self.layers[layer_idx].physical_length

    def physical_lengths(self) -> list[int]:
        """Entries held per layer (after eviction)."""
        return [layer.physical_length for layer in self.layers]

    def nbytes(self) -> int:
        """Bytes held by keys and values over all layers."""
        return sum(t.numel() * t.element_size() for layer in self.layers if layer.is_initialized
                   for t in (layer.keys, layer.values))
