"""Split a client's LoRA adapter into its shared and personal subspaces, and merge them back.

An adapter is a mapping ``module path -> LoRAFactors(A, B)`` with A of shape (r, in) and B of
shape (out, r), as peft stores ``lora_A.weight`` / ``lora_B.weight``. The split is by rank index:
A = [A_s; A_p] (rows) and B = [B_s, B_p] (columns), so B A = B_s A_s + B_p A_p exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from icml_het_cpflora.ranks import ClientRankSpec


@dataclass
class LoRAFactors:
    """One target module's LoRA factors: ``A`` (r, in) and ``B`` (out, r)."""

    A: Any
    B: Any

    def product(self) -> Any:
        """B @ A (the raw low-rank update, without the alpha/r scaling)."""
        return self.B @ self.A


Adapter = dict[str, LoRAFactors]


@dataclass
class SplitAdapter:
    """The two subspaces of one adapter."""

    shared: Adapter
    personal: Adapter


def split_lora(adapter: Adapter, spec: ClientRankSpec) -> SplitAdapter:
    """Split every module's factors by rank index into (shared, personal)."""
    shared: Adapter = {}
    personal: Adapter = {}
    for name, f in adapter.items():
        r = f.A.shape[0]
        if f.B.shape[1] != r:
            raise ValueError(f"module {name!r}: A has rank {r} but B has {f.B.shape[1]} columns")
        if r != spec.rank:
            raise ValueError(f"module {name!r}: adapter rank {r} != r_shared + r_personal = "
                             f"{spec.rank}; build the adapter from the same ClientRankSpec")
        s = spec.r_shared
        shared[name] = LoRAFactors(f.A[:s].clone(), f.B[:, :s].clone())
        personal[name] = LoRAFactors(f.A[s:].clone(), f.B[:, s:].clone())
    return SplitAdapter(shared, personal)


def merge_lora(shared: Adapter, personal: Adapter) -> Adapter:
    """Concatenate the subspaces back into one adapter: A = [A_s; A_p], B = [B_s, B_p]."""
    import torch

    if set(shared) != set(personal):
        missing = sorted(set(shared) ^ set(personal))
        raise ValueError(f"shared and personal parts cover different modules: {missing[:4]}")
    out: Adapter = {}
    for name in shared:
        s, p = shared[name], personal[name]
        out[name] = LoRAFactors(torch.cat([s.A, p.A], dim=0), torch.cat([s.B, p.B], dim=1))
    return out
