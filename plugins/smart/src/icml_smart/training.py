"""Training and evaluation loops shared by SMART and the baselines: AdamW with a one-cycle
schedule, MSE on per-channel z-scored targets at volume and surface points."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from icml_smart.data import ChannelNormalizer, PotentialFlowDataset
from icml_smart.metrics import force_coefficients, relative_l2


@dataclass
class TrainStats:
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    steps: int = 0


def set_target_stats(model: Any, norm: ChannelNormalizer) -> None:
    """Store the normaliser in the model's config, so ``predict`` (and a saved SMART model)
    returns physical units."""
    model.config.target_mean = list(norm.mean)
    model.config.target_std = list(norm.std)


def train_surrogate(model: Any, data: PotentialFlowDataset, *, steps: int = 300,
                    batch_size: int = 8, lr: float = 2e-3, weight_decay: float = 1e-4,
                    query_subsample: int | None = 128, surface_weight: float = 0.1,
                    seed: int = 0, device: str | torch.device = "cpu",
                    progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
                    ) -> TrainStats:
    """Fit ``model`` to ``data``: each step draws ``batch_size`` cases and ``query_subsample``
    of their volume queries (all when None) plus their surface points, whose loss is weighted
    by ``surface_weight`` (surface suction peaks are tens of standard deviations of the volume
    targets and swamp the volume loss at weight 1). Fits the target normaliser first.
    Deterministic given ``seed``."""
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps={steps}, batch_size={batch_size}: both must be >= 1")
    targets = torch.cat([c["targets"] for c in data.cases])
    set_target_stats(model, ChannelNormalizer.fit(targets))
    if getattr(model.config, "normalize_params", False):  # SMART's model.normalize_params
        xi = torch.stack([c["params"] for c in data.cases]).double()
        model.config.param_mean = xi.mean(0).tolist()
        model.config.param_std = (xi.std(0) + 1e-8).tolist()
    model.to(device).train()
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps,
                                                pct_start=0.1)
    stats = TrainStats()
    it = range(steps) if progress is None else progress(range(steps))
    t0 = time.perf_counter()
    for _ in it:
        idx = torch.randint(len(data), (batch_size,), generator=gen)
        b = {k: v.to(device) for k, v in data.batch(idx).items()}
        q, y = b["queries"], b["targets"]
        if query_subsample is not None and query_subsample < q.shape[1]:
            sel = torch.randperm(q.shape[1], generator=gen)[:query_subsample].to(device)
            q, y = q[:, sel], y[:, sel]
        sq, sy = b["surface_queries"], b["surface_targets"]
        ok = torch.isfinite(sy).all(-1)
        pred = model(b["geometry"], b["params"], torch.cat([q, sq], 1))
        n = q.shape[1]
        loss = (pred[:, :n] - model.normalize(y)).square().mean()
        if surface_weight:
            err = (pred[:, n:] - model.normalize(torch.nan_to_num(sy))).square().mean(-1)
            loss = loss + surface_weight * (err * ok).sum() / ok.sum().clamp_min(1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        stats.losses.append(float(loss.detach()))
    stats.seconds = time.perf_counter() - t0
    stats.steps = steps
    model.eval()
    return stats


@torch.no_grad()
def evaluate_surrogate(model: Any, data: PotentialFlowDataset, *, batch_size: int = 32,
                       device: str | torch.device = "cpu", per_case: bool = False
                       ) -> dict[str, Any]:
    """Per-channel relative L2 on the volume queries, relative L2 of surface ``C_p``, and the
    mean absolute error of the force coefficients integrated from the predicted surface
    ``C_p`` (against the same integral of the true surface ``C_p``; :func:`evaluate_forces`
    compares with the exact coefficients). ``per_case``: also ``rel_l2_cases``, each test
    case's relative L2 averaged over channels (for intervals over seeds and cases)."""
    model.to(device).eval()
    vol, surf, dd, dl = [], [], [], []
    for s in range(0, len(data), batch_size):
        b = {k: v.to(device) for k, v in data.batch(range(s, min(s + batch_size,
                                                                  len(data)))).items()}
        M = b["surface_queries"].shape[1]
        pred = model.predict(b["geometry"], b["params"],
                             torch.cat([b["queries"], b["surface_queries"]], 1))
        pv, ps = pred[:, :-M], pred[:, -M:]
        vol.append(relative_l2(pv, b["targets"], reduce=False))
        ok = torch.isfinite(b["surface_targets"]).all(-1).all(-1)
        st = b["surface_targets"]
        surf.append(relative_l2(ps[ok, :, -1:], st[ok, :, -1:], reduce=False)[:, 0])
        flow = b["params"][:, 1:1 + data.space_dim]
        fp = force_coefficients(b["geometry"], b["normals"], ps[..., -1], flow)
        ft = force_coefficients(b["geometry"], b["normals"], torch.nan_to_num(st[..., -1]), flow)
        dd.append((fp["drag"] - ft["drag"]).abs()[ok])
        if "lift" in fp:
            dl.append((fp["lift"] - ft["lift"]).abs()[ok])
    per_channel = torch.cat(vol).mean(0)
    out = {"rel_l2_per_channel": per_channel.tolist(), "rel_l2": float(per_channel.mean()),
           "surface_cp_rel_l2": float(torch.cat(surf).mean()),
           "drag_mae": float(torch.cat(dd).mean())}
    if dl:
        out["lift_mae"] = float(torch.cat(dl).mean())
    if per_case:
        out["rel_l2_cases"] = torch.cat(vol).mean(-1).tolist()
    return out


