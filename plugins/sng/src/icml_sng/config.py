"""Typed configs, one per capability, and the optimizers' option dataclasses. Field names are
the CLI's ``--set`` keys; the ``sng`` and ``spring`` sections of ``train`` are the very
:class:`SNGOptions` / :class:`SPRINGOptions` objects the optimizers take (``--set
sng.damping=1e-8`` reaches ``SNG.options.damping`` unchanged; tests/test_conformance.py)."""

from __future__ import annotations

from dataclasses import dataclass

from icml import option

METHODS = ("adam", "sgd", "lbfgs", "engd", "sng", "spring")
#: Steps per method when ``steps`` is 0: what each method reached in 8 s of wall-clock on the
#: 2 shared CPU cores the README's table was measured on (1D defaults), so the default job
#: compares methods at roughly equal time but with an iteration budget that does not depend on
#: the machine's load. ``--set time_limit=8 --set steps=100000`` is the wall-clock comparison.
STEP_BUDGET = {"adam": 1600, "sgd": 1500, "lbfgs": 300, "engd": 140, "sng": 200, "spring": 200}
#: ``n_interior`` when it is 0, by dimension (2D: per axis, the ENGD paper's 30 x 30 grid).
DEFAULT_N_INTERIOR = {1: 200, 2: 30}


@dataclass
class SNGOptions:
    """SNG's settings, and the ones SPRING shares: what :class:`icml_sng.optim.SNG` takes
    (``SNG(params, options=SNGOptions(...))`` or the same names as keywords). The defaults here
    are the class defaults (written once): what reaches relative L2 1e-6 on the plugin's 1D
    and 2D Poisson PINNs (README, "Defaults")."""

    lr: float = option(1.0, help="step size eta (the largest line-search step)", gt=0)
    damping: float = option(1e-9, help="damping lambda in (J_S J_S^T + lambda I); the start "
                                       "value when adaptive_damping (0.3.0; 0.2.x had 1e-10, "
                                       "which stalls in 2D)", ge=0)
    adaptive_damping: bool = option(True, help="steer lambda by the line search's outcome "
                                               "(ADAPTIVE_DAMPING: x2 after a step <= 2^-6, "
                                               "/2 after one >= 2^-3; ours, since 0.4.0); "
                                               "false = fixed, as in the paper")
    line_search: int = option(12, help="grid line search points lr*0.5**j (0 = fixed lr)",
                              ge=0)
    line_search_on: str = option("batch", help="loss the line search compares: batch (the "
                                               "step's own rows) or full (all residuals; the "
                                               "ENGD paper's search, the pre-0.2 default)",
                                 choices=("batch", "full"))
    line_search_early_stop: bool = option(True, help="stop the grid at its first local "
                                                     "minimum below the current batch loss; "
                                                     "false = every point")
    line_search_include_zero: bool = option(False, help="also consider not moving (the "
                                                        "compared loss never increases)")
    solve: str = option("auto", help="linear solve: auto, woodbury (k x k) or param (p x p)",
                        choices=("auto", "woodbury", "param"))


@dataclass
class SPRINGOptions(SNGOptions):
    """SPRING's settings: SNG's plus momentum and the norm constraint; what
    :class:`icml_sng.optim.SPRING` takes. SPRING keeps a fixed damping by default (with the
    adaptive rule one of five 2D seeds stalled: README, "Adaptive damping")."""

    adaptive_damping: bool = option(False, help="steer lambda by the line search's outcome "
                                                "(SNG's rule); off by default for SPRING")
    momentum: float = option(0.5, help="momentum mu", ge=0, lt=1)
    norm_constraint: float = option(0.0, help="norm constraint C: eta = min(lr, sqrt(C) / "
                                              "||phi||) (0 = off)", ge=0)


