"""The paper's comparison at small scale: unimodal vs fixed vs stochastic pairing on synthetic
data, accuracy and held-out sharpness per arm over seeds, in named regimes ``"<n_train>x<epochs>"``.
Used by the ``train`` hook and the benchmark."""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from icml_modality_pairing.config import Settings
from icml_modality_pairing.data import MultimodalData, Standardizer, make_digits, make_synthetic
from icml_modality_pairing.sharpness import sharpness_report
from icml_modality_pairing.training import (
    ARMS,
    accuracy,
    build_arm_model,
    cross_entropy_loss,
    heldout_batches,
    matched_noise_std,
    train_model,
)


def parse_regime(spec: str) -> tuple[int, int]:
    """``"2000x15"`` → ``(n_train=2000, epochs=15)``."""
    m = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*", str(spec))
    if not m or int(m[1]) < 2 or int(m[2]) < 1:
        raise ValueError(f"regime {spec!r}: write '<n_train>x<epochs>', e.g. '2000x15'")
    return int(m[1]), int(m[2])


@dataclass
class ArmRun:
    """One trained arm on one seed: its metrics and (optionally) the model."""

    regime: str
    arm: str
    seed: int
    metrics: dict[str, float]
    model: Any = None
    test: Any = None


def make_data(n_train: int, s: Settings, seed: int) -> tuple[Any, Any]:
    """Standardised train/held-out splits (statistics from the training split)."""
    if s.dataset == "digits":
        train, test = make_digits(n_train, s.n_test, seed=seed)
        # pixels that are (almost) constant on a training split: std floored at 0.1 (the pixel
        # range is [0, 1]) so a rare ink pixel in the held-out split stays finite
        st = Standardizer.fit(train, eps=0.1)
        return st(train), st(test)
    train, test = make_synthetic(n_train, s.n_test, n_classes=s.n_classes, dims=(s.dim, s.dim),
                                 mean_scale=s.mean_scale, noise=s.noise,
                                 shared_noise=s.shared_noise, label_noise=s.label_noise,
                                 seed=seed)
    st = Standardizer.fit(train)
    return st(train), st(test)


METRICS = ("accuracy", "lambda_max", "trace", "eps_sharpness", "gauss_sharpness",
           "heldout_loss", "train_loss", "train_s", "sharpness_s", "lambda_max_converged")


def diverged(model: Any, losses: Sequence[float]) -> bool:
    """Whether training diverged: a non-finite training loss or parameter."""
    if losses and not math.isfinite(losses[-1]):
        return True
    return any(not bool(torch.isfinite(p).all()) for p in model.parameters())


def arm_view(arm: str, data: MultimodalData) -> MultimodalData:
    """The data an arm sees: ``const_b`` replaces every non-anchor modality by a constant (0,
    the training mean after standardisation), ``twin_a`` by a copy of the anchor modality (a
    second view of it); every other arm sees ``data`` unchanged."""
    if arm not in ("const_b", "twin_a"):
        return data
    names = list(data.modalities)
    a = data.modalities[names[0]]
    mods = {m: v if m == names[0] else (torch.zeros_like(v) if arm == "const_b" else a.clone())
            for m, v in data.modalities.items()}
    return MultimodalData(mods, data.labels, data.n_classes, dict(data.info, arm_view=arm))


