"""Training loop for the three arms the paper compares on the same data and encoders:

* ``unimodal`` — a :class:`~.models.Unimodal` model on the anchor modality alone
  (``unimodal_b``: on the second modality);
* ``fixed`` — late fusion on each sample's own partner (``p_stochastic = 0``);
* ``stochastic`` — late fusion with a same-class partner resampled every step.

Controls on the same fusion network (issue 61): ``const_b`` (modality b replaced by a
constant: unimodal information, multimodal architecture), ``twin_a`` (b replaced by a second
view of a, paired stochastically: the pairing kernel without a second modality), and against
the smoothing mechanism, each with fixed pairing: ``noise`` (Gaussian noise on b with the
per-feature std of the swap stochastic pairing makes), ``sam`` (sharpness-aware minimisation),
``mixup`` (within-class mixup of both modalities).

Plus held-out accuracy and the exact stochastic-pairing objective (the all-pairs average).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from icml_modality_pairing.data import MultimodalData
from icml_modality_pairing.models import LateFusion, Unimodal
from icml_modality_pairing.pairing import (
    PairingIndex,
    all_pair_weights,
    check_probability,
    pair_indices,
)

ARMS = ("unimodal", "fixed", "stochastic", "unimodal_b", "const_b", "twin_a", "noise", "sam",
        "mixup")
SCHEDULES = ("cosine", "constant")
CONTROLS = ("none", "noise", "sam", "mixup")


@dataclass
class TrainHistory:
    """Mean training loss per epoch and the wall time of the loop."""

    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0


def build_arm_model(arm: str, data: MultimodalData, *, anchor: str | None = None,
                    width: int = 64, hidden: int = 64, fusion: str = "add",
                    encoder: str = "mlp") -> nn.Module:
    """The model of ``arm`` for ``data``'s modalities (``unimodal``: the anchor modality only;
    ``unimodal_b``: the first other modality only)."""
    if arm not in ARMS:
        raise ValueError(f"arm={arm!r}: choose one of {ARMS}")
    dims = data.dims
    anchor = anchor or next(iter(dims))
    if arm == "unimodal_b":
        other = next(m for m in dims if m != anchor)
        return Unimodal(other, dims[other], data.n_classes, width=width, hidden=hidden,
                        encoder=encoder)
    if arm == "unimodal":
        return Unimodal(anchor, dims[anchor], data.n_classes, width=width, hidden=hidden,
                        encoder=encoder)
    return LateFusion(dims, data.n_classes, width=width, hidden=hidden, fusion=fusion,
                      encoder=encoder)


def matched_noise_std(data: MultimodalData, modality: str, p_stochastic: float = 1.0,
                      ) -> torch.Tensor:
    """Per-feature std of the perturbation ``x^j − x^i`` that stochastic pairing applies to
    ``modality`` (``j`` uniform over ``i``'s class, itself included, with probability ``p``):
    ``sqrt(p · Σ_c (n_c/n) · 2 Var_c)`` with the within-class variances ``Var_c`` (ddof 0),
    which is exactly ``sqrt(E (x^j − x^i)²)``. The noise arm's matched strength."""
    x, y = data.modalities[modality].double(), data.labels
    second = torch.zeros(x.shape[1], dtype=torch.float64)
    for c in y.unique():
        xc = x[y == c]
        second += 2 * xc.var(0, unbiased=False) * len(xc) / len(y)
    return (check_probability(p_stochastic) * second).sqrt().to(data.modalities[modality].dtype)


def cross_entropy_loss(model: Callable, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """``loss_fn(model, batch)`` for dict batches ``{modality: x, ..., "labels": y}``."""
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    return F.cross_entropy(model(**inputs), batch["labels"])


def heldout_batches(data: MultimodalData, batch_size: int = 1000, *, device: Any = None,
                    dtype: Any = None) -> list[dict[str, torch.Tensor]]:
    """``data`` as a list of dict batches in its (fixed) order, for the sharpness suite."""
    d = data.to(device=device, dtype=dtype)
    n = len(d)
    out = []
    for s in range(0, n, batch_size):
        b = {k: v[s:s + batch_size] for k, v in d.modalities.items()}
        b["labels"] = d.labels[s:s + batch_size]
        out.append(b)
    return out


def train_model(model: nn.Module, data: MultimodalData, *, p_stochastic: float = 1.0,
                epochs: int = 15, batch_size: int = 50, lr: float = 0.05, momentum: float = 0.9,
                weight_decay: float = 5e-4, schedule: str = "cosine", seed: int = 0,
                anchor: str | None = None, device: Any = None, dtype: Any = None,
                progress: Callable | None = None, control: str = "none",
                noise_std: dict[str, Any] | None = None, sam_rho: float = 0.05,
                mixup_alpha: float = 1.0) -> TrainHistory:
    """SGD with momentum on ``data`` with stochastic modality pairing.

    Each step draws a batch of anchor samples; every other modality's rows are same-class
    partners with probability ``p_stochastic`` (vectorised :func:`~.pairing.pair_indices`, a
    generator seeded by ``seed``), else the samples' own rows. A :class:`Unimodal` model
    ignores the partners. Deterministic on CPU for a fixed seed.

    ``control`` adds a mechanism control on top (its draws come from a second generator, so the
    batch order equals the plain arm's under the same seed): ``"noise"`` adds
    ``noise_std[m] * N(0, I)`` to each modality ``m`` in ``noise_std`` every step; ``"sam"``
    takes SAM's step (gradient at ``θ + sam_rho·g/‖g‖``); ``"mixup"`` mixes every modality of
    each sample with one same-class sample, weight ``λ ~ Beta(mixup_alpha, mixup_alpha)``, label
    unchanged.
    """
    p = check_probability(p_stochastic)
    if control not in CONTROLS:
        raise ValueError(f"control={control!r}: choose one of {CONTROLS}")
    if control == "noise" and not noise_std:
        raise ValueError("control='noise' needs noise_std={modality: std}")
    if not sam_rho >= 0 or not mixup_alpha > 0:
        raise ValueError(f"sam_rho={sam_rho}, mixup_alpha={mixup_alpha}: need sam_rho >= 0 and "
                         "mixup_alpha > 0")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule={schedule!r}: choose one of {SCHEDULES}")
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs={epochs}, batch_size={batch_size}: both must be >= 1")
    import time

    names = list(data.modalities)
    anchor = anchor or names[0]
    others = [m for m in names if m != anchor]
    index = PairingIndex(data.labels, name="training labels", singleton="warn") if p > 0 \
        else None
    d = data.to(device=device, dtype=dtype)
    model.to(device=device, dtype=dtype).train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum,
                          weight_decay=weight_decay)
    n = len(data)
    steps_per_epoch = math.ceil(n / batch_size)
    total = epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, total) if schedule == "cosine" \
        else None
    g = torch.Generator().manual_seed(int(seed))
    if control != "none":
        import numpy as np

        ga = torch.Generator().manual_seed(int(seed) + 1_000_003)
        rng = np.random.default_rng(int(seed) + 1_000_003)
        mix_index = PairingIndex(data.labels, name="training labels", singleton="ignore") \
            if control == "mixup" else None
        stds = {m: torch.as_tensor(v).to(device=device, dtype=d.modalities[m].dtype)
                for m, v in (noise_std or {}).items()}
    hist = TrainHistory()
    t0 = time.perf_counter()
    epochs_iter = progress(range(epochs)) if progress else range(epochs)
    for _ in epochs_iter:
        perm = torch.randperm(n, generator=g)
        run, count = 0.0, 0
        for s in range(0, n, batch_size):
            idx = perm[s:s + batch_size]
            batch = {anchor: d.modalities[anchor][idx]}
            for m in others:
                j = pair_indices(index, data.labels[idx], idx, p_stochastic=p, generator=g) \
                    if index is not None else idx
                batch[m] = d.modalities[m][j.to(d.labels.device)]
            y = d.labels[idx]
            if control == "noise":
                for m, sd in stds.items():
                    batch[m] = batch[m] + sd * torch.randn(batch[m].shape, generator=ga).to(
                        batch[m])
            elif control == "mixup":
                j = pair_indices(mix_index, data.labels[idx], idx, p_stochastic=1.0,
                                 generator=ga).to(d.labels.device)
                lam = torch.as_tensor(rng.beta(mixup_alpha, mixup_alpha, size=(len(idx), 1)))
                for m in batch:
                    partner = d.modalities[m][j]
                    lam_m = lam.to(batch[m])
                    batch[m] = lam_m * batch[m] + (1 - lam_m) * partner
            loss = F.cross_entropy(model(**batch), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if control == "sam" and sam_rho > 0:
                _sam_second_gradient(model, batch, y, sam_rho)
            opt.step()
            if sched is not None:
                sched.step()
            run += float(loss.detach()) * len(idx)
            count += len(idx)
        hist.losses.append(run / count)
    hist.seconds = time.perf_counter() - t0
    model.eval()
    return hist


def _sam_second_gradient(model: nn.Module, batch: dict[str, torch.Tensor], y: torch.Tensor,
                         rho: float) -> None:
    """Replace the gradients by SAM's: the gradient at ``θ + ρ g/‖g‖`` (θ restored after)."""
    params = [q for q in model.parameters() if q.grad is not None]
    norm = torch.norm(torch.stack([q.grad.norm() for q in params]))
    if not float(norm) > 0:
        return
    with torch.no_grad():
        saved = [q.detach().clone() for q in params]
        for q in params:
            q.add_(q.grad * (rho / norm))
    for q in params:
        q.grad = None
    F.cross_entropy(model(**batch), y).backward()
    with torch.no_grad():
        for q, old in zip(params, saved, strict=True):
            q.copy_(old)


@torch.no_grad()
def accuracy(model: nn.Module, data: MultimodalData, *, device: Any = None,
             dtype: Any = None) -> float:
    """Top-1 accuracy of ``model`` on ``data`` with each sample's own (aligned) modalities."""
    model.eval()
    d = data.to(device=device, dtype=dtype)
    pred = model(**d.modalities).argmax(-1)
    return float((pred == d.labels).float().mean())


def exact_pairing_loss(model: nn.Module, data: MultimodalData, *, p_stochastic: float = 1.0,
                       anchor: str | None = None, other: str | None = None,
                       loss: Callable = F.cross_entropy) -> torch.Tensor:
    """The objective stochastic pairing optimises, by enumeration (two modalities):
    ``(1−p)·(1/n)Σ_i ℓ(f(x_a^i, x_b^i), y_i) + p·(1/n)Σ_i (1/n_{y_i}) Σ_{j: y_j=y_i}
    ℓ(f(x_a^i, x_b^j), y_i)``. O(n²) model calls: for tiny data and tests."""
    p = check_probability(p_stochastic)
    names = list(data.modalities)
    anchor = anchor or names[0]
    other = other or next(m for m in names if m != anchor)
    xa, xb, y = data.modalities[anchor], data.modalities[other], data.labels
    W = all_pair_weights(y, PairingIndex(y, singleton="ignore")).to(xa)
    n = len(y)
    ia, ib = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    out = model(**{anchor: xa[ia.reshape(-1)], other: xb[ib.reshape(-1)]})
    per = loss(out, y[ia.reshape(-1)], reduction="none").view(n, n)
    stochastic = (W * per).sum(1).mean()
    fixed = per.diagonal().mean()
    return (1 - p) * fixed + p * stochastic
