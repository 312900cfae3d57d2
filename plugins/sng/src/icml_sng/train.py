"""Training drivers used by the hooks and the benchmark: a PINN trained by Adam, SGD, ENGD
(full-batch natural gradient), SNG or SPRING, and the least-squares spectral-decay study."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

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

_UNSET = None


def make_optimizer(method: str, problem: PoissonPINN, *, damping: float | None = _UNSET,
                   adaptive_damping: bool | None = _UNSET,
                   momentum: float | None = _UNSET, norm_constraint: float | None = _UNSET,
                   line_search: int | None = _UNSET, line_search_on: str | None = _UNSET,
                   line_search_early_stop: bool | None = _UNSET, lr: float | None = _UNSET,
                   adam_lr: float = 1e-3, sgd_lr: float = 1e-4, lbfgs_lr: float = 1.0,
                   sampler: str = "stratified", batch_size: int = 0, seed: int = 0,
                   **_ignored: object) -> torch.optim.Optimizer:
    """The optimizer for ``method`` on ``problem``. SNG, SPRING and ENGD (= SNG on the full
    batch) get their class defaults except for the settings passed here (``None`` = class
    default; ``norm_constraint=0`` = off). Batches are the driver's (:func:`fit_pinn`). ENGD is
    the ENGD paper's method: full batch, every grid point, fixed ``damping``."""
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
    given = dict(damping=damping, adaptive_damping=adaptive_damping,
                 line_search=line_search, lr=lr,
                 line_search_early_stop=line_search_early_stop)
    if line_search_on == "full":
        given["line_search_early_stop"] = False if line_search_early_stop is None \
            else line_search_early_stop
    kw: dict = {k: v for k, v in given.items() if v is not None}
    if sampler != "stratified" and method != "engd":  # indexed mode: the optimizer samples
        kw.update(num_residuals=problem.n, sampler=sampler, seed=seed,
                  batch_size=min(batch_size or DEFAULT_BATCH[problem.dim], problem.n))
    if "line_search" in kw:
        kw["line_search"] = kw["line_search"] or None  # 0 = fixed step
    if method == "engd":  # the ENGD paper's search: every grid point on the full loss,
        kw["line_search_early_stop"] = False  # and its fixed damping
        kw["adaptive_damping"] = False
        return SNG(params, **kw)  # type: ignore[arg-type]
    if method == "sng":
        return SNG(params, **kw)  # type: ignore[arg-type]
    if method == "spring":
        if momentum is not None:
            kw["momentum"] = momentum
        if norm_constraint is not None:
            kw["norm_constraint"] = norm_constraint or None
        return SPRING(params, **kw)  # type: ignore[arg-type]
    raise ValueError(f"unknown method {method!r}: use adam, sgd, lbfgs, engd, sng or spring")


def fit_pinn(problem: PoissonPINN, method: str, *, steps: int = 3000, time_limit: float = 0.0,
             eval_every: int = 10, batch_size: int = 0, boundary_batch_size: int = 0,
             line_search_on: str | None = None, seed: int = 0, target: float | None = None,
             progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
             clock: Callable[[], float] = time.perf_counter,
             **opt_kwargs: object) -> History:
    """Train ``problem.model`` in place with ``method``; evaluation time is not counted.

    SNG/SPRING step on a fresh stratified batch each step (``batch_size`` interior points, 0 =
    :data:`DEFAULT_BATCH`; ``boundary_batch_size`` boundary points, 0 = all), drawn from a
    generator seeded by ``seed``, through torch's closure contract
    (``opt.step(lambda: problem.batch_loss(idx))``); ``line_search_on="full"`` makes their line
    search compare the loss over all points. ENGD, Adam, SGD and L-BFGS use every point each
    step. ``target``: stop once the relative L2 error reaches it (checked every
    ``eval_every`` steps). ``clock``: the timer (``time.process_time`` for CPU seconds, which
    a machine shared with other jobs inflates far less than wall-clock time)."""
    if batch_size < 0 or boundary_batch_size < 0:
        raise ValueError(f"batch_size and boundary_batch_size must be >= 0 (0 = default), got "
                         f"{batch_size}, {boundary_batch_size}")
    opt = make_optimizer(method, problem, line_search_on=line_search_on, batch_size=batch_size,
                         seed=seed, **opt_kwargs)  # type: ignore[arg-type]
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
