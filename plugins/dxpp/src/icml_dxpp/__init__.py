"""dXPP: penalty-based differentiation through black-box QP solvers.

Public API (torch is imported on first use, not at import time)::

    from icml_dxpp import DXPPQPLayer, dxpp_solve, differentiate
    x, mu, nu = dxpp_solve(Q, q, G, h, A, b)           # differentiable w.r.t. every input
    from icml_dxpp import CvxpyQPLayer                 # a cvxpy QP in (pip install cvxpy)
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.3.1"

_EXPORTS = {
    "DXPPQPLayer": "icml_dxpp.layer",
    "CvxpyQPLayer": "icml_dxpp.cvxpy_layer",
    "dxpp_solve": "icml_dxpp.layer",
    "differentiate": "icml_dxpp.layer",
    "QPSolution": "icml_dxpp.layer",
    "LayerOptions": "icml_dxpp.layer",
    "QPProblem": "icml_dxpp.qp",
    "make_problem": "icml_dxpp.qp",
    "QPInputError": "icml_dxpp.qp",
    "QPSolveError": "icml_dxpp.qp",
    "solve_qp": "icml_dxpp.forward",
    "recover_duals": "icml_dxpp.forward",
    "QPResult": "icml_dxpp.forward",
    "PenaltyOptions": "icml_dxpp.penalty",
    "dxpp_backward": "icml_dxpp.penalty",
    "penalty_weights": "icml_dxpp.penalty",
    "kkt_backward": "icml_dxpp.kkt",
    "problems": "icml_dxpp.problems",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:  # PEP 562: keep `import icml_dxpp` light
    if name not in _EXPORTS:
        raise AttributeError(f"module 'icml_dxpp' has no attribute {name!r}")
    module = import_module(_EXPORTS[name])
    return module if name == "problems" else getattr(module, name)


def __dir__() -> list[str]:
    return __all__
