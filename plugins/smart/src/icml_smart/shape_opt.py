"""Differentiating the surrogate: fields with respect to query points, drag with respect to
geometry points, and a small shape optimisation of an ellipse through the surrogate.

The surrogate is differentiable end to end: the supernode selection (farthest-point sampling)
is a discrete choice held fixed under infinitesimal moves, while the positions of the chosen
supernodes, their neighbours and the query points all carry gradients."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from icml_smart.metrics import force_coefficients


def ellipse_surface(a: torch.Tensor, b: torch.Tensor, theta: torch.Tensor, n: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Differentiable surface points and outward normals ``[n, 2]`` of a rotated ellipse (equal
    steps in the parametric angle)."""
    t = torch.linspace(0, 2 * torch.pi, n + 1, dtype=a.dtype, device=a.device)[:-1]
    x = torch.stack([a * t.cos(), b * t.sin()], -1)
    nrm = torch.stack([b * t.cos(), a * t.sin()], -1)
    nrm = nrm / nrm.norm(dim=-1, keepdim=True)
    c, s = theta.cos(), theta.sin()
    rot = torch.stack([torch.stack([c, -s]), torch.stack([s, c])])
    return x @ rot.T, nrm @ rot.T


def field_query_gradient(model: Any, geometry: torch.Tensor, params: torch.Tensor,
                         queries: torch.Tensor) -> torch.Tensor:
    """Jacobian ``d fields / d query`` ``[B, Q, C, D]`` of the (physical) fields; each query's
    fields depend on that query only, so C backward passes give the whole Jacobian."""
    q = queries.detach().clone().requires_grad_(True)
    y = model.predict(geometry, params, q)
    rows = [torch.autograd.grad(y[..., c].sum(), q, retain_graph=True)[0]
            for c in range(y.shape[-1])]
    return torch.stack(rows, -2)


def surrogate_drag(model: Any, geometry: torch.Tensor, normals: torch.Tensor,
                   params: torch.Tensor) -> torch.Tensor:
    """Pressure drag coefficient ``[B]`` from the surrogate's surface ``C_p`` at the geometry
    points (the point cloud is both the encoder's input and the surface quadrature)."""
    cp = model.predict(geometry, params, geometry)[..., -1]
    flow = params[:, 1:1 + geometry.shape[-1]]
    return force_coefficients(geometry, normals, cp, flow)["drag"]


def drag_geometry_gradient(model: Any, geometry: torch.Tensor, normals: torch.Tensor,
                           params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(drag [B], d drag / d geometry [B, M, D])`` with the normals held fixed."""
    g = geometry.detach().clone().requires_grad_(True)
    drag = surrogate_drag(model, g, normals, params)
    return drag.detach(), torch.autograd.grad(drag.sum(), g)[0]


def suction_peak(cp: torch.Tensor, sharpness: float = 20.0) -> torch.Tensor:
    """Smooth maximum of the suction ``-C_p`` over the surface (log-sum-exp)."""
    return torch.logsumexp(-sharpness * cp, -1) / sharpness


def optimize_ellipse(model: Any, *, a: float, b: float, theta: float, U: float, alpha: float,
                     gamma: float, steps: int = 20, lr: float = 0.05, n_surface: int = 64,
                     min_aspect: float = 0.4) -> dict[str, Any]:
    """Reduce the surrogate's suction peak by gradient descent on the aspect ratio and rotation
    of an ellipse (semi-major axis ``a`` fixed), then check the result with the exact solver.

    Returns the trajectory of the surrogate objective and the exact suction peak of the start
    and end shapes."""
    from icml_smart.potential_flow import Ellipse

    dev = next(model.parameters()).device
    dt = next(model.parameters()).dtype
    A = torch.tensor(a, device=dev, dtype=dt)
    logit = torch.tensor(np.log((b / a - min_aspect + 1e-6) / (1 - b / a + 1e-6)), device=dev,
                         dtype=dt, requires_grad=True)
    th = torch.tensor(theta, device=dev, dtype=dt, requires_grad=True)
    params = torch.tensor([[U, np.cos(alpha), np.sin(alpha), gamma]], device=dev, dtype=dt)
    opt = torch.optim.Adam([logit, th], lr=lr)

    def shape() -> tuple[torch.Tensor, torch.Tensor]:
        aspect = min_aspect + (1 - min_aspect) * torch.sigmoid(logit)
        return A * aspect, th

    def exact(bv: float, tv: float) -> float:
        bv = min(bv, a)
        body = Ellipse(a, bv, tv, U, alpha, gamma)
        g, _ = body.boundary(n_surface)
        return float(-body.fields(g)[:, 2].min())

    history = []
    start = (float(shape()[0].detach()), float(th.detach()))
    for _ in range(steps + 1):
        bb, tt = shape()
        g, _ = ellipse_surface(A, bb, tt, n_surface)
        J = suction_peak(model.predict(g[None], params, g[None])[0, :, -1])
        history.append(float(J.detach()))
        if len(history) > steps:
            break
        opt.zero_grad()
        J.backward()
        opt.step()
    end = (float(shape()[0].detach()), float(th.detach()))
    return {"history": history, "start": {"b": start[0], "theta": start[1]},
            "end": {"b": end[0], "theta": end[1]},
            "exact_start": exact(*start), "exact_end": exact(*end)}
