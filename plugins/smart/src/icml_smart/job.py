"""The default jobs behind the hooks: generate simulations, train SMART and its baselines at
matched parameter counts, and report errors, chunked inference and gradients."""

from __future__ import annotations

import time
from typing import Any

import icml
from icml_smart.config import DifferentiateConfig, EvaluateConfig, InferConfig, TrainConfig

#: any job config: they share the data, model and training sections
JobConfig = TrainConfig | InferConfig | EvaluateConfig | DifferentiateConfig

ARM_LABELS = {"smart": "SMART (cross-layer decoder)", "last_layer": "last-layer decoder "
              "(ablation)", "concat": "all-layers decoder", "pointnet": "PointNet-MLP",
              "transolver": "Transolver-style (ours)",
              "free_stream": "free stream (trivial: u = U e, C_p = 0)"}


def make_data(cfg: JobConfig, seed: int) -> tuple[Any, Any]:
    from icml_smart.data import FlowRanges, PotentialFlowDataset

    r = FlowRanges(aspect=(cfg.min_aspect, 1.0),
                   gamma=(-cfg.max_circulation, cfg.max_circulation))
    kw = dict(n_boundary=cfg.n_boundary, n_queries=cfg.n_queries, kind=cfg.case, ranges=r)
    return (PotentialFlowDataset(cfg.n_train, seed=seed, **kw),
            PotentialFlowDataset(cfg.n_test, seed=seed + 10_000, **kw))


def smart_config(cfg: JobConfig, data: Any, decoder: str = "cross_layer") -> Any:
    """The model's config: the ``model.*`` section as it is, with the data's dimensions."""
    from icml_smart.configuration_smart import SMARTConfig

    return SMARTConfig.from_config(cfg.model, space_dim=data.space_dim,
                                   param_dim=data.param_dim, out_dim=data.out_dim,
                                   decoder=decoder)


def build_arm(name: str, cfg: JobConfig, data: Any, seed: int) -> Any:
    """One model of the comparison; baselines get the width matching SMART's parameter count."""
    import torch

    from icml_smart.baselines import (
        BaselineConfig,
        PointNetMLP,
        TransolverLite,
        num_params,
        width_for,
    )
    from icml_smart.modeling_smart import SMARTModel

    torch.manual_seed(seed)
    if name in ("smart", "last_layer", "concat"):
        decoder = {"smart": "cross_layer", "last_layer": "last_layer", "concat": "concat"}[name]
        return SMARTModel(smart_config(cfg, data, decoder))
    target = num_params(SMARTModel(smart_config(cfg, data)))
    cls = {"pointnet": PointNetMLP, "transolver": TransolverLite}[name]
    kw = dict(space_dim=data.space_dim, param_dim=data.param_dim, out_dim=data.out_dim,
              fourier_features=cfg.model.fourier_features, max_freq=cfg.model.max_freq,
              coord_scale=cfg.model.coord_scale, depth=cfg.model.depth, heads=cfg.model.heads)
    width = width_for(cls, target, **kw)
    torch.manual_seed(seed)
    return cls(BaselineConfig(dim=width, **kw))


def _train(ctx: icml.RunContext, cfg: JobConfig, name: str, train: Any) -> tuple[Any, Any]:
    from icml_smart.training import train_surrogate

    model = build_arm(name, cfg, train, ctx.seed)
    model.to(device=ctx.torch_device())
    stats = train_surrogate(model, train, steps=cfg.steps, batch_size=cfg.batch_size,
                            lr=cfg.lr, query_subsample=cfg.query_subsample,
                            surface_weight=cfg.surface_weight, seed=ctx.seed,
                            device=ctx.torch_device(),
                            progress=lambda it: ctx.progress(it, desc=f"training {name}"))
    return model, stats


def free_stream_predictor(space_dim: int) -> Any:
    """The trivial baseline: the undisturbed free stream everywhere (u/U = e, C_p = 0)."""
    import torch

    class FreeStream(torch.nn.Module):
        def predict(self, geometry: Any, params: Any, queries: Any, chunk_size: int = 0) -> Any:
            e = params[:, 1:1 + space_dim]
            Q = queries.shape[1]
            return torch.cat([e[:, None].expand(-1, Q, -1),
                              queries.new_zeros(queries.shape[0], Q, 1)], -1)

    return FreeStream()