@dataclass
class TrainConfig:
    """Poisson PINN trained by each method in turn (same init, same collocation points)."""

    methods: list[str] = option(["adam", "sgd", "engd", "sng", "spring"],
                                help="methods to run, any of adam, sgd, lbfgs (torch L-BFGS, "
                                     "strong Wolfe, full batch), engd (full-batch natural "
                                     "gradient / Gauss-Newton), sng, spring")
    dim: int = option(1, help="Poisson dimension: 1 or 2", choices=(1, 2))
    n_interior: int = option(0, help="interior collocation points (per axis in 2D); 0 = 200 "
                                     "in 1D, 30 in 2D (the ENGD paper's 30 x 30 grid)", ge=0)
    n_boundary: int = option(30, help="boundary points per face (2D; 1D uses the 2 ends)", ge=1)
    hidden: list[int] = option([32], help="hidden widths of the tanh MLP")
    steps: int = option(0, help="optimizer steps per method (0 = the per-method budget "
                                "STEP_BUDGET: about 8 s each on a busy 2-core CPU, so results "
                                "are reproducible under a seed)", ge=0)
    time_limit: float = option(0.0, help="also stop a method after this many wall-clock "
                                         "seconds (0 = no limit; the paper's equal-time "
                                         "comparison, not reproducible run to run)", ge=0)
    clock: str = option("wall", help="what time_limit and the seconds columns count: wall "
                                     "(wall-clock seconds of training steps) or cpu (CPU "
                                     "seconds of the process, far less inflated by a busy "
                                     "machine; benchmarks/bench.py uses it)",
                        choices=("wall", "cpu"))
    init_seed: int = option(-1, help="seed of the network's initialisation (-1 = the run's "
                                     "--seed, which always seeds the batches): a fixed "
                                     "init_seed with several --seed values varies only the "
                                     "sampled batches", ge=-1)
    eval_every: int = option(10, help="evaluate the relative L2 error every this many steps",
                             ge=1)
    batch_size: int = option(0, help="SNG/SPRING interior points per step (0 = 32 in 1D, 256 "
                                     "in 2D: keep the rows per step well away from the "
                                     "parameter count, see README)", ge=0)
    boundary_batch_size: int = option(0, help="SNG/SPRING boundary points per step (0 = all: "
                                              "the 2 ends in 1D, 4 x n_boundary in 2D)", ge=0)
    sampler: str = option("stratified", help="SNG/SPRING batches: stratified (interior + "
                                             "boundary, the driver samples, closure mode) or "
                                             "the optimizer's own uniform / svs sampler over "
                                             "all residuals (indexed mode)",
                          choices=("stratified", "uniform", "svs"))
    sng: SNGOptions = option(default_factory=SNGOptions,
                             help="SNG's settings (SNGOptions, what SNG takes); ENGD uses its lr, "
                                  "damping and line_search with fixed damping and the full grid")
    spring: SPRINGOptions = option(default_factory=SPRINGOptions,
                                   help="SPRING's settings (SPRINGOptions, what SPRING takes)")
    adam_lr: float = option(1e-3, help="Adam learning rate", gt=0)
    sgd_lr: float = option(1e-4, help="SGD learning rate", gt=0)
    lbfgs_lr: float = option(1.0, help="L-BFGS learning rate (strong Wolfe line search)", gt=0)
    target: float = option(1e-6, help="relative L2 error reported as 'time to target'", gt=0)
    dtype: str = option("float64", help="float64 (the high-precision setting), float32, or "
                                        "'context' to follow the run's --dtype",
                        choices=("float64", "float32", "context"))

    def steps_for(self, method: str) -> int:
        """The step budget of ``method``: ``steps``, or its :data:`STEP_BUDGET` when 0."""
        return self.steps or STEP_BUDGET[method]

    def __post_init__(self) -> None:
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ValueError(f"methods: unknown {bad} (allowed: {', '.join(METHODS)})"
                             if bad else "methods is empty: name at least one method")
        if self.n_interior == 1:
            raise ValueError("n_interior must be >= 2 (or 0 for the default: 200 in 1D, 30 per "
                             "axis in 2D)")
        if not self.hidden or any(h < 1 for h in self.hidden):
            raise ValueError(f"hidden must list positive widths, got {self.hidden}")


@dataclass
class EvaluateConfig:
    """Spectral-decay study on linear least squares: SNG and SPRING vs tuned SGD."""

    decays: list[float] = option([0.0, 0.5, 1.0, 1.5, 2.0],
                                 help="singular value decay exponents (sigma_i = i**-decay)")
    n: int = option(500, help="rows (residuals)", ge=2)
    p: int = option(100, help="columns (parameters)", ge=1)
    batch_size: int = option(20, help="rows per step k", ge=1)
    steps: int = option(500, help="steps per method", ge=1)
    damping: float = option(0.0, help="SNG damping lambda (0 = block Kaczmarz)", ge=0)
    spring_damping: float = option(0.0, help="SPRING damping lambda", ge=0)
    momentum: float = option(0.5, help="SPRING momentum mu", ge=0, lt=1)
    sgd_lr_grid: list[float] = option([1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0],
                                      help="SGD step sizes tried, in units of 1/max row "
                                           "norm^2 (32 diverges at the defaults); the best "
                                           "final residual is reported")
    dtype: str = option("float64", help="float64, float32 or 'context' (the run's --dtype)",
                        choices=("float64", "float32", "context"))

    def __post_init__(self) -> None:
        if self.batch_size > self.n:
            raise ValueError(f"batch_size={self.batch_size} is larger than n={self.n}: "
                             f"use batch_size <= n")
        if not self.decays or any(d < 0 for d in self.decays):
            raise ValueError(f"decays must be a non-empty list of values >= 0, got "
                             f"{self.decays}")
        if not self.sgd_lr_grid or any(v <= 0 for v in self.sgd_lr_grid):
            raise ValueError("sgd_lr_grid must list positive step sizes")
