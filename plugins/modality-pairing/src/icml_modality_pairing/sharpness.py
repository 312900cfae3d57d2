"""Flatness measures beyond curvature: ε-sharpness (SAM's ascent step) and Gaussian-perturbation
sharpness, and :func:`sharpness_report`, the whole suite in one call. Measure on held-out data:
at interpolation the training loss is flat whatever the landscape."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from icml_modality_pairing.hessian import hessian_trace, lanczos, objective_of, power_iteration
from icml_modality_pairing.objective import Objective, SharpnessError


def epsilon_sharpness(model: Any, loss_fn: Any = None, batches: Any = None, *,
                      rho: float = 0.05, adaptive: bool = False) -> float:
    """``L(θ + ρ g/‖g‖) − L(θ)`` with ``g = ∇L(θ)`` (SAM's first-order worst case in a ρ-ball).

    ``adaptive=True`` uses ASAM's scale-invariant step ``ρ T²g/‖Tg‖`` with ``T = |θ|``.
    ``rho=0`` gives exactly 0; a zero gradient gives 0 (no ascent direction).
    """
    if not rho >= 0:
        raise SharpnessError(f"rho={rho!r}: the radius must be >= 0")
    obj = objective_of(model, loss_fn, batches)
    with torch.no_grad():
        base = obj.loss()
    if rho == 0:
        return 0.0
    g = obj.grad()
    scale = obj.theta0.abs() if adaptive else torch.ones_like(g)
    norm = (scale * g).norm()
    if float(norm) == 0.0:
        return 0.0
    step = rho * scale * scale * g / norm
    with torch.no_grad():
        return float(obj.loss(obj.theta0 + step) - base)


def perturbation_scales(obj: Objective, sigma: float, filter_norm: bool = True) -> torch.Tensor:
    """Per-coordinate std of the Gaussian perturbation: ``σ‖W_l‖/√n_l`` for every parameter
    tensor ``W_l`` with ``n_l`` entries (``filter_norm``), else ``σ`` everywhere."""
    if not filter_norm:
        return torch.full_like(obj.theta0, sigma)
    parts = torch.split(obj.theta0, obj.numels)
    return torch.cat([torch.full_like(p, sigma * float(p.norm()) / math.sqrt(p.numel()))
                      for p in parts])


def gaussian_perturbation_sharpness(model: Any, loss_fn: Any = None, batches: Any = None, *,
                                    sigma: float = 0.05, n: int = 10, filter_norm: bool = True,
                                    seed: int = 0, antithetic: bool = True,
                                    ) -> tuple[float, float]:
    """``E_δ[L(θ+δ)] − L(θ)`` over ``n`` draws ``δ ~ N(0, diag(s²))`` (see
    :func:`perturbation_scales`); returns ``(mean, standard error)``. ``sigma=0`` gives 0.

    ``antithetic=True`` (default) evaluates ``±δ`` pairs (``⌈n/2⌉`` of them): still unbiased,
    and the first-order term ``gᵀδ``, which dominates the noise near a non-stationary point,
    cancels within each pair.
    """
    if not sigma >= 0:
        raise SharpnessError(f"sigma={sigma!r}: the noise scale must be >= 0")
    if n < 1:
        raise SharpnessError(f"n={n}: need at least one perturbation")
    obj = objective_of(model, loss_fn, batches)
    if sigma == 0:
        return 0.0, 0.0
    scales = perturbation_scales(obj, sigma, filter_norm)
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    draws = (n + 1) // 2 if antithetic else n
    with torch.no_grad():
        base = obj.loss()
        deltas = []
        for _ in range(draws):
            u = torch.randn(obj.dim, generator=g, dtype=torch.float64).to(obj.theta0)
            d = float(obj.loss(obj.theta0 + scales * u) - base)
            if antithetic:
                d = 0.5 * (d + float(obj.loss(obj.theta0 - scales * u) - base))
            deltas.append(d)
    vals = torch.tensor(deltas, dtype=torch.float64)
    se = float(vals.std(unbiased=True) / math.sqrt(draws)) if draws > 1 else float("nan")
    return float(vals.mean()), se


@dataclass
class SharpnessReport:
    """All measures at one point, on one data set (see :func:`sharpness_report`)."""

    loss: float
    lambda_max: float
    lambda_max_converged: bool
    lambda_max_iterations: int
    lanczos_max: float | None
    trace: float
    trace_stderr: float
    eps_sharpness: float
    gauss_sharpness: float
    gauss_stderr: float
    n_params: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sharpness_report(model: Any, loss_fn: Any = None, batches: Any = None, *,
                     eig_method: str = "lanczos", power_iters: int = 100, tol: float = 1e-4,
                     lanczos_iters: int = 0,
                     trace_samples: int = 16, rho: float = 0.05, sigma: float = 0.05,
                     gauss_samples: int = 10, filter_norm: bool = True, seed: int = 0,
                     backend: str = "autograd") -> SharpnessReport:
    """The sharpness suite: loss, top eigenvalue, Hutchinson trace, ε-sharpness and
    Gaussian-perturbation sharpness, all on ``batches``.

    ``lambda_max`` comes from ``eig_method``: ``"lanczos"`` (default; the largest eigenvalue,
    at most ``power_iters`` HVPs, to 1e-6 of eigvalsh in the benchmark) or ``"power"`` (the
    dominant eigenvalue with PyHessian's stopping rule, which can stop early on a small
    eigengap). ``lanczos_iters > 0`` additionally reports a Lanczos value in ``lanczos_max``.
    """
    if eig_method not in ("lanczos", "power"):
        raise SharpnessError(f"eig_method={eig_method!r}: choose 'lanczos' or 'power'")
    obj = objective_of(model, loss_fn, batches, backend=backend)
    with torch.no_grad():
        loss = float(obj.loss())
    top = (lanczos if eig_method == "lanczos" else power_iteration)(
        obj, iters=power_iters, tol=tol, seed=seed)
    lz = lanczos(obj, iters=lanczos_iters, tol=tol, seed=seed).eigenvalue if lanczos_iters \
        else None
    tr = hessian_trace(obj, n_samples=trace_samples, seed=seed) if trace_samples else None
    eps = epsilon_sharpness(obj, rho=rho)
    gm, gse = gaussian_perturbation_sharpness(obj, sigma=sigma, n=gauss_samples,
                                              filter_norm=filter_norm, seed=seed)
    return SharpnessReport(loss=loss, lambda_max=top.eigenvalue,
                           lambda_max_converged=top.converged,
                           lambda_max_iterations=top.iterations, lanczos_max=lz,
                           trace=tr.trace if tr else float("nan"),
                           trace_stderr=tr.stderr if tr else float("nan"),
                           eps_sharpness=eps, gauss_sharpness=gm, gauss_stderr=gse,
                           n_params=obj.dim)
