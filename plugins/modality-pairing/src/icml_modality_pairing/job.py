"""The default jobs, typed: ``train`` (unimodal vs fixed vs stochastic pairing over regimes and
seeds), ``evaluate`` (the sharpness suite on a model) and ``differentiate`` (the Hessian tools
checked against finite differences and an explicit Hessian). The hooks in ``plugin.py`` call
these; torch loads inside them."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import icml
from icml_modality_pairing.config import DifferentiateConfig, EvaluateConfig, TrainConfig


def _fmt(mean: float, sd: float, digits: int = 3) -> str:
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"


def _landscapes(ctx: icml.RunContext, models: dict[str, Any], test: Any,
                config: TrainConfig | EvaluateConfig) -> tuple[dict[str, str], dict[str, float]]:
    """1-D and 2-D filter-normalised slices of each model, one plot each."""
    from icml_modality_pairing.landscape import (
        loss_landscape_1d,
        loss_landscape_2d,
        plot_landscape_1d,
        plot_landscape_2d,
    )
    from icml_modality_pairing.training import cross_entropy_loss, heldout_batches

    artifacts, metrics = {}, {}
    dev, dt = ctx.torch_device(), ctx.torch_dtype()
    batches = heldout_batches(test, device=dev, dtype=dt)
    if config.landscape_steps:
        curves = {}
        for name, m in ctx.progress(list(models.items()), desc="1-D loss slices"):
            xs, ys = loss_landscape_1d(m, cross_entropy_loss, batches,
                                       span=config.landscape_span, steps=config.landscape_steps,
                                       seed=ctx.seed)
            curves[name] = (xs, ys)
            metrics[f"slice_rise_{name}"] = (ys[0] + ys[-1]) / 2 - ys[len(ys) // 2]
        if plot_landscape_1d(ctx.path("landscape_1d.png"), curves) is not None:
            artifacts["landscape_1d"] = "landscape_1d.png"
    if config.surface_steps:
        surfaces = {}
        for name, m in ctx.progress(list(models.items()), desc="2-D loss slices"):
            surfaces[name] = loss_landscape_2d(m, cross_entropy_loss, batches,
                                               span=config.landscape_span,
                                               steps=config.surface_steps, seed=ctx.seed)
        if plot_landscape_2d(ctx.path("landscape_2d.png"), surfaces) is not None:
            artifacts["landscape_2d"] = "landscape_2d.png"
    return artifacts, metrics


def train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    """The default job: every regime x seed x arm, recorded as each arm finishes; a diverged
    arm is a row of NaN marked diverged."""
    from icml_modality_pairing.config import Settings
    from icml_modality_pairing.experiment import parse_regime, run_regimes, summarize, wins
    from icml_modality_pairing.models import save_model
    from icml_modality_pairing.training import ARMS

    for r in config.regimes:
        try:
            parse_regime(r)
        except ValueError as exc:
            raise icml.ConfigError(f"config key 'regimes': {exc}") from None
    if not config.regimes:
        raise icml.ConfigError("config key 'regimes' is empty: give e.g. ['2000x15']")
    if config.dataset == "digits":
        from icml_modality_pairing.data import DIGITS_N

        big = [r for r in config.regimes if not 10 <= parse_regime(r)[0] <= DIGITS_N - 1]
        if big:
            raise icml.ConfigError(f"config key 'regimes': {big} with dataset=digits; n_train "
                                   f"must lie in [10, {DIGITS_N - 1}] (1797 images)")
    bad = [a for a in config.arms if a not in ARMS]
    if bad or not config.arms:
        raise icml.ConfigError(f"config key 'arms': {bad or 'empty'}; choose from {list(ARMS)}")
    keys = ("accuracy", "lambda_max", "trace", "eps_sharpness", "gauss_sharpness", "train_s")
    seeds = [ctx.seed + k for k in range(config.seeds)]
    first = (config.regimes[0], seeds[0])

    def status(r: Any) -> str:
        return "diverged" if r.metrics.get("diverged") else "ok"

    runs = run_regimes(config.regimes, seeds, config, arms=config.arms,
                       device=ctx.torch_device(), dtype=ctx.torch_dtype(),
                       progress=lambda j: ctx.progress(j, desc="train arms (regime × seed × arm)"),
                       keep=lambda r: (r.regime, r.seed) == first and not r.metrics["diverged"],
                       on_run=lambda r: ctx.record_row(
                           "arms (as they finished)", ["regime", "seed", "arm", "status", *keys],
                           [r.regime, r.seed, r.arm, status(r),
                            *(r.metrics.get(k) for k in keys)]))
    n_diverged = {(r.regime, r.arm): 0 for r in runs}
    for r in runs:
        n_diverged[(r.regime, r.arm)] += int(bool(r.metrics["diverged"]))
    cols = ["regime", "arm", "test acc", "λ_max", "trace", "ε-sharp", "Gauss ΔL", "train s"]
    stats = {k: summarize(runs, k) for k in keys}
    rows, metrics = [], {}
    for regime in config.regimes:
        for arm in config.arms:
            key = (regime, arm)
            label = arm if not n_diverged[key] else \
                f"{arm} (diverged: {n_diverged[key]}/{config.seeds} seeds)"
            rows.append([regime, label, _fmt(*stats["accuracy"][key]),
                         _fmt(*stats["lambda_max"][key], 2), _fmt(*stats["trace"][key], 1),
                         _fmt(*stats["eps_sharpness"][key], 4),
                         _fmt(*stats["gauss_sharpness"][key], 4),
                         f"{stats['train_s'][key][0]:.1f}"])
            for k in keys:
                metrics[f"{regime}/{arm}/{k}_mean"] = stats[k][key][0]
                metrics[f"{regime}/{arm}/{k}_std"] = stats[k][key][1]
    tables = [icml.Table(f"unimodal vs fixed vs stochastic pairing (mean ± std over "
                         f"{config.seeds} seeds; sharpness on {config.n_test} held-out samples)",
                         cols, rows)]
    if {"fixed", "stochastic"} <= set(config.arms):
        wrows = []
        for regime in config.regimes:
            wa = wins(runs, "accuracy", "stochastic", "fixed", regime)
            wl = wins(runs, "lambda_max", "stochastic", "fixed", regime, lower=True)
            metrics[f"{regime}/stochastic_beats_fixed_accuracy_seeds"] = wa[0]
            metrics[f"{regime}/stochastic_flatter_than_fixed_seeds"] = wl[0]
            wrows.append([regime, f"{wa[0]}/{wa[1]}", f"{wl[0]}/{wl[1]}"])
        tables.append(icml.Table("stochastic vs fixed pairing, paired by seed",
                                 ["regime", "higher accuracy", "lower λ_max"], wrows))
    kept = {r.arm: r for r in runs if r.model is not None}
    artifacts: dict[str, str] = {}
    if kept:
        test = next(iter(kept.values())).test
        arts, slice_metrics = _landscapes(ctx, {a: r.model for a, r in kept.items()}, test,
                                          config)
        artifacts.update(arts)
        metrics.update({f"{first[0]}/{k}": v for k, v in slice_metrics.items()})
        if config.save_model and "stochastic" in kept:
            n_train, _ = parse_regime(first[0])
            settings = {f.name: getattr(config, f.name) for f in fields(Settings)}
            save_model(kept["stochastic"].model.cpu().float(), ctx.path("model.pt"),
                       data={"n_train": n_train, "seed": first[1], "settings": settings})
            artifacts["model"] = "model.pt"
    notes = ("Reconstructed setting (no official code): synthetic 2-modality Gaussian data, "
             "conditionally independent given the class, additive late fusion, SGD. λ_max, trace "
             "and sharpness are measured on held-out data. Compare flatness within one "
             "architecture (fixed vs stochastic); the unimodal model has fewer parameters, so "
             "its raw λ_max is not comparable (arm const_b is the architecture-matched "
             "control). Expect stochastic pairing to win in the moderate "
             "regime and to lose in the small-data, long-training one.")
    unconverged = sum(1 for r in runs if not r.metrics["diverged"]
                      and not r.metrics["lambda_max_converged"])
    diverged_runs = sum(n_diverged.values())
    if diverged_runs:
        metrics["diverged_runs"] = diverged_runs
        notes += (f" **{diverged_runs} of {len(runs)} runs diverged** (non-finite training loss "
                  f"or weights at lr={config.lr:g}): their measurements are NaN.")
    metrics["lambda_max_unconverged_runs"] = unconverged
    if unconverged:
        notes += (f" **λ_max did not converge to tol={config.tol:g} in {unconverged} of "
                  f"{len(runs)} runs** (power_iters={config.power_iters}): raise power_iters.")
    return icml.RunResult(metrics=metrics, tables=tables, artifacts=artifacts, notes=notes)


def _load_or_train(ctx: icml.RunContext, path: str, *, n_train: int, epochs: int, n_test: int,
                   width: int = 64, hidden: int = 64) -> tuple[Any, Any, str]:
    """The model at ``path`` with its held-out data, or a freshly trained stochastic model."""
    from icml_modality_pairing.config import Settings
    from icml_modality_pairing.experiment import make_data, run_arm
    from icml_modality_pairing.models import load_model

    if path:
        try:
            model, extra = load_model(path)
        except ValueError as exc:  # one line naming the file and what was expected
            raise icml.ConfigError(f"config key 'model_path': cannot load the model: {exc}") \
                from None
        data = extra.get("data", {})
        s = Settings(**{k: v for k, v in data.get("settings", {}).items()
                        if k in {f.name for f in fields(Settings)}})
        s.n_test = n_test
        _, test = make_data(int(data.get("n_train", n_train)), s, int(data.get("seed", 0)))
        return model.to(ctx.torch_device(), ctx.torch_dtype()).eval(), test, path
    s = Settings(n_test=n_test, width=width, hidden=hidden)
    with ctx.step("train a stochastic-pairing model"):
        run = run_arm("stochastic", n_train, epochs, ctx.seed, s, device=ctx.torch_device(),
                      dtype=ctx.torch_dtype(), keep_model=True)
    return run.model, run.test, f"trained here ({n_train}x{epochs}, seed {ctx.seed})"


def evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    """The sharpness suite on a saved (or freshly trained) model."""
    import time

    from icml_modality_pairing.hessian import hessian_trace, lanczos, power_iteration
    from icml_modality_pairing.objective import Objective
    from icml_modality_pairing.sharpness import epsilon_sharpness, gaussian_perturbation_sharpness
    from icml_modality_pairing.training import accuracy, cross_entropy_loss, heldout_batches

    model, test, source = _load_or_train(ctx, config.model_path, n_train=config.n_train,
                                         epochs=config.epochs, n_test=config.n_test)
    obj = Objective(model, cross_entropy_loss,
                    heldout_batches(test, device=ctx.torch_device(), dtype=ctx.torch_dtype()))
    rows, metrics = [], {"n_params": obj.dim,
                         "accuracy": accuracy(model, test, device=ctx.torch_device(),
                                              dtype=ctx.torch_dtype())}

    def timed(name: str, fn: Any, fmt: Any) -> Any:
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        value, detail = fmt(out)
        rows.append([name, value, detail, round(1e3 * dt, 1)])
        metrics[f"{name}_ms"] = 1e3 * dt
        return out

    with ctx.step("sharpness suite"):
        top = timed("lambda_max (power)", lambda: power_iteration(
            obj, iters=config.power_iters, tol=config.tol, seed=ctx.seed),
            lambda r: (round(r.eigenvalue, 5), f"{r.iterations} HVPs, converged={r.converged}"))
        metrics["lambda_max"] = top.eigenvalue
        if config.lanczos_iters:
            lz = timed("lambda_max (Lanczos)", lambda: lanczos(
                obj, iters=config.lanczos_iters, tol=config.tol, seed=ctx.seed),
                lambda r: (round(r.eigenvalue, 5), f"{r.iterations} HVPs, "
                           f"converged={r.converged}"))
            metrics["lambda_max_lanczos"] = lz.eigenvalue
        if config.trace_samples:
            tr = timed("trace (Hutchinson)", lambda: hessian_trace(
                obj, n_samples=config.trace_samples, seed=ctx.seed),
                lambda r: (round(r.trace, 3), f"± {r.stderr:.3f} (stderr, {r.n_samples} probes)"))
            metrics["trace"], metrics["trace_stderr"] = tr.trace, tr.stderr
        eps = timed("eps-sharpness", lambda: epsilon_sharpness(obj, rho=config.rho),
                    lambda v: (round(v, 6), f"rho={config.rho:g}"))
        metrics["eps_sharpness"] = eps
        gm = timed("Gaussian sharpness", lambda: gaussian_perturbation_sharpness(
            obj, sigma=config.sigma, n=config.gauss_samples, seed=ctx.seed),
            lambda r: (round(r[0], 6), f"± {r[1]:.6f}, sigma={config.sigma:g}, "
                       f"{config.gauss_samples} draws"))
        metrics["gauss_sharpness"], metrics["gauss_stderr"] = gm
    artifacts, slice_metrics = _landscapes(ctx, {"model": model}, test, config)
    metrics.update(slice_metrics)
    table = icml.Table(f"sharpness suite on {len(test)} held-out samples ({obj.dim} parameters; "
                       f"model: {source})", ["measure", "value", "detail", "ms"], rows)
    return icml.RunResult(metrics=metrics, tables=[table], artifacts=artifacts,
                          notes="Held-out cross-entropy; power iteration finds the dominant "
                                "eigenvalue, Lanczos the largest algebraic one.")


def differentiate(ctx: icml.RunContext, config: DifferentiateConfig) -> icml.RunResult:
    """HVPs, power iteration, Lanczos and Hutchinson checked against FD and eigvalsh."""
    import time

    import torch

    from icml_modality_pairing.hessian import hessian_trace, lanczos, power_iteration
    from icml_modality_pairing.objective import Objective
    from icml_modality_pairing.training import cross_entropy_loss, heldout_batches

    dt = ctx.torch_dtype()
    if config.model_path:
        model, test, source = _load_or_train(ctx, config.model_path, n_train=config.n_train,
                                             epochs=max(config.epochs, 1),
                                             n_test=config.n_test)
    else:
        from icml_modality_pairing.config import Settings
        from icml_modality_pairing.experiment import make_data
        from icml_modality_pairing.training import build_arm_model, train_model

        train, test = make_data(config.n_train, Settings(n_test=config.n_test), ctx.seed)
        torch.manual_seed(ctx.seed)
        model = build_arm_model("stochastic", train, width=config.width, hidden=config.hidden)
        if config.epochs:
            train_model(model, train, epochs=config.epochs, seed=ctx.seed,
                        device=ctx.torch_device(), dtype=dt)
        model = model.to(ctx.torch_device(), dt).eval()
        source = f"small late fusion, width {config.width}, {config.epochs} epochs"
    obj = Objective(model, cross_entropy_loss,
                    heldout_batches(test, device=ctx.torch_device(), dtype=dt),
                    backend=config.backend)
    rows, metrics = [], {"n_params": obj.dim}

    def timed(fn: Any) -> tuple[Any, float]:
        t0 = time.perf_counter()
        out = fn()
        return out, 1e3 * (time.perf_counter() - t0)

    g = torch.Generator().manual_seed(ctx.seed)
    v = torch.randn(obj.dim, generator=g, dtype=torch.float64)
    v = (v / v.norm()).to(obj.theta0)
    hv, t_hvp = timed(lambda: obj.hvp(v))
    # finite differences need float64: check a float64 copy, and the run's HVP against it
    import copy

    batches64 = [{k: (t.double() if t.is_floating_point() else t) for k, t in b.items()}
                 for b in heldout_batches(test, device=ctx.torch_device())]
    obj64 = Objective(copy.deepcopy(model).double(), cross_entropy_loss, batches64)
    v64 = v.double()
    hv64 = obj64.hvp(v64)
    h = config.fd_step
    fd = (obj64.grad(obj64.theta0 + h * v64) - obj64.grad(obj64.theta0 - h * v64)) / (2 * h)
    rel = lambda a, b: float((a.double() - b.double()).norm()  # noqa: E731
                             / b.double().norm().clamp_min(1e-30))
    metrics["hvp_vs_fd_rel"] = rel(hv64, fd)
    metrics["hvp_vs_float64_rel"] = rel(hv, hv64)
    rows.append(["HVP vs central FD of gradients (float64)", f"{metrics['hvp_vs_fd_rel']:.2e}",
                 f"step {h:g}", ""])
    rows.append([f"HVP ({str(dt).replace('torch.', '')}) vs float64 HVP",
                 f"{metrics['hvp_vs_float64_rel']:.2e}", "same model and data",
                 round(t_hvp, 2)])
    top, t_pow = timed(lambda: power_iteration(obj, iters=config.power_iters, tol=config.tol,
                                               seed=ctx.seed))
    lz, t_lz = timed(lambda: lanczos(obj, iters=config.lanczos_iters, tol=config.tol,
                                     seed=ctx.seed))
    tr, t_tr = timed(lambda: hessian_trace(obj, n_samples=config.trace_samples, seed=ctx.seed))
    metrics.update(lambda_max_power=top.eigenvalue, lambda_max_lanczos=lz.eigenvalue,
                   trace_hutchinson=tr.trace, trace_stderr=tr.stderr,
                   power_iterations=top.iterations, lanczos_iterations=lz.iterations)
    exact = None
    if obj.dim <= config.max_explicit:
        H, t_h = timed(obj.hessian)
        ev = torch.linalg.eigvalsh(H.double())
        dominant = float(ev[ev.abs().argmax()])
        exact = {"max": float(ev[-1]), "dominant": dominant, "trace": float(H.trace())}
        metrics.update(lambda_max_eigvalsh=exact["max"], trace_exact=exact["trace"],
                       hvp_vs_explicit_rel=rel(hv, H @ v),
                       power_abs_error=abs(top.eigenvalue - dominant),
                       lanczos_abs_error=abs(lz.eigenvalue - exact["max"]))
        rows.append(["HVP vs explicit H @ v", f"{metrics['hvp_vs_explicit_rel']:.2e}",
                     f"explicit Hessian {obj.dim}² in {t_h:.0f} ms", round(t_hvp, 2)])
    rows.append(["λ_max power", f"{top.eigenvalue:.6f}",
                 f"{top.iterations} HVPs" + (f", |err| {metrics['power_abs_error']:.1e} vs "
                                             "eigvalsh" if exact else ""), round(t_pow, 1)])
    rows.append(["λ_max Lanczos", f"{lz.eigenvalue:.6f}",
                 f"{lz.iterations} HVPs" + (f", |err| {metrics['lanczos_abs_error']:.1e} vs "
                                            "eigvalsh" if exact else ""), round(t_lz, 1)])
    rows.append(["trace Hutchinson", f"{tr.trace:.4f} ± {tr.stderr:.4f}",
                 f"{tr.n_samples} probes" + (f", exact {exact['trace']:.4f}" if exact else ""),
                 round(t_tr, 1)])
    table = icml.Table(f"Hessian of the held-out loss ({obj.dim} parameters; {source}; "
                       f"backend {config.backend})", ["quantity", "value", "check", "ms"], rows)
    return icml.RunResult(metrics=metrics, tables=[table],
                          notes="Power iteration returns the dominant (largest-magnitude) "
                                "eigenvalue, compared with eigvalsh's; Lanczos the largest.")
