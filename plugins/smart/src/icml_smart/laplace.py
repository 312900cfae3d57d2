"""Finite-difference potential flow past an arbitrary 2-D body: the stream function solves
Laplace's equation on a uniform grid (5-point stencil, scipy sparse LU), with ``psi = psi_body``
on grid nodes inside the body and ``psi = U (y cos alpha - x sin alpha)`` on the box edge.

Second-order in the grid spacing away from the body; the staircased body and the truncated far
field limit accuracy to about a cell near the surface (see ``tests/test_laplace.py`` for the
convergence against the exact circle solution).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class LaplaceSolution:
    """Grid fields: ``x``, ``y`` ``[n]`` axes, ``psi``, ``u``, ``v``, ``cp`` ``[n, n]`` (index
    ``[i, j]`` = ``(x[i], y[j])``), ``body`` mask, free stream ``U`` and ``alpha``."""

    x: np.ndarray
    y: np.ndarray
    psi: np.ndarray
    u: np.ndarray
    v: np.ndarray
    cp: np.ndarray
    body: np.ndarray
    U: float
    alpha: float

    def fields(self, q: np.ndarray, inside: str = "raise") -> np.ndarray:
        """``(u/U, v/U, C_p)`` at ``q [..., 2]`` by bilinear interpolation. Points whose
        interpolation stencil touches the body (inside or within a cell of the surface) raise
        ``ValueError`` or, with ``inside="nan"``, get NaN."""
        from scipy.interpolate import RegularGridInterpolator

        q = np.asarray(q, dtype=np.float64)
        if q.shape[-1] != 2 or not np.isfinite(q).all():
            raise ValueError(f"queries must be finite with shape [..., 2], got {q.shape}")
        lo, hi = self.x[0], self.x[-1]
        if (q < lo).any() or (q > hi).any():
            raise ValueError(f"queries must lie inside the solver box [{lo}, {hi}]^2")
        near = RegularGridInterpolator((self.x, self.y), self.body.astype(float))(q) > 0
        if near.any() and inside == "raise":
            raise ValueError(f"{int(near.sum())} query point(s) lie inside or within one cell of "
                             "the body, where the grid field is undefined: drop them or pass "
                             "inside='nan'")
        out = np.stack([RegularGridInterpolator((self.x, self.y), f)(q)
                        for f in (self.u / self.U, self.v / self.U, self.cp)], -1)
        out[near] = np.nan
        return out


def point_in_polygon(points: np.ndarray, polygon: np.ndarray) -> np.ndarray:
    """Even-odd rule: which ``points [..., 2]`` lie inside the closed ``polygon [K, 2]``."""
    x, y = points[..., 0][..., None], points[..., 1][..., None]
    x0, y0 = polygon[:, 0], polygon[:, 1]
    x1, y1 = np.roll(x0, -1), np.roll(y0, -1)
    cond = (y0 > y) != (y1 > y)
    with np.errstate(divide="ignore", invalid="ignore"):
        xi = x0 + (y - y0) * (x1 - x0) / (y1 - y0)
    return (cond & (x < xi)).sum(-1) % 2 == 1


def solve_stream_function(polygon: np.ndarray, *, U: float = 1.0, alpha: float = 0.0,
                          n: int = 129, half_width: float = 3.0,
                          psi_body: float = 0.0, far_field_iters: int = 3) -> LaplaceSolution:
    """Solve for the stream function around the body bounded by ``polygon [K, 2]`` (ordered
    vertices) on an ``n x n`` grid over ``[-half_width, half_width]^2``.

    ``psi_body`` sets the body's streamline value, which fixes the circulation (0 gives the
    symmetric solution for bodies symmetric about the flow direction). ``far_field_iters``
    rounds of far-field correction fit a vortex + dipole (``A log r + Im(mu / z)``) to the
    disturbance on a ring at 60% of the box and impose it on the edge (0: plain free stream).
    """
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    polygon = np.asarray(polygon, dtype=np.float64)
    if polygon.ndim != 2 or polygon.shape[1] != 2 or len(polygon) < 3:
        raise ValueError(f"polygon must be [K >= 3, 2] ordered vertices, got {polygon.shape}")
    if not np.isfinite(polygon).all():
        raise ValueError("polygon has NaN or inf vertices: remove them")
    if np.abs(polygon).max() >= 0.8 * half_width:
        raise ValueError(f"the body reaches {np.abs(polygon).max():.3g}, too close to the box "
                         f"edge {half_width}: raise half_width")
    if n < 9:
        raise ValueError(f"n={n}: use a grid of at least 9 x 9 nodes")
    xs = np.linspace(-half_width, half_width, n)
    h = xs[1] - xs[0]
    X, Y = np.meshgrid(xs, xs, indexing="ij")
    body = point_in_polygon(np.stack([X, Y], -1), polygon)
    if not body.any():
        raise ValueError(f"the body covers no grid node (grid spacing {h:.3g}): raise n")
    edge = np.zeros_like(body)
    edge[0, :] = edge[-1, :] = edge[:, 0] = edge[:, -1] = True
    psi_far = U * (Y * np.cos(alpha) - X * np.sin(alpha))
    fixed = body | edge
    values = np.where(body, psi_body, psi_far)
    idx = -np.ones((n, n), dtype=np.int64)
    free = ~fixed
    idx[free] = np.arange(free.sum())
    rows, cols, data, fixed_nb = [], [], [], []
    rhs0 = np.zeros(free.sum())
    ii, jj = np.nonzero(free)
    me = idx[ii, jj]
    rows.append(me)
    cols.append(me)
    data.append(np.full(len(me), -4.0))
    for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
        ni, nj = ii + di, jj + dj
        nb_free = free[ni, nj]
        rows.append(me[nb_free])
        cols.append(idx[ni[nb_free], nj[nb_free]])
        data.append(np.ones(nb_free.sum()))
        fixed_nb.append((me[~nb_free], ni[~nb_free], nj[~nb_free]))
    A = sp.csc_matrix((np.concatenate(data), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(len(rhs0), len(rhs0)))
    lu = splu(A)
    Z = X + 1j * Y
    rr = np.abs(Z)
    ring = free & (np.abs(rr - 0.6 * half_width) < 1.5 * h)
    with np.errstate(divide="ignore", invalid="ignore"):
        basis = np.stack([np.log(rr), (1 / Z).imag, (-1j / Z).imag, np.ones_like(rr)], -1)
    psi = values.copy()
    for it in range(far_field_iters + 1):
        rhs = rhs0.copy()
        for m, a, b in fixed_nb:
            np.subtract.at(rhs, m, psi[a, b])
        psi[free] = lu.solve(rhs)
        if it == far_field_iters:
            break
        coef, *_ = np.linalg.lstsq(basis[ring], (psi - psi_far)[ring], rcond=None)
        psi[edge] = psi_far[edge] + basis[edge] @ coef
    u = np.gradient(psi, h, axis=1)   # u = d psi / dy
    v = -np.gradient(psi, h, axis=0)  # v = -d psi / dx
    u[body], v[body] = 0.0, 0.0
    cp = 1 - (u * u + v * v) / U ** 2
    return LaplaceSolution(xs, xs, psi, u, v, cp, body, U, alpha)


def random_star_polygon(rng: np.random.Generator, k: int = 96, radius: float = 0.5,
                        modes: int = 4, amplitude: float = 0.25) -> np.ndarray:
    """A random smooth star-shaped body: ``r(t) = radius (1 + sum_m c_m cos(m t + p_m))``."""
    t = np.linspace(0, 2 * np.pi, k, endpoint=False)
    c = rng.uniform(-1, 1, modes) * amplitude / np.arange(1, modes + 1)
    p = rng.uniform(0, 2 * np.pi, modes)
    r = radius * (1 + (c[:, None] * np.cos(np.arange(1, modes + 1)[:, None] * t + p[:, None]))
                  .sum(0))
    r = np.clip(r, 0.3 * radius, None)
    return np.stack([r * np.cos(t), r * np.sin(t)], -1)
