"""The default jobs, typed: ``differentiate`` (dXPP vs the KKT backwards on one family, a
beta sweep, the torch layer against the NumPy path) and ``evaluate`` (every family and
end-to-end portfolio training). The hooks in ``plugin.py`` call these; numpy, scipy and torch
load inside them."""

from __future__ import annotations

import statistics
from typing import Any

import icml
from icml_dxpp.config import DifferentiateConfig, EvaluateConfig


def _simplex_closed_form(prob: Any) -> Any:
    from icml_dxpp.problems import simplex_solution, simplex_vjp

    exact_x = simplex_solution(-prob.q)
    return lambda sol, g: simplex_vjp(exact_x, g)


def _blas(threads: int) -> Any:
    from contextlib import nullcontext

    if threads <= 0:
        return nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: timings then use the BLAS default
        return nullcontext()
    return threadpool_limits(limits=threads, user_api="blas")


def _ms(s: float) -> float:
    return round(1e3 * s, 3)


def _row(r: Any) -> list[Any]:
    t = r.times
    ratio = t["kkt-reduced"] / t["dxpp"] if t["dxpp"] > 0 else float("nan")
    err = r.errors.get("dxpp", float("nan"))
    return [r.family, r.size, r.n, r.m, r.p, r.active, _ms(r.forward_s), _ms(t["dxpp"]),
            _ms(t["kkt-reduced"]), _ms(t["kkt-full"]), round(ratio, 2), float(f"{err:.3g}")]


_COLUMNS = ["family", "size", "n", "m", "p", "active", "fwd ms", "dXPP ms", "KKTr ms",
            "KKTf ms", "KKTr/dXPP", "dXPP err"]


def _merge(rows: list[Any]) -> Any:
    """Worst error and median times over the seeds of one size."""
    first = rows[0]
    first.forward_s = statistics.median(r.forward_s for r in rows)
    first.times = {k: statistics.median(r.times[k] for r in rows) for k in first.times}
    first.errors = {k: max(r.errors[k] for r in rows) for k in first.errors}
    first.active = max(r.active for r in rows)
    return first


def _load_npz(path: str) -> Any:
    from pathlib import Path

    import numpy as np

    from icml_dxpp.qp import make_problem

    p = Path(path)
    if not p.is_file():
        raise icml.ConfigError(f"config key 'problem': {path!r} does not exist; pass a .npz "
                               "file with arrays Q, q (and optionally G, h, A, b)")
    data = np.load(p)
    missing = [k for k in ("Q", "q") if k not in data]
    if missing:
        raise icml.ConfigError(f"config key 'problem': {path!r} lacks arrays {missing}; save "
                               "it with np.savez(path, Q=Q, q=q, G=G, h=h, A=A, b=b)")
    return make_problem(*(data[k] if k in data else None for k in ("Q", "q", "G", "h", "A", "b")))


