"""Typed configs, one per capability. Field names are the CLI's --set keys and match the
Python API's keyword arguments (beta, penalty_coeff, active_tol, solver, linear_solver, ...)."""

from __future__ import annotations

from dataclasses import dataclass

import icml
from icml import option

FAMILIES = ("random", "dqp", "simplex", "chain")
_FINITE = ("beta", "penalty_coeff", "active_tol", "rho_min", "tol", "zero_dual_guard")


def _check_finite(config: object) -> None:
    """Smoothing and penalty settings must be finite numbers (``inf`` would silently turn the
    penalty off or make it infinite); raised as a config error (exit 2) by the core."""
    import math

    for name in _FINITE:
        value = getattr(config, name, None)
        if isinstance(value, float) and not math.isfinite(value):
            raise icml.ConfigError(f"config key {name!r}: got {value!r}, must be a finite "
                                   "number")
    for name in ("betas",):
        for v in getattr(config, name, []) or []:
            if not math.isfinite(v) or v <= 0:
                raise icml.ConfigError(f"config key {name!r}: got {v!r}, every value must be "
                                       "a finite number > 0")


@dataclass
class DifferentiateConfig:
    family: str = option("random", help="problem family: random (dense, well-conditioned, "
                         "strictly complementary), dqp (dQP's dense generator), simplex "
                         "(sparse simplex projection), chain (sparse chain projection)",
                         choices=FAMILIES)
    sizes: list[int] = option([20, 50, 100], help="problem sizes: n for random/dqp/simplex, "
                              "d (points in R^d, n = 100 d) for chain", ge=1)
    problems: int = option(3, help="problems (seeds) per size; errors are the worst, times "
                           "the median", ge=1)
    problem: str = option("", help="path to your own QP as .npz with arrays Q, q and "
                          "optionally G, h, A, b; replaces family/sizes when set")
    beta: float = option(1e-6, help="softplus smoothing width of the penalty", gt=0)
    penalty_coeff: float = option(10.0, help="c in rho = c * ||dual||_1", gt=0)
    active_tol: float = option(1e-5, help="row i is active when h_i - G_i x < active_tol", gt=0)
    rho_min: float = option(0.0, help="floor on ||dual||_1 inside rho (0 = the paper; 1 keeps "
                            "zero-dual constraints in the backward)", ge=0)
    zero_dual_guard: float | None = option(1e-3, help="a block whose ||dual||_1 is below this "
                                           "times its dual scale gets rho from that scale "
                                           "(ours; none: the paper's rule unguarded)", ge=0)
    solver: str = option("auto", help="qpsolvers backend for the forward pass (auto: piqp "
                         "+ a verified active-set polish where Q is known PSD, else or on "
                         "failure clarabel at 1e-12)")
    tol: float | None = option(None, help="forward solver tolerance (none: a tight "
                              "per-solver default: 1e-8 for auto's piqp, 1e-12 for clarabel)", gt=0)
    linear_solver: str = option("auto", help="dXPP's linear solver",
                                choices=("auto", "dense", "sparse", "cg"))
    polish: bool = option(False, help="refine the solver's point on its active set")
    kkt_mode: str = option("reduced", help="KKT reference used for the error column",
                           choices=("reduced", "full"))
    betas: list[float] = option([1e-2, 1e-4, 1e-6], help="beta sweep on the largest problem "
                                "(empty list: skip)")
    repeats: int = option(3, help="timing repeats (the fastest is reported)", ge=1)
    blas_threads: int = option(1, help="BLAS threads while timing (0: library default); 1 "
                               "keeps timings comparable on a shared machine", ge=0)

    def __post_init__(self) -> None:
        _check_finite(self)


@dataclass
class EvaluateConfig:
    random_sizes: list[int] = option([20, 100, 300], help="n of the dense random QPs "
                                     "(empty: skip)", ge=1)
    simplex_sizes: list[int] = option([1000, 10000, 100000], help="n of the sparse simplex "
                                      "projections (empty: skip)", ge=1)
    chain_dims: list[int] = option([2, 10], help="d of the chain projections, n = 100 d "
                                   "(empty: skip)", ge=1)
    portfolio_steps: int = option(30, help="Adam steps of end-to-end portfolio training with "
                                  "dXPP and with KKT gradients (0: skip)", ge=0)
    beta: float = option(1e-6, help="softplus smoothing width of the penalty", gt=0)
    penalty_coeff: float = option(10.0, help="c in rho = c * ||dual||_1", gt=0)
    active_tol: float = option(1e-5, help="row i is active when h_i - G_i x < active_tol", gt=0)
    solver: str = option("auto", help="qpsolvers backend for the forward pass (auto: piqp "
                         "+ a verified active-set polish where Q is known PSD, else or on "
                         "failure clarabel at 1e-12)")
    tol: float | None = option(None, help="forward solver tolerance (none: a tight "
                              "per-solver default: 1e-8 for auto's piqp, 1e-12 for clarabel)", gt=0)
    linear_solver: str = option("auto", help="dXPP's linear solver",
                                choices=("auto", "dense", "sparse", "cg"))
    polish: bool = option(False, help="refine the solver's point on its active set")
    repeats: int = option(3, help="timing repeats (the fastest is reported)", ge=1)
    blas_threads: int = option(1, help="BLAS threads while timing (0: library default); 1 "
                               "keeps timings comparable on a shared machine", ge=0)

    def __post_init__(self) -> None:
        _check_finite(self)