def _error_rows(results: dict[str, dict[str, Any]], channels: list[str]) -> list[list[Any]]:
    ref = results.get("smart", {}).get("rel_l2")
    rows = []
    for name, r in results.items():
        rows.append([ARM_LABELS.get(name, name), r.get("params", 0), r.get("train_s", 0.0)]
                    + list(r["rel_l2_per_channel"]) + [r["rel_l2"], r["surface_cp_rel_l2"],
                                                       r["drag_mae"], r.get("lift_mae", "-"),
                                                       r["rel_l2"] / ref if ref else "-"])
    return rows


def _error_columns(channels: list[str]) -> list[str]:
    return (["model", "params", "train s"] + [f"rel-L2 {c}" for c in channels]
            + ["rel-L2 mean", "surface C_p rel-L2", "C_D MAE", "C_L MAE", "error vs SMART"])


def train_arms(ctx: icml.RunContext, cfg: TrainConfig) -> tuple[dict, dict, Any, Any]:
    from icml_smart.baselines import num_params
    from icml_smart.training import evaluate_surrogate

    with ctx.step("generating simulations"):
        train, test = make_data(cfg, ctx.seed)
    models, results = {}, {}
    for name in cfg.models:
        model, stats = _train(ctx, cfg, name, train)
        ev = evaluate_surrogate(model, test, device=ctx.torch_device())
        results[name] = {**ev, "params": num_params(model), "train_s": stats.seconds,
                         "final_loss": sum(stats.losses[-20:]) / len(stats.losses[-20:])}
        models[name] = model
        ctx.record(_metrics({name: results[name]}))  # each trained arm is kept at once
    if cfg.case != "laplace":
        results["free_stream"] = {**evaluate_surrogate(free_stream_predictor(train.space_dim),
                                                       test), "params": 0, "train_s": 0.0}
    return models, results, train, test