def differentiate(ctx: icml.RunContext, config: DifferentiateConfig) -> icml.RunResult:
    """The default job: dXPP vs the KKT backwards per size, a beta sweep, the torch layer."""
    from icml_dxpp.benchmark import beta_sweep, compare_backwards
    from icml_dxpp.forward import check_solver, solve_qp
    from icml_dxpp.problems import make_family

    check_solver(config.solver)
    pen = config.penalty
    ref = f"kkt-{config.kkt_mode}"
    if config.problem:
        jobs = [("file", 0, s) for s in range(1)]
    else:
        if not config.sizes:
            raise icml.ConfigError("config key 'sizes' is empty: give at least one size")
        jobs = [(config.family, n, s) for n in config.sizes for s in range(config.problems)]
    by_size: dict[int, list[Any]] = {}
    last = None
    with _blas(config.blas_threads):
        for family, size, k in ctx.progress(jobs, desc="solve + differentiate"):
            prob = _load_npz(config.problem) if family == "file" else \
                make_family(family, size, seed=ctx.seed * 1000 + k)
            cf = _simplex_closed_form(prob) if family == "simplex" else None
            row = compare_backwards(prob, family, size, solver=config.solver, tol=config.tol,
                                    penalty=pen, reference=ref, repeats=config.repeats,
                                    seed=ctx.seed + k, closed_form=cf, polish=config.polish,
                                    step=ctx.step)
            by_size.setdefault(size, []).append(row)
            ctx.record_row("finished problems (one row per seed; partial results)",
                           ["seed", *_COLUMNS], [k, *_row(row)])
            last = prob
    rows = [_merge(v) for v in by_size.values()]
    table = icml.Table(f"dXPP vs KKT backward ({rows[0].family}; error vs {ref} KKT, "
                       f"beta={config.penalty.beta:g})", _COLUMNS, [_row(r) for r in rows])
    tables = [table]
    worst = max(r.errors.get("dxpp", 0.0) for r in rows)
    big = rows[-1]
    metrics = {"max_rel_error_dxpp": worst,
               "largest_n": float(big.n),
               "largest_dxpp_backward_s": big.times["dxpp"],
               "largest_kkt_reduced_backward_s": big.times["kkt-reduced"],
               "largest_kkt_full_backward_s": big.times["kkt-full"],
               "largest_forward_s": big.forward_s}
    if big.closed_form_error is not None:
        metrics["closed_form_error_dxpp"] = max(r.closed_form_error for r in rows)
    artifacts = {}
    if config.betas and last is not None:
        with ctx.step(f"beta sweep (n = {last.n}, {len(config.betas)} betas)"):
            sol = solve_qp(last, config.solver, config.tol, pen.active_tol,
                           polish_solution=config.polish)
            sweep = beta_sweep(last, sol, list(config.betas), seed=ctx.seed, penalty=pen)
        tables.append(icml.Table(f"beta sweep (n = {last.n}): dXPP error vs reduced KKT",
                                 ["beta", "rel err"],
                                 [[b, float(f"{e:.3g}")] for b, e in sweep]))
        for b, e in sweep:
            metrics[f"rel_error_beta_{b:g}"] = e
        from icml.report import line_plot

        png = line_plot(ctx.path("beta_sweep.png"),
                        {"dXPP": ([b for b, _ in sweep], [max(e, 1e-16) for _, e in sweep])},
                        title="dXPP gradient error vs smoothing", xlabel="beta",
                        ylabel="relative error vs KKT", logx=True, logy=True)
        if png is not None:
            artifacts["beta_sweep"] = "beta_sweep.png"
    with ctx.step("torch layer vs the NumPy path"):
        metrics.update(_layer_check(ctx, last, config))
    notes = (f"dXPP solves one SPD n×n system; the KKT references solve (n+|active|+p) "
             f"(reduced) or (n+m+p) (full) systems. Errors are relative, over all six "
             f"gradients, against the {ref} KKT backward at the same forward solution "
             f"({config.solver}, tol {config.tol or 'default'}). Times are the fastest of "
             f"{config.repeats} on this machine.")
    return icml.RunResult(metrics=metrics, tables=tables, artifacts=artifacts, notes=notes)


def _layer_check(ctx: icml.RunContext, prob: Any, config: DifferentiateConfig
                 ) -> dict[str, float]:
    """Run the torch layer once on ctx's device/dtype and compare ∂ℓ/∂q with the NumPy path."""
    if prob is None or prob.sparse:
        return {}
    import numpy as np
    import torch

    from icml_dxpp.layer import differentiate as numpy_differentiate
    from icml_dxpp.layer import dxpp_solve

    dev, dt = ctx.torch_device(), ctx.torch_dtype()
    if dt not in (torch.float32, torch.float64):
        dt = torch.float32
    T = [None if M.shape[0] == 0 else torch.as_tensor(M, dtype=dt, device=dev)
         for M in (prob.Q, prob.q, prob.G, prob.h, prob.A, prob.b)]
    for i in (2, 4):
        if T[i] is None:
            T[i + 1] = None
    q = T[1].clone().requires_grad_(True)
    pen = config.penalty
    x = dxpp_solve(T[0], q, *T[2:], solver=config.solver, tol=config.tol, penalty=pen).x
    x.sum().backward()
    _, grads, _ = numpy_differentiate(prob, np.ones(prob.n), solver=config.solver,
                                      tol=config.tol, penalty=pen)
    diff = float(np.abs(q.grad.detach().cpu().double().numpy() - grads["q"]).max())
    return {"layer_vs_numpy_grad_q_maxdiff": diff}


def evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    """The benchmark families and end-to-end portfolio training, dXPP vs KKT."""
    from icml.report import line_plot
    from icml_dxpp.benchmark import compare_backwards, portfolio_training
    from icml_dxpp.forward import check_solver
    from icml_dxpp.problems import make_family

    check_solver(config.solver)
    pen = config.penalty
    jobs = ([("random", n) for n in config.random_sizes] +
            [("simplex", n) for n in config.simplex_sizes] +
            [("chain", d) for d in config.chain_dims])
    rows, cf_rows = [], []
    with _blas(config.blas_threads):
        for family, size in ctx.progress(jobs, desc="benchmark families"):
            prob = make_family(family, size, seed=ctx.seed)
            cf = _simplex_closed_form(prob) if family == "simplex" else None
            r = compare_backwards(prob, family, size, solver=config.solver, tol=config.tol,
                                  penalty=pen, repeats=config.repeats, seed=ctx.seed,
                                  closed_form=cf, polish=config.polish, step=ctx.step)
            rows.append(r)
            ctx.record_row("finished problems (partial results)", _COLUMNS, _row(r))
            if r.closed_form_error is not None:
                cf_rows.append([size, float(f"{r.closed_form_error:.3g}")])
    tables, metrics, artifacts = [], {}, {}
    if rows:
        tables.append(icml.Table(f"dXPP vs KKT backward (beta={config.penalty.beta:g}, "
                                 f"{config.solver})", _COLUMNS, [_row(r) for r in rows]))
        metrics["max_rel_error_dxpp"] = max(r.errors["dxpp"] for r in rows)
        for r in rows:
            key = f"{r.family}_{r.size}"
            metrics[f"{key}_dxpp_backward_s"] = r.times["dxpp"]
            metrics[f"{key}_kkt_reduced_over_dxpp"] = r.times["kkt-reduced"] / r.times["dxpp"]
    if cf_rows:
        tables.append(icml.Table("simplex projection: dXPP ∂q vs closed form",
                                 ["n", "rel err"], cf_rows))
    if config.portfolio_steps:
        curves = {}
        with ctx.step("portfolio training (dXPP and KKT gradients)"):
            for method in ("dxpp", "kkt"):
                curves[method] = portfolio_training(method, steps=config.portfolio_steps,
                                                    seed=ctx.seed, solver=config.solver,
                                                    beta=config.penalty.beta)["losses"]
        gap = max(abs(a - b) for a, b in zip(curves["dxpp"], curves["kkt"], strict=False))
        tables.append(icml.Table("multi-period portfolio (T=5, k=10, n=50), trained end to end",
                                 ["gradients", "initial loss", "final loss"],
                                 [[m, float(f"{c[0]:.5g}"), float(f"{c[-1]:.5g}")]
                                  for m, c in curves.items()]))
        metrics.update(portfolio_final_loss_dxpp=curves["dxpp"][-1],
                       portfolio_final_loss_kkt=curves["kkt"][-1],
                       portfolio_max_curve_gap=gap)
        steps = list(range(1, config.portfolio_steps + 1))
        png = line_plot(ctx.path("portfolio_loss.png"),
                        {m: (steps, c) for m, c in curves.items()},
                        title="portfolio training loss", xlabel="step", ylabel="loss")
        if png is not None:
            artifacts["portfolio_loss"] = "portfolio_loss.png"
    if not tables:
        raise icml.ConfigError("every benchmark family is empty: set random_sizes, "
                               "simplex_sizes, chain_dims or portfolio_steps")
    return icml.RunResult(metrics=metrics, tables=tables, artifacts=artifacts,
                          notes="Ratios > 1 in 'KKT-red/dXPP time' mean dXPP's backward is "
                                "faster. Errors are relative to the reduced-KKT backward.")
