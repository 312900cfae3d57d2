"""Quality and speed metrics: Chamfer distance on surface samples (trimesh), valid-mesh rate,
bootstrap confidence intervals (thin calls into :mod:`icml.stats`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def sample_surface(vertices: Any, faces: Any, n_points: int = 1024, seed: int = 0) -> np.ndarray:
    """``n_points`` points uniformly on the surface (area-weighted), seeded."""
    import trimesh

    from icml_xspecmesh.meshio import to_trimesh

    mesh = to_trimesh(vertices, faces)
    if mesh.area <= 0:
        raise ValueError("the mesh has zero surface area: nothing to sample")
    pts, _ = trimesh.sample.sample_surface(mesh, n_points, seed=seed)
    return np.asarray(pts)


def chamfer_points(a: np.ndarray, b: np.ndarray) -> float:
    """Symmetric Chamfer distance: mean nearest-neighbour distance a->b plus b->a."""
    d = np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))
    return float(d.min(axis=1).mean() + d.min(axis=0).mean())


def chamfer_distance(mesh_a: tuple[Any, Any] | Any, mesh_b: tuple[Any, Any] | Any, *,
                     n_points: int = 1024, seed: int = 0) -> float:
    """Chamfer distance between two meshes (``(vertices, faces)`` tuples or trimesh meshes),
    from ``n_points`` surface samples each."""
    from icml_xspecmesh.meshio import from_trimesh

    va, fa = mesh_a if isinstance(mesh_a, tuple) else from_trimesh(mesh_a)
    vb, fb = mesh_b if isinstance(mesh_b, tuple) else from_trimesh(mesh_b)
    return chamfer_points(sample_surface(va, fa, n_points, seed),
                          sample_surface(vb, fb, n_points, seed + 1))


def chamfer_to_references(mesh: tuple[Any, Any], references: Sequence[np.ndarray], *,
                          n_points: int = 512, seed: int = 0) -> float:
    """Chamfer distance of a mesh to the nearest of several reference point clouds (the class
    template: posed samples of the generated mesh's class)."""
    pts = sample_surface(*mesh, n_points, seed)
    return min(chamfer_points(pts, r) for r in references)


def _finite(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if np.isfinite(v)]


def bootstrap_ci(values: Sequence[float], *, n_boot: int = 2000, alpha: float = 0.05,
                 seed: int = 0) -> tuple[float, float, float]:
    """Mean and percentile bootstrap (1 - alpha) interval over the finite values
    (:func:`icml.stats.mean_ci`); ``nan`` for none."""
    from icml import stats

    x = _finite(values)
    if not x:
        return float("nan"), float("nan"), float("nan")
    e = stats.mean_ci(x, level=1 - alpha, n_boot=n_boot, seed=seed)
    return e.value, e.lo, e.hi


def bootstrap_diff_ci(a: Sequence[float], b: Sequence[float], *, n_boot: int = 2000,
                      alpha: float = 0.05, seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``a`` minus mean of ``b`` (independent samples) with a bootstrap interval
    (:func:`icml.stats.unpaired_diff_ci`); ``nan`` when either has no finite value."""
    from icml import stats

    xa, xb = _finite(a), _finite(b)
    if not xa or not xb:
        return float("nan"), float("nan"), float("nan")
    e = stats.unpaired_diff_ci(xa, xb, level=1 - alpha, n_boot=n_boot, seed=seed)
    return e.value, e.lo, e.hi
