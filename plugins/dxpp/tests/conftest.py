"""Shared fixtures for the dxpp tests (pytest runs with --import-mode=importlib)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def to_torch():
    """QPProblem -> list of float64 torch tensors (None for absent blocks), requiring grad."""
    import torch

    def convert(prob, requires_grad=True, dtype=None):
        dtype = dtype or torch.float64
        vals = {}
        for name in ("Q", "q", "G", "h", "A", "b"):
            M = getattr(prob, name)
            arr = np.asarray(M.toarray() if hasattr(M, "toarray") else M)
            vals[name] = torch.tensor(arr, dtype=dtype).requires_grad_(requires_grad)
        if prob.m == 0:
            vals["G"] = vals["h"] = None
        if prob.p == 0:
            vals["A"] = vals["b"] = None
        return [vals[k] for k in ("Q", "q", "G", "h", "A", "b")]

    return convert


@pytest.fixture
def exact_solver():
    """An active-set solver (exact solutions, a different algorithm from the default clarabel).

    Skips loudly when none is installed: falling back to clarabel would make the cross-solver
    tests compare clarabel with itself. The ``test`` extra installs daqp, so CI runs them."""
    import qpsolvers

    if "daqp" not in qpsolvers.available_solvers:
        pytest.skip("needs the daqp active-set solver to compare against clarabel: "
                    "pip install -e 'plugins/dxpp[test]' (or pip install daqp)")
    return "daqp"
