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
                       device: str | torch.device = "cpu") -> dict[str, Any]:
    """Per-channel relative L2 on the volume queries, relative L2 of surface ``C_p``, and the
    mean absolute error of the force coefficients integrated from the predicted surface
    ``C_p`` (against the same integral of the true surface ``C_p``)."""
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
    return out


def channel_names(space_dim: int) -> list[str]:
    return ["u/U", "v/U", "w/U"][:space_dim] + ["C_p"]