def _metrics(results: dict[str, dict[str, Any]], prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for name, r in results.items():
        for k in ("rel_l2", "surface_cp_rel_l2", "drag_mae", "lift_mae", "train_s", "params"):
            if k in r:
                out[f"{prefix}{name}_{k}"] = float(r[k])
    return out


def train_job(ctx: icml.RunContext, cfg: TrainConfig) -> icml.RunResult:
    from icml_smart.plots import field_plot
    from icml_smart.training import channel_names

    models, results, train, test = train_arms(ctx, cfg)
    channels = channel_names(train.space_dim)
    metrics = _metrics(results)
    artifacts: dict[str, str] = {}
    if "smart" in models:
        models["smart"].save_pretrained(ctx.path("smart_model"))
        artifacts["model"] = "smart_model"
        if train.space_dim == 2:
            png = field_plot(ctx.path("fields.png"), models["smart"], test, 0,
                             resolution=cfg.plot_resolution,
                             others={ARM_LABELS[k]: v for k, v in models.items() if k != "smart"})
            if png is not None:
                artifacts["field plot"] = png.name
    notes = _claim_notes(results)
    table = icml.Table(f"Test error on {len(test)} held-out {cfg.case} cases ({cfg.steps} steps "
                       "each, matched parameters)", _error_columns(channels),
                       _error_rows(results, channels))
    return icml.RunResult(metrics=metrics, tables=[table], artifacts=artifacts, notes=notes)


def _claim_notes(results: dict[str, dict[str, Any]]) -> str:
    if "smart" not in results:
        return ""
    s = results["smart"]["rel_l2"]
    parts = []
    for other in ("last_layer", "pointnet", "transolver"):
        if other in results:
            o = results[other]["rel_l2"]
            verdict = "SMART better" if s < o else "SMART not better"
            parts.append(f"{ARM_LABELS[other]}: {o:.4f} ({verdict}, ratio {o / s:.2f})")
    return (f"SMART mean rel-L2 {s:.4f}; " + "; ".join(parts) + ". One seed: see the README's "
            "benchmark over seeds before reading a margin as an effect.")


def evaluate_job(ctx: icml.RunContext, cfg: EvaluateConfig) -> icml.RunResult:
    """Train the arms, then evaluate in distribution, at 4x denser queries than training, and
    on out-of-distribution thinner ellipses."""
    import dataclasses

    from icml_smart.training import channel_names, evaluate_surrogate

    models, results, train, test = train_arms(ctx, cfg)
    channels = channel_names(train.space_dim)
    tables = [icml.Table("In distribution", _error_columns(channels),
                         _error_rows(results, channels))]
    metrics = _metrics(results)
    variants = {"dense": dataclasses.replace(cfg, n_queries=4 * cfg.n_queries, n_train=1)}
    if cfg.case == "ellipse":
        variants["ood_thin"] = dataclasses.replace(cfg, min_aspect=max(cfg.min_aspect / 2, 0.05),
                                                   n_train=1)
    for tag, vcfg in variants.items():
        _, vtest = make_data(vcfg, ctx.seed + 77)
        if tag == "ood_thin":  # only the thinner-than-training ellipses
            keep = [i for i, b in enumerate(vtest.bodies) if b.b / b.a < cfg.min_aspect]
            vtest.cases = [vtest.cases[i] for i in keep]
            vtest.bodies = [vtest.bodies[i] for i in keep]
        if not len(vtest):
            continue
        vres = {}
        for name, model in models.items():
            vres[name] = {**evaluate_surrogate(model, vtest, device=ctx.torch_device()),
                          "params": results[name]["params"],
                          "train_s": results[name]["train_s"]}
        metrics.update(_metrics(vres, prefix=f"{tag}_"))
        title = {"dense": f"{4 * cfg.n_queries} queries per case (trained on "
                          f"{cfg.query_subsample})",
                 "ood_thin": f"thinner ellipses than training (b/a < {cfg.min_aspect}, "
                             f"{len(vtest)} cases)"}[tag]
        tables.append(icml.Table(title, _error_columns(channels), _error_rows(vres, channels)))
    return icml.RunResult(metrics=metrics, tables=tables, notes=_claim_notes(results))


def _load_or_train(ctx: icml.RunContext, cfg: JobConfig) -> tuple[Any, Any, Any]:
    from icml_smart.modeling_smart import load_smart

    model = None
    if getattr(cfg, "model_path", ""):  # before any data is generated: a bad file fails fast
        try:
            model = load_smart(cfg.model_path).to(ctx.torch_device())
        except ValueError as exc:
            raise icml.ConfigError(f"config key 'model_path': {exc}") from None
    train, test = make_data(cfg, ctx.seed)
    if model is not None:
        if model.config.space_dim != train.space_dim or model.config.param_dim != \
                train.param_dim:
            raise icml.ConfigError(f"config key 'model_path': the saved model expects "
                                   f"space_dim={model.config.space_dim}, param_dim="
                                   f"{model.config.param_dim}; case={cfg.case!r} has "
                                   f"{train.space_dim} and {train.param_dim}")
        return model.eval(), train, test
    model, _ = _train(ctx, cfg, "smart", train)
    return model, train, test


def infer_job(ctx: icml.RunContext, cfg: InferConfig) -> icml.RunResult:
    """Answer ``n_query_points`` queries on one test geometry in chunks; compare with the exact
    field and with an unchunked pass; queries inside the body come back as NaN."""
    import numpy as np
    import torch

    from icml_smart.metrics import relative_l2

    model, train, test = _load_or_train(ctx, cfg)
    dev = ctx.torch_device()
    body = test.bodies[0]
    case = test.batch([0])
    rng = np.random.default_rng(ctx.seed)
    q = rng.uniform(-1.5, 1.5, (cfg.n_query_points, train.space_dim))
    inside = body.inside(q) if hasattr(body, "inside") else np.zeros(len(q), bool)
    qt = torch.as_tensor(q, dtype=torch.float32, device=dev)[None]
    g, p = case["geometry"].to(dev), case["params"].to(dev)
    with torch.no_grad():
        t0 = time.perf_counter()
        pred = model.predict(g, p, qt, chunk_size=cfg.chunk_size)
        dt = time.perf_counter() - t0
        n_ref = min(cfg.n_query_points, 4096)
        full = model.predict(g, p, qt[:, :n_ref], chunk_size=n_ref)
    pred[0, torch.as_tensor(inside, device=dev)] = float("nan")
    outside = ~inside
    truth = torch.as_tensor(body.fields(q[outside]), dtype=torch.float32)
    err = relative_l2(pred[0, torch.as_tensor(outside, device=dev)].cpu(), truth)
    gap = float((full - pred[:, :n_ref]).abs().nan_to_num(0).max())
    metrics = {"queries": cfg.n_query_points, "inside_body": int(inside.sum()),
               "seconds": dt, "queries_per_s": cfg.n_query_points / dt,
               "rel_l2": float(err.mean()), "chunked_vs_full_max_abs": gap}
    from icml_smart.training import channel_names

    rows = [[c, float(e)] for c, e in zip(channel_names(train.space_dim), err, strict=True)]
    return icml.RunResult(
        metrics=metrics,
        tables=[icml.Table(f"Chunked inference: {cfg.n_query_points} queries in chunks of "
                           f"{cfg.chunk_size}, {cfg.n_query_points / dt:,.0f} queries/s",
                           ["channel", "rel-L2 vs exact"], rows)],
        notes=f"{int(inside.sum())} queries fell inside the body (field undefined): returned as "
              f"NaN. Chunked and unchunked answers differ by at most {gap:.2e}.")


def differentiate_job(ctx: icml.RunContext, cfg: DifferentiateConfig) -> icml.RunResult:
    """d fields / d query and d drag / d geometry against central finite differences (float64),
    then a shape optimisation of an ellipse's suction peak through the surrogate."""
    import torch

    from icml_smart.shape_opt import (
        drag_geometry_gradient,
        field_query_gradient,
        optimize_ellipse,
        surrogate_drag,
    )

    model, train, test = _load_or_train(ctx, cfg)
    model = model.to(torch.float64)
    b = test.batch([0])
    g = b["geometry"].double().to(ctx.torch_device())
    n = b["normals"].double().to(ctx.torch_device())
    p = b["params"].double().to(ctx.torch_device())
    q = b["queries"][:, :8].double().to(ctx.torch_device())
    J = field_query_gradient(model, g, p, q)
    eps = cfg.fd_eps
    fd = torch.zeros_like(J)
    with torch.no_grad():
        for d in range(q.shape[-1]):
            e = torch.zeros_like(q)
            e[..., d] = eps
            fd[..., d] = (model.predict(g, p, q + e) - model.predict(g, p, q - e)) / (2 * eps)
    jerr = float((J - fd).norm() / fd.norm())
    drag, dg = drag_geometry_gradient(model, g, n, p)
    fdg = torch.zeros_like(dg)
    idx = [(i, d) for i in range(0, g.shape[1], max(1, g.shape[1] // 8)) for d in range(2)]
    with torch.no_grad():
        for i, d in idx:
            e = torch.zeros_like(g)
            e[0, i, d] = eps
            fdg[0, i, d] = (surrogate_drag(model, g + e, n, p)
                            - surrogate_drag(model, g - e, n, p))[0] / (2 * eps)
    sel = torch.tensor([i for i, _ in idx]), torch.tensor([d for _, d in idx])
    gerr = float((dg[0][sel] - fdg[0][sel]).norm() / fdg[0][sel].norm().clamp_min(1e-12))
    body = test.bodies[0]
    res = optimize_ellipse(model, a=body.a, b=body.b, theta=body.theta, U=body.U,
                           alpha=body.alpha, gamma=body.gamma, steps=cfg.opt_steps,
                           lr=cfg.opt_lr, n_surface=cfg.n_boundary, min_aspect=cfg.min_aspect)
    metrics = {"dfield_dquery_rel_err_vs_fd": jerr, "ddrag_dgeometry_rel_err_vs_fd": gerr,
               "surrogate_drag": float(drag[0]), "surrogate_suction_start": res["history"][0],
               "surrogate_suction_end": res["history"][-1],
               "exact_suction_start": res["exact_start"], "exact_suction_end": res["exact_end"]}
    rows = [["start", res["start"]["b"] / body.a, res["start"]["theta"], res["history"][0],
             res["exact_start"]],
            ["end", res["end"]["b"] / body.a, res["end"]["theta"], res["history"][-1],
             res["exact_end"]]]
    artifacts = {}
    from icml.report import line_plot

    png = line_plot(ctx.path("shape_opt.png"),
                    {"surrogate suction peak": (list(range(len(res["history"]))),
                                                res["history"])},
                    title="shape optimisation through the surrogate", xlabel="step",
                    ylabel="max(-C_p)")
    if png is not None:
        artifacts["shape optimisation"] = png.name
    return icml.RunResult(
        metrics=metrics,
        tables=[icml.Table("Gradients vs central finite differences (float64)",
                           ["gradient", "relative error"],
                           [["d fields / d query", jerr], ["d C_D / d geometry points", gerr]]),
                icml.Table("Shape optimisation of the suction peak (a fixed)",
                           ["shape", "b/a", "theta", "surrogate max(-C_p)", "exact max(-C_p)"],
                           rows)],
        artifacts=artifacts)