def exact_forces(body: Any) -> dict[str, float]:
    """The exact force coefficients of a 2-D ellipse case (``L_ref = 1``): drag 0
    (d'Alembert), lift ``-2 Gamma / U`` (Kutta-Joukowski)."""
    return {"drag": 0.0, "lift": float(-2 * body.circulation / body.U)}


@torch.no_grad()
def evaluate_forces(model: Any, data: PotentialFlowDataset, *, dense: int = 512,
                    batch_size: int = 32, device: str | torch.device = "cpu") -> dict[str, Any]:
    """Force errors against the **exact** coefficients (:func:`exact_forces`), with one
    quadrature for every arm and for the exact solution itself.

    Two quadratures of ``C_p`` on the body (:func:`~icml_smart.metrics.force_coefficients`,
    trapezoid rule on the sorted surface points):

    - ``cloud``: at the case's own surface points (the point cloud the model sees, ``M``
      random points), as :func:`evaluate_surrogate` does;
    - ``dense``: at ``dense`` surface points equally spaced in the ellipse's parametric angle
      (the model still sees only its point cloud; the points are new queries).

    ``model=None`` evaluates the exact ``C_p`` through the same quadratures (its errors are the
    quadratures' own). Returns mean absolute errors ``{cloud,dense}_{drag,lift}_mae``, the
    per-case signed lift errors (``*_lift_err``), and the least-squares slope of predicted on
    exact lift (``*_lift_slope``: 1 when the circulation's effect is fully captured, 0 for a
    model that ignores it). 2-D ellipse cases only."""
    import numpy as np

    if data.kind != "ellipse":
        raise ValueError(f"evaluate_forces needs the exact ellipse cases, got kind={data.kind!r}")
    if model is not None:
        model.to(device).eval()
    exact = torch.tensor([[exact_forces(b)["drag"], exact_forces(b)["lift"]]
                          for b in data.bodies], dtype=torch.float64)
    pts, nrm, cps = [], [], []
    for body in data.bodies:
        g, n = body.boundary(dense)
        pts.append(g)
        nrm.append(n)
        cps.append(body.fields(g, inside="nan")[:, -1])
    dense_pts = torch.tensor(np.stack(pts), dtype=torch.float32)
    dense_nrm = torch.tensor(np.stack(nrm), dtype=torch.float64)
    dense_cp = torch.tensor(np.stack(cps), dtype=torch.float64)
    out: dict[str, Any] = {}
    for tag in ("cloud", "dense"):
        got = []
        for s in range(0, len(data), batch_size):
            idx = list(range(s, min(s + batch_size, len(data))))
            b = data.batch(idx)
            flow = b["params"][:, 1:3].double()
            if tag == "cloud":
                p, n, sq = b["geometry"], b["normals"].double(), b["surface_queries"]
                cp_exact = b["surface_targets"][..., -1].double()
            else:
                p, n, sq = dense_pts[idx], dense_nrm[idx], dense_pts[idx]
                cp_exact = dense_cp[idx]
            if model is None:
                cp = cp_exact
            else:
                cp = model.predict(b["geometry"].to(device), b["params"].to(device),
                                   sq.to(device))[..., -1].double().cpu()
            f = force_coefficients(p.double(), n, torch.nan_to_num(cp), flow)
            got.append(torch.stack([f["drag"], f["lift"]], -1))
        err = torch.cat(got) - exact
        out[f"{tag}_drag_mae"] = float(err[:, 0].abs().mean())
        out[f"{tag}_lift_mae"] = float(err[:, 1].abs().mean())
        out[f"{tag}_lift_err"] = err[:, 1].tolist()
        pred, true = torch.cat(got)[:, 1], exact[:, 1]
        out[f"{tag}_lift_slope"] = float((pred * true).sum() / (true * true).sum())
    return out


def channel_names(space_dim: int) -> list[str]:
    return ["u/U", "v/U", "w/U"][:space_dim] + ["C_p"]
