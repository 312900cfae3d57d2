"""Datasets of simulations on raw point clouds: exact 2-D potential flow past rotated ellipses
with circulation, exact 3-D flow past spheres, and finite-difference flow past random smooth
bodies; a per-channel normaliser; a collator for torch ``DataLoader`` / HF ``Trainer``.

Each case is a dict of float32 tensors: ``geometry [M, D]`` (surface points), ``normals
[M, D]``, ``params [P]``, ``queries [Q, D]`` (volume points outside the body), ``targets
[Q, C]``, and ``surface_queries [M, D]`` with ``surface_targets [M, C]`` (where the surface
fields are known, for C_p and forces: the surface points themselves for the exact cases, points
1.5 grid cells off the body along the normal for the finite-difference case).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from icml_smart.potential_flow import Ellipse, Sphere


@dataclass
class FlowRanges:
    """Sampling ranges of the 2-D ellipse cases (the notes' ranges plus circulation)."""

    a: tuple[float, float] = (0.3, 0.8)
    aspect: tuple[float, float] = (0.25, 1.0)   # b / a
    U: tuple[float, float] = (0.5, 1.5)
    alpha_deg: tuple[float, float] = (-30.0, 30.0)
    gamma: tuple[float, float] = (-0.3, 0.3)
    box: float = 1.5                            # queries in [-box, box]^D


def _sample_outside(rng: np.random.Generator, n: int, dim: int, box: float, inside, margin=0.0
                    ) -> np.ndarray:
    out = np.empty((0, dim))
    while len(out) < n:
        q = rng.uniform(-box, box, (2 * n, dim))
        keep = ~inside(q)
        if margin:
            keep &= ~inside(q / (1 + margin))
        out = np.concatenate([out, q[keep]])
    return out[:n]


def ellipse_case(rng: np.random.Generator, n_boundary: int, n_queries: int,
                 ranges: FlowRanges = FlowRanges()) -> tuple[Ellipse, dict[str, np.ndarray]]:
    a = rng.uniform(*ranges.a)
    b = a * rng.uniform(*ranges.aspect)
    body = Ellipse(a=a, b=b, theta=rng.uniform(0, np.pi), U=rng.uniform(*ranges.U),
                   alpha=np.deg2rad(rng.uniform(*ranges.alpha_deg)),
                   gamma=rng.uniform(*ranges.gamma))
    g, n = body.boundary(n_boundary, rng)
    q = _sample_outside(rng, n_queries, 2, ranges.box, body.inside, margin=0.02)
    surf = body.fields(g, inside="nan")
    return body, {"geometry": g, "normals": n, "params": body.params(), "queries": q,
                  "targets": body.fields(q), "surface_queries": g, "surface_targets": surf}


def sphere_case(rng: np.random.Generator, n_boundary: int, n_queries: int, box: float = 1.5
                ) -> tuple[Sphere, dict[str, np.ndarray]]:
    d = rng.standard_normal(3)
    body = Sphere(radius=rng.uniform(0.3, 0.7), center=tuple(rng.uniform(-0.2, 0.2, 3)),
                  U=rng.uniform(0.5, 1.5), direction=tuple(d / np.linalg.norm(d)))
    g, n = body.boundary(n_boundary, rng)
    q = _sample_outside(rng, n_queries, 3, box, body.inside, margin=0.02)
    return body, {"geometry": g, "normals": n, "params": body.params(), "queries": q,
                  "targets": body.fields(q), "surface_queries": g,
                  "surface_targets": body.fields(g)}


def laplace_case(rng: np.random.Generator, n_boundary: int, n_queries: int, grid: int = 97,
                 box: float = 1.5) -> tuple[object, dict[str, np.ndarray]]:
    from icml_smart.laplace import point_in_polygon, random_star_polygon, solve_stream_function

    poly = random_star_polygon(rng, k=max(4 * n_boundary, 128))
    U, alpha = rng.uniform(0.5, 1.5), np.deg2rad(rng.uniform(-30, 30))
    sol = solve_stream_function(poly, U=U, alpha=alpha, n=grid, half_width=2 * box)
    # surface points: random points on the polygon edges; normals from the edge direction
    seg = rng.integers(0, len(poly), n_boundary)
    t = rng.uniform(0, 1, n_boundary)[:, None]
    p0, p1 = poly[seg], poly[(seg + 1) % len(poly)]
    g = p0 + t * (p1 - p0)
    e = p1 - p0
    nrm = np.stack([e[:, 1], -e[:, 0]], -1)
    nrm /= np.linalg.norm(nrm, axis=-1, keepdims=True)
    nrm *= np.where(point_in_polygon(g + 1e-3 * nrm, poly), -1.0, 1.0)[:, None]
    h = sol.x[1] - sol.x[0]

    def near(q: np.ndarray) -> np.ndarray:
        return point_in_polygon(q, poly) | np.isnan(sol.fields(q, inside="nan")[..., 0])

    q = _sample_outside(rng, n_queries, 2, box, near)
    # the grid has no surface values: take them a cell and a half off the body, along the normal
    sq = np.clip(g + 1.5 * h * nrm, -2 * box, 2 * box)
    surf = sol.fields(sq, inside="nan")
    params = np.array([U, np.cos(alpha), np.sin(alpha), 0.0])
    return sol, {"geometry": g, "normals": nrm, "params": params, "queries": q,
                 "targets": sol.fields(q), "surface_queries": sq, "surface_targets": surf}


class PotentialFlowDataset(torch.utils.data.Dataset):
    """``n`` simulation cases, generated once from ``seed``.

    ``kind``: ``"ellipse"`` (exact 2-D, Joukowski, with circulation), ``"sphere"`` (exact 3-D)
    or ``"laplace"`` (finite differences past random smooth star-shaped bodies; slower, about
    0.1 s per case). Cases share ``n_boundary`` and ``n_queries`` so they batch without padding.
    """

    def __init__(self, n: int, n_boundary: int = 64, n_queries: int = 256, seed: int = 0,
                 kind: str = "ellipse", ranges: FlowRanges | None = None) -> None:
        if n < 1:
            raise ValueError(f"n={n}: a dataset needs at least one case")
        if n_boundary < 1 or n_queries < 1:
            raise ValueError(f"n_boundary={n_boundary}, n_queries={n_queries}: both must be >= 1")
        rng = np.random.default_rng(seed)
        self.kind = kind
        self.bodies, self.cases = [], []
        for _ in range(n):
            if kind == "ellipse":
                body, case = ellipse_case(rng, n_boundary, n_queries, ranges or FlowRanges())
            elif kind == "sphere":
                body, case = sphere_case(rng, n_boundary, n_queries)
            elif kind == "laplace":
                body, case = laplace_case(rng, n_boundary, n_queries)
            else:
                raise ValueError(f"kind={kind!r}: use 'ellipse', 'sphere' or 'laplace'")
            self.bodies.append(body)
            self.cases.append({k: torch.as_tensor(v, dtype=torch.float32)
                               for k, v in case.items()})

    @property
    def space_dim(self) -> int:
        return int(self.cases[0]["geometry"].shape[-1])

    @property
    def out_dim(self) -> int:
        return int(self.cases[0]["targets"].shape[-1])

    @property
    def param_dim(self) -> int:
        return int(self.cases[0]["params"].shape[-1])

    def __len__(self) -> int:
        return len(self.cases)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.cases[i]

    def batch(self, idx: list[int] | torch.Tensor) -> dict[str, torch.Tensor]:
        return collate([self.cases[int(i)] for i in idx])


def collate(cases: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack cases into a batch (all cases must share point counts)."""
    keys = cases[0].keys()
    try:
        return {k: torch.stack([c[k] for c in cases]) for k in keys}
    except RuntimeError as exc:
        raise ValueError(f"cases with different point counts cannot be stacked ({exc}); sample "
                         "the same n_boundary and n_queries for every case") from None


@dataclass
class ChannelNormalizer:
    """Per-channel z-scoring fitted on training targets."""

    mean: list[float]
    std: list[float]

    @classmethod
    def fit(cls, targets: torch.Tensor, eps: float = 1e-8) -> ChannelNormalizer:
        flat = targets.reshape(-1, targets.shape[-1]).double()
        flat = flat[torch.isfinite(flat).all(-1)]
        return cls(flat.mean(0).tolist(), (flat.std(0) + eps).tolist())

    def encode(self, y: torch.Tensor) -> torch.Tensor:
        m = torch.tensor(self.mean, dtype=y.dtype, device=y.device)
        s = torch.tensor(self.std, dtype=y.dtype, device=y.device)
        return (y - m) / s

    def decode(self, y: torch.Tensor) -> torch.Tensor:
        m = torch.tensor(self.mean, dtype=y.dtype, device=y.device)
        s = torch.tensor(self.std, dtype=y.dtype, device=y.device)
        return y * s + m
