"""trimesh interop: read any mesh trimesh reads into arrays the tokenizer takes, and export
generated meshes (OBJ, PLY, STL, GLB: whatever trimesh writes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def from_trimesh(mesh: Any) -> tuple[np.ndarray, np.ndarray]:
    """Vertices ``(n, 3)`` and triangle faces ``(m, 3)`` of a ``trimesh.Trimesh`` or a
    ``trimesh.Scene`` (its geometry concatenated with transforms applied)."""
    import trimesh

    if isinstance(mesh, trimesh.Scene):
        mesh = mesh.to_geometry() if hasattr(mesh, "to_geometry") else mesh.dump(concatenate=True)
    if not isinstance(mesh, trimesh.Trimesh):
        raise TypeError(f"expected a trimesh.Trimesh or Scene with faces, got "
                        f"{type(mesh).__name__} (a point cloud or path has no faces to encode)")
    return np.asarray(mesh.vertices, dtype=np.float64), np.asarray(mesh.faces, dtype=np.int64)


def to_trimesh(vertices: Any, faces: Any) -> Any:
    """A ``trimesh.Trimesh`` of arrays, without trimesh's merging or reordering."""
    import trimesh

    return trimesh.Trimesh(np.asarray(vertices, dtype=np.float64),
                           np.asarray(faces, dtype=np.int64), process=False)


def load_mesh(path: str | Path, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
    """Read a mesh file with ``trimesh.load`` (polygons come back triangulated)."""
    import trimesh

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no mesh file at {path}")
    return from_trimesh(trimesh.load(path, force="mesh", **kwargs))


def export_mesh(vertices: Any, faces: Any, path: str | Path) -> Path:
    """Write a mesh; the format follows the file suffix (``.obj``, ``.ply``, ``.stl``, ...)."""
    path = Path(path)
    to_trimesh(vertices, faces).export(path)
    return path
