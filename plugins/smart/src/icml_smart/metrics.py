"""Metrics: per-channel relative L2, surface pressure coefficient error, and force
coefficients by surface integration of ``C_p``."""

from __future__ import annotations

import torch


def relative_l2(pred: torch.Tensor, target: torch.Tensor, reduce: bool = True,
                eps: float = 1e-12) -> torch.Tensor:
    """Per-channel relative L2 error ``||pred - target|| / ||target||`` over the points of each
    case (``[B, Q, C]`` or ``[Q, C]``), averaged over cases when ``reduce`` (shape ``[C]``),
    else ``[B, C]``. Zero for a perfect prediction; invariant to scaling both by one factor."""
    if pred.shape != target.shape:
        raise ValueError(f"pred {tuple(pred.shape)} and target {tuple(target.shape)} differ")
    if pred.ndim == 2:
        pred, target = pred[None], target[None]
    num = torch.linalg.vector_norm(pred - target, dim=1)
    den = torch.linalg.vector_norm(target, dim=1).clamp_min(eps)
    err = num / den
    return err.mean(0) if reduce else err


def surface_elements(points: torch.Tensor, normals: torch.Tensor) -> torch.Tensor:
    """Quadrature weights (arc length in 2-D, area in 3-D) of surface samples ``[..., M, D]``.

    2-D: points are ordered by angle around their centroid and each gets half the lengths of its
    two chords (trapezoid rule on a closed curve). 3-D: each point gets ``A / M`` with the area
    ``A`` estimated from the mean radius (exact for spheres; an approximation otherwise)."""
    D = points.shape[-1]
    if D == 2:
        c = points.mean(-2, keepdim=True)
        rel = points - c
        ang = torch.atan2(rel[..., 1], rel[..., 0])
        order = ang.argsort(-1)
        p = torch.gather(points, -2, order[..., None].expand_as(points))
        nxt = torch.roll(p, -1, -2)
        prv = torch.roll(p, 1, -2)
        w_sorted = 0.5 * (torch.linalg.vector_norm(nxt - p, dim=-1)
                          + torch.linalg.vector_norm(p - prv, dim=-1))
        w = torch.empty_like(w_sorted).scatter_(-1, order, w_sorted)
        return w
    if D == 3:
        r = torch.linalg.vector_norm(points - points.mean(-2, keepdim=True), dim=-1)
        area = 4 * torch.pi * r.mean(-1, keepdim=True) ** 2
        return area.expand_as(r) / points.shape[-2]
    raise ValueError(f"surface integration supports 2-D and 3-D points, got D={D}")


def force_coefficients(points: torch.Tensor, normals: torch.Tensor, cp: torch.Tensor,
                       flow_dir: torch.Tensor, ref_length: float | torch.Tensor = 1.0
                       ) -> dict[str, torch.Tensor]:
    """Pressure force coefficients ``C_F = -(1 / L_ref) oint C_p n dS`` split into drag (along
    the free stream ``flow_dir [..., D]``) and, in 2-D, lift (free stream rotated +90 degrees).

    For potential flow drag is zero (d'Alembert) and ``C_L = -2 Gamma / (U L_ref)`` for
    circulation ``Gamma`` (Kutta-Joukowski; counter-clockwise positive)."""
    w = surface_elements(points, normals)
    force = -(cp[..., None] * normals * w[..., None]).sum(-2) / ref_length
    e = flow_dir / torch.linalg.vector_norm(flow_dir, dim=-1, keepdim=True)
    out = {"force": force, "drag": (force * e).sum(-1)}
    if points.shape[-1] == 2:
        lift_dir = torch.stack([-e[..., 1], e[..., 0]], -1)
        out["lift"] = (force * lift_dir).sum(-1)
    return out
