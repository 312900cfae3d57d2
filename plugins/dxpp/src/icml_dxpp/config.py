"""The configs: :class:`PenaltyOptions` is what dXPP's backward takes
(:func:`~icml_dxpp.penalty.dxpp_backward`, :class:`~icml_dxpp.layer.LayerOptions`,
:func:`~icml_dxpp.benchmark.compare_backwards`), and the job configs nest it as ``penalty.*``.
The forward keys (``solver``, ``tol``, ``polish``) are :func:`~icml_dxpp.forward.solve_qp`'s
argument names. Light: the standard library and ``icml`` only."""

from __future__ import annotations

import math
from dataclasses import dataclass

from icml import option

FAMILIES = ("random", "dqp", "simplex", "chain")
#: qpsolvers backends by name (``auto``: piqp + a verified polish, clarabel fallback)
QP_SOLVERS = ("clarabel", "cvxopt", "daqp", "ecos", "gurobi", "highs", "hpipm", "jaxopt_osqp",
              "kvxopt", "mosek", "osqp", "piqp", "proxqp", "qpalm", "qpax", "qpoases", "quadprog",
              "scs", "sip")
LINEAR_SOLVERS = ("auto", "dense", "sparse", "cg", "batched")


def _finite(name: str, value: object, *, positive: bool = True) -> None:
    """Smoothing and penalty settings must be finite numbers (``inf`` would silently turn the
    penalty off or make it infinite)."""
    if isinstance(value, (int, float)) and not math.isfinite(value):
        raise ValueError(f"config key {name!r}: got {value!r}, must be a finite number")


@dataclass(frozen=True)
class PenaltyOptions:
    """dXPP backward settings (the paper's defaults).

    ``rho_min`` floors ‖dual‖₁ inside ρ (ours, off by default as in the paper: a block whose
    duals are all zero then gets ρ = 0 and drops out of the backward; ``rho_min=1`` keeps it,
    at some accuracy cost on small-dual problems, see the README). ``zero_dual_guard`` (ours,
    default 1e-3; ``None`` = the paper's rule unguarded): when a block's ‖dual‖₁ is below
    ``zero_dual_guard`` times its dual scale (see :func:`~icml_dxpp.penalty.block_rhos`) the
    paper's ρ would make that block (nearly) vanish from the backward although its constraints
    still bind, so ρ is set from the dual scale instead; above it the paper's ρ is used
    unchanged. ``cg_min_n``: under ``linear_solver='auto'`` a sparse system with at least this
    many variables is solved by the residual-checked CG (direct fallback), as the official code
    switches to its iterative solver above 50 000; ``None`` never does.
    """

    beta: float = option(1e-6, help="softplus smoothing width of the penalty", gt=0)
    penalty_coeff: float = option(10.0, help="c in rho = c * ||dual||_1", gt=0)
    active_tol: float = option(1e-5, help="row i is active when h_i - G_i x < active_tol",
                               gt=0)
    rho_min: float = option(0.0, help="floor on ||dual||_1 inside rho (0 = the paper; 1 keeps "
                            "zero-dual constraints in the backward)", ge=0)
    zero_dual_guard: float | None = option(1e-3, help="a block whose ||dual||_1 is below this "
                                           "times its dual scale gets rho from that scale "
                                           "(ours; none: the paper's rule unguarded)", ge=0)
    ridge: float = option(1e-9, help="ridge added to the SPD penalty system", ge=0)
    linear_solver: str = option("auto", help="dXPP's linear solver (batched: the torch layer's "
                                "batched dense solve)", choices=LINEAR_SOLVERS)
    cg_tol: float = option(1e-8, help="relative residual of the CG solver", gt=0)
    cg_maxiter: int | None = option(None, help="CG iterations (none: scipy's default)", ge=1)
    cg_min_n: int | None = option(50_000, help="under linear_solver=auto, sparse systems with "
                                  "at least this many variables use CG (none: never)", ge=1)

    def __post_init__(self) -> None:
        for name in ("beta", "penalty_coeff", "active_tol", "rho_min", "zero_dual_guard",
                     "ridge", "cg_tol"):
            _finite(f"penalty.{name}", getattr(self, name))


def _check_job(config: object) -> None:
    """The job-level numbers: finite tolerances and betas."""
    _finite("tol", getattr(config, "tol", None))
    for v in getattr(config, "betas", []) or []:
        if not math.isfinite(v) or v <= 0:
            raise ValueError(f"config key 'betas': got {v!r}, every value must be a finite "
                             "number > 0")


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
    solver: str = option("auto", help="forward solver: auto (piqp + a verified active-set "
                         "polish where Q is known PSD, else or on failure clarabel at 1e-12), "
                         "torch (batched dense interior point + verified polish, auto where "
                         "that fails) or a qpsolvers backend", choices=("auto", "torch",
                                                                        *QP_SOLVERS))
    tol: float | None = option(None, help="forward solver tolerance (none: a tight "
                              "per-solver default: 1e-8 for auto's piqp, 1e-12 for clarabel)", gt=0)
    polish: bool = option(False, help="refine the solver's point on its active set")
    penalty: PenaltyOptions = option(default_factory=PenaltyOptions,
                                     help="dXPP's backward (the penalty system)")
    kkt_mode: str = option("reduced", help="KKT reference used for the error column",
                           choices=("reduced", "full"))
    betas: list[float] = option([1e-2, 1e-4, 1e-6], help="beta sweep on the largest problem "
                                "(empty list: skip)")
    repeats: int = option(3, help="timing repeats (the fastest is reported)", ge=1)
    blas_threads: int = option(1, help="BLAS threads while timing (0: library default); 1 "
                               "keeps timings comparable on a shared machine", ge=0)

    def __post_init__(self) -> None:
        _check_job(self)


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
    solver: str = option("auto", help="forward solver: auto (piqp + a verified active-set "
                         "polish where Q is known PSD, else or on failure clarabel at 1e-12), "
                         "torch (batched dense interior point + verified polish, auto where "
                         "that fails) or a qpsolvers backend", choices=("auto", "torch",
                                                                        *QP_SOLVERS))
    tol: float | None = option(None, help="forward solver tolerance (none: a tight "
                              "per-solver default: 1e-8 for auto's piqp, 1e-12 for clarabel)", gt=0)
    polish: bool = option(False, help="refine the solver's point on its active set")
    penalty: PenaltyOptions = option(default_factory=PenaltyOptions,
                                     help="dXPP's backward (the penalty system)")
    repeats: int = option(3, help="timing repeats (the fastest is reported)", ge=1)
    blas_threads: int = option(1, help="BLAS threads while timing (0: library default); 1 "
                               "keeps timings comparable on a shared machine", ge=0)

    def __post_init__(self) -> None:
        _check_job(self)
