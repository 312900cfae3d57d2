"""Training drivers used by the hooks and the benchmark: a PINN trained by Adam, SGD, ENGD
(full-batch natural gradient), SNG or SPRING, and the least-squares spectral-decay study."""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from icml_sng.config import SNGOptions, SPRINGOptions
from icml_sng.least_squares import LeastSquaresProblem
from icml_sng.optim import SNG, SPRING
from icml_sng.pinn import PoissonPINN


@dataclass
class History:
    """Relative L2 error (or residual) against optimizer steps and training wall time."""

    method: str
    steps: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)

    @property
    def final(self) -> float:
        return self.errors[-1]

    @property
    def best(self) -> float:
        finite = [e for e in self.errors if math.isfinite(e)]
        return min(finite) if finite else math.inf

    def late_median(self, fraction: float = 0.1) -> float:
        """Median error over the last ``fraction`` of the iterations: the recorded points with
        ``step > (1 - fraction) * last_step`` (the last point always counts). With points
        every ``eval_every`` steps this samples that window evenly; record often enough (the
        benchmark uses ``eval_every=10`` for Adam) that the window holds many points."""
        if not self.steps or len(self.steps) != len(self.errors):
            m = max(1, int(math.ceil(len(self.errors) * fraction)))
            tail = sorted(self.errors[-m:])
        else:
            start = (1.0 - fraction) * self.steps[-1]
            tail = sorted(e for s, e in zip(self.steps, self.errors) if s > start)
            tail = tail or [self.errors[-1]]
        n = len(tail)
        return tail[n // 2] if n % 2 else 0.5 * (tail[n // 2 - 1] + tail[n // 2])

    def steps_to(self, target: float) -> float:
        """Optimizer steps until the error first drops to ``target`` (inf if never); unlike
        :meth:`time_to` it does not depend on the machine's speed."""
        for st, e in zip(self.steps, self.errors):
            if e <= target:
                return float(st)
        return math.inf

    def time_to(self, target: float) -> float:
        """Training seconds until the error first drops to ``target`` (inf if never)."""
        for t, e in zip(self.times, self.errors):
            if e <= target:
                return t
        return math.inf


#: Interior points per SNG/SPRING batch when ``batch_size`` is 0, by dimension (all boundary
#: points are added): :data:`icml_sng.pinn.PoissonPINN.DEFAULT_BATCH`. 2D: 256 interior + 120
#: boundary = 376 rows, about 2.9 x the 129 parameters (64 + 64 = 128 rows, about p, stalled
#: near 1e-5; README, "2D study").
DEFAULT_BATCH = PoissonPINN.DEFAULT_BATCH

def options_for(method: str, sng: SNGOptions | None = None,
                spring: SPRINGOptions | None = None, **settings: object) -> SNGOptions:
    """The option object ``method`` steps with: the given section (the job config's, as it is)
    or the class defaults, with ``settings`` applied on top for scripts (``damping=1e-8``;
    ``None`` = leave; a name the method's options do not have is skipped, so one call can
    carry settings for several methods; ``line_search_on="full"`` alone also turns the early
    stop off, as in 0.2). ENGD is SNG with fixed damping and the whole grid
    (the ENGD paper's method), taking ``sng``'s ``lr``, ``damping`` and ``line_search``."""
    if method not in ("sng", "spring", "engd"):
        raise ValueError(f"{method!r} has no SNG/SPRING options")
    opts: SNGOptions = (spring or SPRINGOptions()) if method == "spring" else (sng or SNGOptions())
    names = {f.name for f in dataclasses.fields(opts)}
    given = {k: v for k, v in settings.items() if v is not None and k in names}
    if given.get("line_search_on") == "full":  # the ENGD paper's search: every grid point
        given.setdefault("line_search_early_stop", False)
    if given:
        opts = dataclasses.replace(opts, **given)  # type: ignore[arg-type]
    if method == "engd":
        opts = dataclasses.replace(opts, adaptive_damping=False, line_search_early_stop=False,
                                   line_search_on="batch")
    return opts


def make_optimizer(method: str, problem: PoissonPINN, *, sng: SNGOptions | None = None,
                   spring: SPRINGOptions | None = None, adam_lr: float = 1e-3,
                   sgd_lr: float = 1e-4, lbfgs_lr: float = 1.0, sampler: str = "stratified",
                   batch_size: int = 0, seed: int = 0,
                   **settings: object) -> torch.optim.Optimizer:
    """The optimizer for ``method`` on ``problem``. SNG, SPRING and ENGD (= SNG on the full
    batch) are built from their option objects (:func:`options_for`: ``sng``/``spring`` as
    given, class defaults otherwise, ``settings`` on top). Batches are the driver's
    (:func:`fit_pinn`) unless ``sampler`` is the optimizer's own (indexed mode)."""
    params = list(problem.model.parameters())
    if method == "adam":
        return torch.optim.Adam(params, lr=adam_lr)
    if method == "sgd":
        return torch.optim.SGD(params, lr=sgd_lr)
    if method == "lbfgs":
        # one iteration per step; tolerances 0 so it never stops on its own (torch's defaults
        # end every later call at once after a stall, and max_iter=1 alone caps max_eval at 1)
        return torch.optim.LBFGS(params, lr=lbfgs_lr, max_iter=1, max_eval=25, history_size=50,
                                 tolerance_grad=0.0, tolerance_change=0.0,
                                 line_search_fn="strong_wolfe")
    if method not in ("sng", "spring", "engd"):
        raise ValueError(f"unknown method {method!r}: use adam, sgd, lbfgs, engd, sng or "
                         "spring")
    opts = options_for(method, sng, spring, **settings)
    runtime: dict[str, object] = {}
    if sampler != "stratified" and method != "engd":  # indexed mode: the optimizer samples
        runtime = dict(num_residuals=problem.n, sampler=sampler, seed=seed,
                       batch_size=min(batch_size or DEFAULT_BATCH[problem.dim], problem.n))
    cls = SPRING if method == "spring" else SNG
    return cls.from_options(opts, params, **runtime)  # type: ignore[arg-type]


def fit_pinn(problem: PoissonPINN, method: str, *, steps: int = 3000, time_limit: float = 0.0,
             eval_every: int = 10, batch_size: int = 0, boundary_batch_size: int = 0,
             seed: int = 0, target: float | None = None,
             progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
             clock: Callable[[], float] = time.perf_counter,
             **opt_kwargs: object) -> History:
    """Train ``problem.model`` in place with ``method``; evaluation time is not counted.

    SNG/SPRING step on a fresh stratified batch each step (``batch_size`` interior points, 0 =
    :data:`DEFAULT_BATCH`; ``boundary_batch_size`` boundary points, 0 = all), drawn from a
    generator seeded by ``seed``, through torch's closure contract
    (``opt.step(lambda: problem.batch_loss(idx))``); their options' ``line_search_on="full"``
    makes the line search compare the loss over all points. ``opt_kwargs`` go to
    :func:`make_optimizer` (``sng=``/``spring=`` option objects, or single settings). ENGD,
    Adam, SGD and L-BFGS use every point each step. ``target``: stop once the relative L2
    error reaches it (checked every ``eval_every`` steps). ``clock``: the timer
    (``time.process_time`` for CPU seconds, which a machine shared with other jobs inflates
    far less than wall-clock time)."""
    if batch_size < 0 or boundary_batch_size < 0:
        raise ValueError(f"batch_size and boundary_batch_size must be >= 0 (0 = default), got "
                         f"{batch_size}, {boundary_batch_size}")
    opt = make_optimizer(method, problem, batch_size=batch_size, seed=seed,
                         **opt_kwargs)  # type: ignore[arg-type]
    line_search_on = getattr(getattr(opt, "options", None), "line_search_on", "batch")
    indexed = getattr(opt, "num_residuals", None) is not None
    hist = History(method)
    hist.steps.append(0), hist.times.append(0.0)
    hist.errors.append(problem.relative_l2()), hist.losses.append(problem.loss())
    gen = torch.Generator().manual_seed(seed)
    ki = min(batch_size or DEFAULT_BATCH[problem.dim], problem.n_int)
    kb = min(boundary_batch_size or problem.n_bdy, problem.n_bdy)
    full_loss = (lambda: problem.batch_loss(None)) if line_search_on == "full" else None
    elapsed = 0.0
    it: Iterable[int] = range(1, steps + 1)
    for step in (progress(it) if progress else it):
        t0 = clock()
        if indexed:
            opt.step(residual_fn=problem.residual_fn, jacobian_fn=problem.jacobian_fn,
                     line_search_closure=full_loss)
        elif method in ("sng", "spring"):
            idx = problem.sample_batch(ki, kb, generator=gen)
            opt.step(lambda idx=idx: problem.batch_loss(idx), line_search_closure=full_loss)
        elif method == "engd":
            opt.step(lambda: problem.batch_loss(None))
        else:
            def closure() -> torch.Tensor:
                opt.zero_grad()
                loss = problem.batch_loss(None)
                loss.backward()
                return loss

            opt.step(closure)
        elapsed += clock() - t0
        last = step == steps or (time_limit and elapsed >= time_limit)
        if step % eval_every == 0 or last:
            hist.steps.append(step), hist.times.append(elapsed)
            hist.errors.append(problem.relative_l2()), hist.losses.append(problem.loss())
            if not math.isfinite(hist.errors[-1]):
                break
            if target is not None and hist.errors[-1] <= target:
                break
        if last:
            break
    return hist


def fresh_problem(template: PoissonPINN) -> PoissonPINN:
    """A copy of ``template`` with its own copy of the model (same initial weights)."""
    return PoissonPINN(copy.deepcopy(template.model), dim=template.dim,
                       n_interior=template._n_interior, n_boundary=template._n_boundary,
                       laplacian=template._laplacian_arg)


# -- least squares ---------------------------------------------------------------------------
def fit_least_squares(problem: LeastSquaresProblem, method: str, *, steps: int,
                      batch_size: int, damping: float = 0.0, momentum: float = 0.5,
                      lr: float = 1.0, seed: int = 0) -> History:
    """Run ``sgd`` (mini-batch, step ``lr``), ``sng`` or ``spring`` from ``x = 0``; records the
    relative residual ``||Ax - b|| / ||b||`` every step."""
    x = torch.zeros(problem.A.shape[1], dtype=problem.A.dtype, device=problem.A.device,
                    requires_grad=True)
    hist = History(method)
    if method == "sgd":
        g = torch.Generator().manual_seed(seed)
        A, b = problem.A, problem.b
        with torch.no_grad():
            for t in range(steps):
                idx = torch.randperm(problem.n, generator=g)[:batch_size].to(A.device)
                x -= lr * A[idx].T @ (A[idx] @ x - b[idx]) / batch_size
                if t % 10 == 9 or t == steps - 1:
                    hist.steps.append(t + 1)
                    hist.errors.append(problem.relative_residual(x))
                    if not math.isfinite(hist.errors[-1]) or hist.errors[-1] > 1e6:
                        hist.errors[-1] = math.inf
                        break
        return hist
    if method == "sng":
        opt: SNG | SPRING = SNG([x], problem.n, lr=lr, damping=damping, batch_size=batch_size,
                                line_search=None, seed=seed)
    elif method == "spring":
        opt = SPRING([x], problem.n, lr=lr, damping=damping, momentum=momentum,
                     norm_constraint=None, batch_size=batch_size, line_search=None, seed=seed)
    else:
        raise ValueError(f"unknown method {method!r}: use sgd, sng or spring")
    jac = problem.jacobian_fn(x)
    for t in range(steps):
        opt.step(problem.residual_fn(x), jac)
        if t % 10 == 9 or t == steps - 1:
            hist.steps.append(t + 1)
            hist.errors.append(problem.relative_residual(x))
    return hist


def tuned_sgd(problem: LeastSquaresProblem, *, steps: int, batch_size: int,
              lr_grid: Iterable[float], seed: int = 0) -> tuple[History, float]:
    """Mini-batch SGD with the best step from ``lr_grid`` (units of ``1 / max_i ||a_i||^2``)."""
    unit = 1.0 / float((problem.A**2).sum(1).max())
    best: tuple[History, float] | None = None
    for c in lr_grid:
        h = fit_least_squares(problem, "sgd", steps=steps, batch_size=batch_size, lr=c * unit,
                              seed=seed)
        if best is None or h.final < best[0].final:
            best = (h, c)
    assert best is not None
    return best
