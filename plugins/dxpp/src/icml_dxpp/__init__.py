"""dXPP: penalty-based differentiation through black-box QP solvers.

Public API (torch is imported on first use, not at import time)::

    from icml_dxpp import DXPPQPLayer, dxpp_solve, differentiate
    x, mu, nu = dxpp_solve(Q, q, G, h, A, b)           # differentiable w.r.t. every input
    from icml_dxpp import CvxpyQPLayer                 # a cvxpy QP in (pip install cvxpy)
"""

from __future__ import annotations

from icml.lazy import lazy_exports

__version__ = "0.3.3"

_EXPORTS = {
    "DXPPQPLayer": "layer",
    "CvxpyQPLayer": "cvxpy_layer",
    "dxpp_solve": "layer",
    "differentiate": "layer",
    "QPSolution": "layer",
    "LayerOptions": "layer",
    "QPProblem": "qp",
    "make_problem": "qp",
    "QPInputError": "qp",
    "QPSolveError": "qp",
    "solve_qp": "forward",
    "recover_duals": "forward",
    "QPResult": "forward",
    "PenaltyOptions": "config",
    "dxpp_backward": "penalty",
    "penalty_weights": "penalty",
    "kkt_backward": "kkt",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
