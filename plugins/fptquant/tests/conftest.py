"""Shared fixtures: tiny float64 Llama / Qwen2 models with GQA and exact RMSNorm."""

from __future__ import annotations

import pytest
import torch
from torch import nn


def _precise_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    var = x.pow(2).mean(-1, keepdim=True)
    return self.weight * (x * torch.rsqrt(var + self.variance_epsilon))


def make_precise(model: nn.Module) -> nn.Module:
    """transformers' RMSNorm computes in float32 even for float64 inputs; compute in the input
    dtype so float64 identities can be checked to 1e-10."""
    for mod in model.modules():
        if type(mod).__name__.endswith("RMSNorm"):
            cls = type(mod)
            mod.__class__ = type("Precise" + cls.__name__, (cls,), {"forward": _precise_forward})
    return model


@pytest.fixture
def tiny_model():
    """Factory: a float64 tiny model (4 query heads, 2 KV heads) with exact norms."""
    from icml.models import tiny_causal_lm

    def build(arch: str = "llama", seed: int = 0, **kw):
        kw.setdefault("hidden_size", 32)
        kw.setdefault("num_heads", 4)
        kw.setdefault("num_kv_heads", 2)
        kw.setdefault("intermediate_size", 48)
        model = tiny_causal_lm(arch, seed=seed, dtype=torch.float64, **kw)
        with torch.no_grad():  # non-trivial norm scales so fusing them is tested
            gen = torch.Generator().manual_seed(seed + 1)
            for mod in model.modules():
                if type(mod).__name__.endswith("RMSNorm"):
                    mod.weight.copy_(1 + 0.5 * torch.rand(mod.weight.shape, generator=gen,
                                                          dtype=torch.float64))
        return make_precise(model)

    return build


@pytest.fixture
def ids():
    return torch.randint(4, 260, (2, 11), generator=torch.Generator().manual_seed(3))


def randomize(params, scale: float = 0.3, seed: int = 0) -> None:
    """Give every transform parameter a distinct random value (heads differ)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.copy_(scale * torch.randn(p.shape, generator=gen, dtype=p.dtype))


@pytest.fixture
def randomize_params():
    return randomize
