"""The default jobs, typed: ``train`` (Poisson PINN, every method in turn) and ``evaluate``
(least-squares spectral-decay study). The hooks in ``plugin.py`` call these; torch loads
inside them."""

from __future__ import annotations

import math
from typing import Any

import icml
from icml_sng.config import DEFAULT_N_INTERIOR, EvaluateConfig, TrainConfig


def _dtype(ctx: icml.RunContext, name: str) -> Any:
    import torch

    return ctx.torch_dtype() if name == "context" else getattr(torch, name)


def _fmt_time(t: float) -> str:
    return "never" if not math.isfinite(t) else f"{t:.2f}"


def _fmt_steps(s: float) -> int | str:
    return "never" if not math.isfinite(s) else int(s)


def _arm(m: str, h: Any, target: float) -> tuple[list, dict[str, float]]:
    """One method's table row and metrics; a diverged method reports nan/inf, not an error."""
    row = [m, h.steps[-1], round(h.times[-1], 2), h.final, h.best, h.late_median(),
           _fmt_steps(h.steps_to(target)), _fmt_time(h.time_to(target))]
    metrics = {f"{m}_rel_l2": float(h.final), f"{m}_best_rel_l2": float(h.best),
               f"{m}_late_median_rel_l2": float(h.late_median()),
               f"{m}_seconds": float(h.times[-1]), f"{m}_steps": float(h.steps[-1])}
    if math.isfinite(h.time_to(target)):
        metrics[f"{m}_seconds_to_target"] = float(h.time_to(target))
        metrics[f"{m}_steps_to_target"] = float(h.steps_to(target))
    return row, metrics


def train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    """The default job: a Poisson PINN trained by each method in turn (same init, same
    collocation points), each method recorded as it finishes."""
    import time

    from icml.report import line_plot
    from icml_sng.pinn import PoissonPINN, mlp
    from icml_sng.train import DEFAULT_BATCH, fit_pinn

    dtype, device = _dtype(ctx, config.dtype), ctx.torch_device()
    opt_kwargs = dict(batch_size=config.batch_size,
                      boundary_batch_size=config.boundary_batch_size, sampler=config.sampler,
                      sng=config.sng, spring=config.spring,  # the option objects, as built
                      adam_lr=config.adam_lr, sgd_lr=config.sgd_lr, lbfgs_lr=config.lbfgs_lr,
                      seed=ctx.seed)
    histories = {}
    title = f"{config.dim}D Poisson PINN, relative L2 error (target {config.target:g})"
    columns = ["method", "steps", "seconds", "final rel L2", "best rel L2",
               "median rel L2 (last 10%)", f"steps to {config.target:g}",
               f"seconds to {config.target:g}"]
    for method in config.methods:
        init = ctx.seed if config.init_seed < 0 else config.init_seed
        model = mlp(config.dim, config.hidden, dtype=dtype, device=device, seed=init)
        problem = PoissonPINN(model, dim=config.dim,
                              n_interior=config.n_interior or DEFAULT_N_INTERIOR[config.dim],
                              n_boundary=config.n_boundary)
        steps = config.steps_for(method)
        histories[method] = fit_pinn(
            problem, method, steps=steps, time_limit=config.time_limit,
            eval_every=config.eval_every,
            clock=time.process_time if config.clock == "cpu" else time.perf_counter,
            progress=lambda it, m=method, n=steps: ctx.progress(it, total=n, desc=m),
            **opt_kwargs)
        h = histories[method]
        ctx.logger.info("%s: %d steps, %.2f s, rel L2 %.3g", method, h.steps[-1], h.times[-1],
                        h.final)
        row, arm = _arm(method, h, config.target)
        ctx.record(arm)
        ctx.record_row(title, columns, row)
    rows, metrics = [], {}
    for m, h in histories.items():
        row, arm = _arm(m, h, config.target)
        rows.append(row)
        metrics.update(arm)
    table = icml.Table(title, columns, rows)
    artifacts = {}
    series = {m: ([max(t, 1e-3) for t in h.times], [max(e, 1e-16) for e in h.errors])
              for m, h in histories.items()}
    if line_plot(ctx.path("convergence.png"), series, logy=True, logx=True,
                 title=f"{config.dim}D Poisson PINN", xlabel="training seconds",
                 ylabel="relative L2 error") is not None:
        artifacts["convergence"] = "convergence.png"
    k_int = config.batch_size or DEFAULT_BATCH[config.dim]
    sng, spring = config.sng, config.spring
    notes = (f"Tanh MLP {[config.dim, *config.hidden, 1]}, {config.dtype}; SNG/SPRING take "
             f"{k_int} interior points per step ({config.sampler} sampler; boundary points: "
             f"{config.boundary_batch_size or 'all'}), damping {sng.damping:g} / "
             f"{spring.damping:g} (adaptive damping: {sng.adaptive_damping} / "
             f"{spring.adaptive_damping}), SPRING momentum {spring.momentum:g}, "
             f"{sng.line_search}-point grid line search on the {sng.line_search_on} loss "
             f"(early stop: {sng.line_search_early_stop}); ENGD "
             "is the full-batch step (Levenberg-Marquardt / Gauss-Newton with line search, "
             "fixed damping).")
    return icml.RunResult(metrics=metrics, tables=[table], artifacts=artifacts, notes=notes)


def evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    """The spectral-decay study on linear least squares: SNG and SPRING vs tuned SGD."""
    from icml.report import line_plot
    from icml_sng.least_squares import make_least_squares
    from icml_sng.svs import svs_rate
    from icml_sng.train import fit_least_squares, tuned_sgd

    dtype, device = _dtype(ctx, config.dtype), ctx.torch_device()
    rows, metrics = [], {}
    curves: dict[str, tuple[list[float], list[float]]] = {"SGD (tuned)": ([], []),
                                                          "SNG": ([], []), "SPRING": ([], [])}
    for decay in ctx.progress(config.decays, desc="decays"):
        prob = make_least_squares(config.n, config.p, decay, seed=ctx.seed, dtype=dtype,
                                  device=device)
        sgd, c = tuned_sgd(prob, steps=config.steps, batch_size=config.batch_size,
                           lr_grid=config.sgd_lr_grid, seed=ctx.seed)
        sng = fit_least_squares(prob, "sng", steps=config.steps, batch_size=config.batch_size,
                                damping=config.damping, seed=ctx.seed)
        spr = fit_least_squares(prob, "spring", steps=config.steps,
                                batch_size=config.batch_size, damping=config.spring_damping,
                                momentum=config.momentum, seed=ctx.seed)
        k = min(config.batch_size, config.p)
        alpha = svs_rate(prob.A / math.sqrt(config.n), k) if config.p <= 400 else math.nan
        sig = (prob.A.double()).svd().S
        ratio = sgd.final / max(sng.final, 1e-300)
        rows.append([decay, sgd.final, c, sng.final, spr.final, ratio,
                     alpha, float((sig[-1] / sig[0]) ** 2)])
        for name, h in (("SGD (tuned)", sgd), ("SNG", sng), ("SPRING", spr)):
            curves[name][0].append(decay)
            curves[name][1].append(max(h.final, 1e-16))
        metrics[f"decay{decay:g}_sgd_rel_residual"] = float(sgd.final)
        metrics[f"decay{decay:g}_sng_rel_residual"] = float(sng.final)
        metrics[f"decay{decay:g}_spring_rel_residual"] = float(spr.final)
        metrics[f"decay{decay:g}_sgd_over_sng"] = float(ratio) if math.isfinite(ratio) else -1.0
    table = icml.Table(
        f"Least squares n={config.n}, p={config.p}, k={config.batch_size}, {config.steps} steps:"
        " final relative residual",
        ["decay", "SGD (tuned)", "SGD lr x 1/max|a_i|^2", "SNG", "SPRING", "SGD / SNG",
         "alpha_SVS (SNG rate const.)", "sigma_min^2/sigma_max^2"], rows)
    artifacts = {}
    if line_plot(ctx.path("spectral_decay.png"), curves, logy=True,
                 title="Final relative residual vs spectral decay", xlabel="decay exponent",
                 ylabel="relative residual") is not None:
        artifacts["spectral_decay"] = "spectral_decay.png"
    notes = ("sigma_i = i^-decay. SNG uses damping "
             f"{config.damping:g} and step 1 (regularised block Kaczmarz); SPRING damping "
             f"{config.spring_damping:g}, momentum {config.momentum:g}. alpha_SVS is "
             "lambda_min^+(E[Pi_S]) under squared volume sampling (closed form).")
    return icml.RunResult(metrics=metrics, tables=[table], artifacts=artifacts, notes=notes)
