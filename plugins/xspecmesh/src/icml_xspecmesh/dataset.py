"""Synthetic primitive meshes with class conditioning (the CPU stand-in for BPT's shape data):
six convex primitives under random anisotropic scale, translation and (optionally) rotation
about z, tokenised by :class:`~icml_xspecmesh.tokenizer.MeshTokenizer`. A torch ``Dataset`` and
a padding collator usable with HF ``Trainer`` are provided."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from icml_xspecmesh.tokenizer import PAD, MeshTokenizer, triangulate_faces

CLASSES = ("tetrahedron", "cube", "octahedron", "square_pyramid", "triangular_prism",
           "icosahedron")


def _orient_outward(V: np.ndarray, F: np.ndarray) -> np.ndarray:
    c = V.mean(axis=0)
    a, b, d = V[F[:, 0]], V[F[:, 1]], V[F[:, 2]]
    n = np.cross(b - a, d - a)
    flip = (((a + b + d) / 3 - c) * n).sum(axis=1) < 0
    F = F.copy()
    F[flip] = F[flip][:, [0, 2, 1]]
    return F


def _hull_triangles(V: np.ndarray) -> np.ndarray:
    """Faces of a convex polytope whose faces are all triangles (no 4 coplanar hull points)."""
    tris = []
    for i, j, k in itertools.combinations(range(len(V)), 3):
        n = np.cross(V[j] - V[i], V[k] - V[i])
        if np.linalg.norm(n) < 1e-12:
            continue
        s = (V - V[i]) @ n
        others = np.delete(s, [i, j, k])
        if np.all(others <= 1e-9) or np.all(others >= -1e-9):
            tris.append([i, j, k])
    return np.asarray(tris, dtype=np.int64)


def primitive(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Vertices and outward-oriented triangle faces of a named primitive (see ``CLASSES``)."""
    if name == "tetrahedron":
        V = np.array([[1, 1, 1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1]], float)
        F = _hull_triangles(V)
    elif name == "cube":
        V = np.array(list(itertools.product([-1, 1], repeat=3)), float)
        quads = [[0, 1, 3, 2], [4, 6, 7, 5], [0, 4, 5, 1], [2, 3, 7, 6], [0, 2, 6, 4],
                 [1, 5, 7, 3]]
        F = triangulate_faces(quads)
    elif name == "octahedron":
        V = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]],
                     float)
        F = _hull_triangles(V)
    elif name == "square_pyramid":
        V = np.array([[-1, -1, -1], [1, -1, -1], [1, 1, -1], [-1, 1, -1], [0, 0, 1]], float)
        F = triangulate_faces([[0, 3, 2, 1], [0, 1, 4], [1, 2, 4], [2, 3, 4], [3, 0, 4]])
    elif name == "triangular_prism":
        ang = np.arange(3) * 2 * math.pi / 3
        tri = np.stack([np.cos(ang), np.sin(ang)], axis=1)
        V = np.concatenate([np.c_[tri, -np.ones(3)], np.c_[tri, np.ones(3)]])
        F = triangulate_faces([[0, 2, 1], [3, 4, 5], [0, 1, 4, 3], [1, 2, 5, 4], [2, 0, 3, 5]])
    elif name == "icosahedron":
        p = (1 + 5 ** 0.5) / 2
        V = np.array([v for a, b in itertools.product([-1, 1], repeat=2)
                      for v in ([0, a, b * p], [a, b * p, 0], [b * p, 0, a])], float)
        F = _hull_triangles(V)
    else:
        raise ValueError(f"unknown primitive {name!r}: use one of {', '.join(CLASSES)}")
    return V, _orient_outward(V, F)


def random_pose(V: np.ndarray, rng: np.random.Generator, *, scale: tuple[float, float] = (0.6, 1.4),
                rotate: bool = True) -> np.ndarray:
    """Random anisotropic scale, rotation about z and translation of a vertex array."""
    s = rng.uniform(*scale, size=3)
    th = rng.uniform(0, 2 * math.pi) if rotate else 0.0
    R = np.array([[math.cos(th), -math.sin(th), 0], [math.sin(th), math.cos(th), 0], [0, 0, 1]])
    return (V * s) @ R.T + rng.normal(0, 1, size=3)


@dataclass
class PrimitiveDataset:
    """Token sequences of posed primitives. ``sequences[i]`` is a list of ids, ``labels[i]`` the
    class index; ``__getitem__`` gives ``{"input_ids": LongTensor}`` for HF ``Trainer``."""

    sequences: list[list[int]]
    labels: list[int]
    tokenizer: MeshTokenizer
    meshes: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list, repr=False)

    def __len__(self) -> int:
        return len(self.sequences)

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        return {"input_ids": torch.tensor(self.sequences[i], dtype=torch.long)}

    @property
    def max_length(self) -> int:
        return max(len(s) for s in self.sequences)

    def of_class(self, label: int) -> list[int]:
        return [i for i, c in enumerate(self.labels) if c == label]


def make_primitive_dataset(n: int = 2000, *, seed: int = 0, tokenizer: MeshTokenizer | None = None,
                           classes: tuple[str, ...] = CLASSES, rotate: bool = False,
                           scale: tuple[float, float] = (0.6, 1.4)) -> PrimitiveDataset:
    """``n`` posed primitives, classes drawn uniformly, tokenised with class conditioning."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    tok = tokenizer or MeshTokenizer(n_classes=len(classes))
    if tok.n_classes < len(classes):
        raise ValueError(f"the tokenizer has {tok.n_classes} class tokens but {len(classes)} "
                         "classes were asked for: build MeshTokenizer(n_classes=len(classes))")
    rng = np.random.default_rng(seed)
    bases = [primitive(c) for c in classes]
    seqs, labels, meshes = [], [], []
    while len(seqs) < n:
        c = int(rng.integers(len(classes)))
        V, F = bases[c]
        Vp = random_pose(V, rng, scale=scale, rotate=rotate)
        try:
            Vq, Fq = tok.quantize(Vp, F)
        except ValueError:
            continue
        seqs.append(tok.encode_quantized(Vq, Fq, c))
        labels.append(c)
        meshes.append((tok.dequantize(Vq), Fq))
    return PrimitiveDataset(seqs, labels, tok, meshes)


def pad_collate(batch: list[dict[str, Any]] | list[list[int]], pad_id: int = PAD) -> dict[str, Any]:
    """Right-pad ``input_ids`` and build ``attention_mask`` and ``labels`` (-100 on padding)."""
    import torch

    rows = [b["input_ids"] if isinstance(b, dict) else torch.as_tensor(b) for b in batch]
    L = max(len(r) for r in rows)
    ids = torch.full((len(rows), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), L), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.as_tensor(r)
        mask[i, :len(r)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}