def run_arm(arm: str, n_train: int, epochs: int, seed: int, s: Settings, *,
            device: Any = None, dtype: Any = None, keep_model: bool = False) -> ArmRun:
    """Train ``arm`` on the regime's data for ``seed`` and measure it on held-out data.

    A run whose training diverged (a non-finite loss or weight, e.g. ``lr=1e30``) is a result,
    not an error: its measurements are NaN and ``metrics["diverged"]`` is 1 (the sharpness suite,
    which refuses a NaN loss, is skipped; no model is kept)."""
    train, test = make_data(n_train, s, seed)
    train, test = arm_view(arm, train), arm_view(arm, test)
    torch.manual_seed(seed)
    model = build_arm_model(arm, train, width=s.width, hidden=s.hidden, fusion=s.fusion)
    p = s.p_stochastic if arm in ("stochastic", "twin_a") else 0.0
    control = arm if arm in ("noise", "sam", "mixup") else "none"
    noise_std = {m: s.noise_scale * matched_noise_std(train, m, s.p_stochastic)
                 for m in list(train.modalities)[1:]} if arm == "noise" else None
    hist = train_model(model, train, p_stochastic=p, epochs=epochs, batch_size=s.batch_size,
                       lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay,
                       schedule=s.schedule, seed=seed, device=device, dtype=dtype,
                       control=control, noise_std=noise_std, sam_rho=s.sam_rho,
                       mixup_alpha=s.mixup_alpha)
    if diverged(model, hist.losses):
        nan = float("nan")
        metrics = {k: nan for k in METRICS}
        metrics.update(train_loss=hist.losses[-1] if hist.losses else nan,
                       train_s=hist.seconds, diverged=1.0)
        return ArmRun(f"{n_train}x{epochs}", arm, seed, metrics)
    acc = accuracy(model, test, device=device, dtype=dtype)
    t0 = time.perf_counter()
    rep = sharpness_report(model, cross_entropy_loss,
                           heldout_batches(test, device=device, dtype=dtype),
                           eig_method=s.eig_method, power_iters=s.power_iters, tol=s.tol,
                           trace_samples=s.trace_samples,
                           rho=s.rho, sigma=s.sigma, gauss_samples=s.gauss_samples, seed=seed)
    metrics = {"accuracy": acc, "lambda_max": rep.lambda_max, "trace": rep.trace,
               "eps_sharpness": rep.eps_sharpness, "gauss_sharpness": rep.gauss_sharpness,
               "heldout_loss": rep.loss, "train_loss": hist.losses[-1],
               "train_s": hist.seconds, "sharpness_s": time.perf_counter() - t0,
               "lambda_max_converged": float(rep.lambda_max_converged), "diverged": 0.0}
    return ArmRun(f"{n_train}x{epochs}", arm, seed, metrics,
                  model if keep_model else None, test if keep_model else None)


def run_regimes(regimes: Sequence[str], seeds: Sequence[int], s: Settings, *,
                arms: Sequence[str] = ARMS[:3], device: Any = None, dtype: Any = None,
                progress: Callable | None = None, keep: Callable[[ArmRun], bool] | None = None,
                on_run: Callable[[ArmRun], None] | None = None) -> list[ArmRun]:
    """All (regime, seed, arm) runs; ``keep(run)`` says which trained models to keep;
    ``on_run`` receives each run as soon as it finishes (so a job can keep it if
    interrupted)."""
    jobs = [(r, seed, arm) for r in regimes for seed in seeds for arm in arms]
    parsed = {r: parse_regime(r) for r in regimes}
    out = []
    for r, seed, arm in (progress(jobs) if progress else jobs):
        n, ep = parsed[r]
        run = run_arm(arm, n, ep, seed, s, device=device, dtype=dtype, keep_model=True)
        if keep is None or not keep(run):
            run.model = run.test = None
        out.append(run)
        if on_run is not None:
            on_run(run)
    return out


def summarize(runs: Sequence[ArmRun], metric: str) -> dict[tuple[str, str], tuple[float, float]]:
    """``(regime, arm) -> (mean, sample std)`` of ``metric`` over seeds (NaN when a seed
    diverged)."""
    groups: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        groups.setdefault((r.regime, r.arm), []).append(r.metrics[metric])
    return {k: (statistics.fmean(v), statistics.stdev(v) if len(v) > 1 else 0.0)
            for k, v in groups.items()}


def wins(runs: Sequence[ArmRun], metric: str, a: str, b: str, regime: str,
         lower: bool = False) -> tuple[int, int]:
    """Seeds on which arm ``a`` beats arm ``b`` on ``metric`` (paired by seed): (wins, seeds)."""
    by = {(r.arm, r.seed): r.metrics[metric] for r in runs if r.regime == regime}
    seeds = sorted({s for (arm, s) in by if arm == a} & {s for (arm, s) in by if arm == b})
    w = sum((by[(a, s)] < by[(b, s)]) if lower else (by[(a, s)] > by[(b, s)]) for s in seeds)
    return w, len(seeds)
