"""Filter-normalised loss slices (Li et al., 2018) in 1-D and 2-D, and their PNG plots.

A direction ``d`` has the parameters' shapes; for each parameter tensor with ≥ 2 dimensions,
each filter (slice along dim 0: a Linear layer's output row, a conv's output channel) is rescaled
to the norm of the same filter of ``θ``. 1-D tensors (biases, norms) get a zero direction
(``ignore_bias=True``, Li et al.'s choice) or are rescaled as a whole.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from icml_modality_pairing.hessian import objective_of
from icml_modality_pairing.objective import Objective, SharpnessError

log = logging.getLogger("icml_modality_pairing")
DIRECTIONS = ("filter_normalized", "random", "gradient", "eigenvector")


def filter_normalized_direction(obj: Objective, *, seed: int = 0,
                                ignore_bias: bool = True) -> torch.Tensor:
    """A random flat direction, filter-normalised to the objective's parameters."""
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    parts = []
    for p in obj.unflatten(obj.theta0).values():
        d = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p)
        if p.ndim >= 2:
            dn = d.reshape(p.shape[0], -1).norm(dim=1).clamp_min(1e-12)
            pn = p.reshape(p.shape[0], -1).norm(dim=1)
            d = d * (pn / dn).view(-1, *([1] * (p.ndim - 1)))
        elif ignore_bias:
            d = torch.zeros_like(p)
        else:
            d = d * (p.norm() / d.norm().clamp_min(1e-12))
        parts.append(d.reshape(-1))
    return torch.cat(parts)


def _direction(obj: Objective, direction: Any, seed: int, ignore_bias: bool) -> torch.Tensor:
    if isinstance(direction, torch.Tensor):
        d = direction.to(obj.theta0)
        if d.shape != obj.theta0.shape:
            raise SharpnessError(f"direction has shape {tuple(d.shape)}, expected ({obj.dim},)")
        return d
    if direction == "filter_normalized":
        return filter_normalized_direction(obj, seed=seed, ignore_bias=ignore_bias)
    if direction == "random":
        g = torch.Generator(device="cpu").manual_seed(int(seed))
        d = torch.randn(obj.dim, generator=g, dtype=torch.float64).to(obj.theta0)
        return d * obj.theta0.norm() / d.norm()
    if direction == "gradient":
        gr = obj.grad()
        return gr * obj.theta0.norm() / gr.norm().clamp_min(1e-12)
    if direction == "eigenvector":
        from icml_modality_pairing.hessian import power_iteration

        v = power_iteration(obj, seed=seed).eigenvector
        return v * obj.theta0.norm()
    raise SharpnessError(f"direction={direction!r}: choose one of {DIRECTIONS} or pass a tensor")


def loss_landscape_1d(model: Any, loss_fn: Any = None, batches: Any = None, *,
                      direction: Any = "filter_normalized", span: float = 1.0, steps: int = 21,
                      seed: int = 0, ignore_bias: bool = True) -> tuple[list[float], list[float]]:
    """Loss along ``θ + α d`` for ``α`` in ``linspace(-span, span, steps)``.

    Returns ``(alphas, losses)``."""
    if steps < 2 or not span > 0:
        raise SharpnessError(f"steps={steps}, span={span}: need steps >= 2 and span > 0")
    obj = objective_of(model, loss_fn, batches)
    d = _direction(obj, direction, seed, ignore_bias)
    alphas = torch.linspace(-span, span, steps, dtype=torch.float64)
    with torch.no_grad():
        losses = [float(obj.loss(obj.theta0 + float(a) * d)) for a in alphas]
    return alphas.tolist(), losses


def loss_landscape_2d(model: Any, loss_fn: Any = None, batches: Any = None, *,
                      span: float = 1.0, steps: int = 11, seed: int = 0,
                      ignore_bias: bool = True,
                      ) -> tuple[list[float], list[float], list[list[float]]]:
    """Loss on the plane ``θ + α d₁ + β d₂`` of two filter-normalised random directions:
    ``(alphas, betas, Z)`` with ``Z[i][j]`` at ``(alphas[j], betas[i])``."""
    if steps < 2 or not span > 0:
        raise SharpnessError(f"steps={steps}, span={span}: need steps >= 2 and span > 0")
    obj = objective_of(model, loss_fn, batches)
    d1 = filter_normalized_direction(obj, seed=seed, ignore_bias=ignore_bias)
    d2 = filter_normalized_direction(obj, seed=seed + 1, ignore_bias=ignore_bias)
    grid = torch.linspace(-span, span, steps, dtype=torch.float64).tolist()
    with torch.no_grad():
        Z = [[float(obj.loss(obj.theta0 + a * d1 + b * d2)) for a in grid] for b in grid]
    return grid, grid, Z


def plot_landscape_1d(path: str | Path,
                      curves: Mapping[str, tuple[Sequence[float], Sequence[float]]], *,
                      title: str = "filter-normalised 1-D loss slice") -> Path | None:
    """One line per ``name -> (alphas, losses)``; returns the PNG path (None without
    matplotlib)."""
    from icml.report import line_plot

    return line_plot(path, dict(curves), title=title, xlabel="α (filter-normalised)",
                     ylabel="held-out loss")


def plot_landscape_2d(path: str | Path,
                      surfaces: Mapping[str, tuple[Sequence[float], Sequence[float],
                                                   Sequence[Sequence[float]]]], *,
                      title: str = "filter-normalised 2-D loss slices") -> Path | None:
    """Contour panels, one per ``name -> (alphas, betas, Z)``, on a shared colour scale
    (drawn through :func:`icml.report.figure`; None without matplotlib)."""
    import numpy as np

    from icml.report import figure

    names = list(surfaces)
    lo = min(min(min(r) for r in s[2]) for s in surfaces.values())
    hi = max(max(max(r) for r in s[2]) for s in surfaces.values())
    levels = np.linspace(lo, hi, 21) if hi > lo else 21
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with figure(p, 1, len(names), figsize=(4.2 * len(names) + 1, 3.8)) as axes:
        if axes is None:
            return None
        axes = np.atleast_1d(axes)
        cs = None
        for ax, name in zip(axes, names, strict=True):
            a, b, Z = surfaces[name]
            cs = ax.contourf(a, b, np.asarray(Z), levels=levels, cmap="viridis")
            ax.contour(a, b, np.asarray(Z), levels=levels, colors="k", linewidths=0.3)
            ax.set(title=name, xlabel="α", ylabel="β")
        fig = axes[0].figure
        if cs is not None:
            fig.colorbar(cs, ax=axes[-1], shrink=0.9, label="held-out loss")
        fig.suptitle(title)
    return p
