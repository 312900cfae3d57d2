"""Shared fixtures: tiny float64 models and data for exact Hessian checks."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def tiny_mm():
    """A tiny two-modality problem: data dict-batches and a float64 late-fusion MLP."""
    from icml_modality_pairing.models import LateFusion

    g = torch.Generator().manual_seed(0)
    xa = torch.randn(60, 3, generator=g, dtype=torch.float64)
    xb = torch.randn(60, 3, generator=g, dtype=torch.float64)
    y = torch.arange(60) % 3
    torch.manual_seed(0)
    model = LateFusion({"a": 3, "b": 3}, 3, width=4, hidden=3).double().eval()
    batches = [{"a": xa[s:s + 20], "b": xb[s:s + 20], "labels": y[s:s + 20]}
               for s in range(0, 60, 20)]
    return model, batches


@pytest.fixture
def softmax_regression():
    """Multinomial logistic regression (a PSD Hessian) on tuple batches."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(80, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (80,), generator=g)
    torch.manual_seed(1)
    model = torch.nn.Linear(4, 3).double()
    return model, [(x[:40], y[:40]), (x[40:], y[40:])]
