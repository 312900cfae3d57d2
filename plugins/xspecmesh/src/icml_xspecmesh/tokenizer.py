"""Mesh tokenizer (MeshAnything-v1 style, reconstructed): normalise to the unit cube, quantise,
put vertices and faces in a canonical order and emit 9 coordinate tokens per triangle.

Vocabulary layout: ``0 = PAD``, ``1 = BOS``, ``2 = EOS``, ``3 .. 3 + n_bins - 1`` coordinate
bins, then one token per class. A sequence is ``[BOS, class, 9 tokens per face..., EOS]``.
Only NumPy is needed; trimesh interop lives in :mod:`icml_xspecmesh.meshio`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

PAD, BOS, EOS = 0, 1, 2
NUM_SPECIAL = 3
TOKENS_PER_FACE = 9
_AXES = {"x": 0, "y": 1, "z": 2}


def _check_mesh(vertices: Any, faces: Any) -> tuple[np.ndarray, np.ndarray]:
    V = np.asarray(vertices, dtype=np.float64)
    F = np.asarray(faces)
    if V.ndim != 2 or V.shape[1] != 3:
        raise ValueError(f"vertices must have shape (n, 3), got {V.shape}")
    if not np.isfinite(V).all():
        bad = int((~np.isfinite(V)).any(axis=1).sum())
        raise ValueError(f"{bad} vertices are NaN or infinite: drop or repair them first "
                         "(e.g. trimesh's mesh.remove_infinite_values())")
    if F.size == 0:
        raise ValueError("the mesh has no faces: a mesh to encode needs at least one triangle")
    if F.ndim != 2 or F.shape[1] != 3:
        width = F.shape[1] if F.ndim == 2 else "ragged"
        raise ValueError(f"faces must be triangles, shape (m, 3); got {width} vertices per face: "
                         "triangulate first (trimesh.Trimesh(vertices, faces) or "
                         "icml_xspecmesh.triangulate_faces fan-triangulates polygons)")
    if not np.issubdtype(F.dtype, np.integer):
        if not np.all(np.mod(F, 1) == 0):
            raise ValueError("face indices must be integers")
        F = F.astype(np.int64)
    F = F.astype(np.int64)
    if F.min() < 0 or F.max() >= len(V):
        raise ValueError(f"face indices must lie in 0..{len(V) - 1} (the vertex count), got "
                         f"{F.min()}..{F.max()}")
    return V, F


def triangulate_faces(faces: list[list[int]] | Any) -> np.ndarray:
    """Fan-triangulate polygons (lists of vertex indices, length >= 3) into triangles."""
    tris = []
    for f in faces:
        f = list(f)
        if len(f) < 3:
            raise ValueError(f"a face needs at least 3 vertices, got {f}")
        tris.extend([f[0], f[i], f[i + 1]] for i in range(1, len(f) - 1))
    return np.asarray(tris, dtype=np.int64).reshape(-1, 3)


def normalize_vertices(vertices: np.ndarray) -> np.ndarray:
    """Centre the bounding box at the origin and scale its longest side to 1: coordinates in
    [-0.5, 0.5]. A mesh of zero extent is only centred."""
    V = np.asarray(vertices, dtype=np.float64)
    lo, hi = V.min(axis=0), V.max(axis=0)
    extent = float((hi - lo).max())
    V = V - (lo + hi) / 2
    return V / extent if extent > 0 else V


@dataclass
class MeshTokenizer:
    """Normalise, quantise and serialise triangle meshes.

    Args:
        n_bins: quantisation levels per axis.
        n_classes: number of class tokens (the condition; the paper uses a point cloud).
        vertex_order: the axis priority of the canonical vertex sort and the coordinate order
            inside a vertex, e.g. ``"zyx"`` (MeshGPT / MeshAnything).
        axis_tokens: one bin range per axis (``3 * n_bins`` coordinate tokens, PolyGen-style
            coordinate-type tokens) instead of one shared range (MeshAnything). The token then
            tells a RoPE backbone, which has no absolute positions, which coordinate comes next.
    """

    n_bins: int = 32
    n_classes: int = 6
    vertex_order: str = "zyx"
    axis_tokens: bool = False

    def __post_init__(self) -> None:
        if self.n_bins < 2:
            raise ValueError(f"n_bins must be >= 2, got {self.n_bins}")
        if self.n_classes < 0:
            raise ValueError(f"n_classes must be >= 0, got {self.n_classes}")
        if sorted(self.vertex_order) != ["x", "y", "z"]:
            raise ValueError(f"vertex_order must be a permutation of 'xyz', got "
                             f"{self.vertex_order!r}")
        self._perm = [_AXES[a] for a in self.vertex_order]

    # vocabulary -------------------------------------------------------------------------
    @property
    def n_coord_tokens(self) -> int:
        return self.n_bins * (3 if self.axis_tokens else 1)

    @property
    def vocab_size(self) -> int:
        return NUM_SPECIAL + self.n_coord_tokens + self.n_classes

    @property
    def coord_offset(self) -> int:
        return NUM_SPECIAL

    def class_token(self, label: int) -> int:
        if not 0 <= label < self.n_classes:
            raise ValueError(f"class label {label} out of range 0..{self.n_classes - 1}")
        return NUM_SPECIAL + self.n_coord_tokens + label

    def is_coord(self, token: int) -> bool:
        return NUM_SPECIAL <= token < NUM_SPECIAL + self.n_coord_tokens

    # geometry ---------------------------------------------------------------------------
    def quantize(self, vertices: Any, faces: Any) -> tuple[np.ndarray, np.ndarray]:
        """Canonical quantised mesh: integer vertex bins ``(n, 3)`` (in x, y, z) sorted by
        ``vertex_order``, faces re-indexed, each rotated so its smallest index comes first
        (orientation kept), degenerate and duplicate faces dropped, faces sorted. Raises
        ``ValueError`` when nothing is left."""
        V, F = _check_mesh(vertices, faces)
        q = np.clip(np.floor((normalize_vertices(V) + 0.5) * self.n_bins), 0, self.n_bins - 1)
        return self.canonicalize(q.astype(np.int64), F)

    def canonicalize(self, qverts: np.ndarray, faces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Canonical order of an already-quantised mesh (see :meth:`quantize`)."""
        qverts = np.asarray(qverts, dtype=np.int64)
        faces = np.asarray(faces, dtype=np.int64)
        uniq, inverse = np.unique(qverts, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        # sort unique vertices by the axis priority (lexsort: last key is primary)
        keys = tuple(uniq[:, a] for a in reversed(self._perm))
        order = np.lexsort(keys)
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        Vc = uniq[order]
        Fc = rank[inverse[faces]]
        keep = (Fc[:, 0] != Fc[:, 1]) & (Fc[:, 1] != Fc[:, 2]) & (Fc[:, 0] != Fc[:, 2])
        Fc = Fc[keep]
        if len(Fc) == 0:
            raise ValueError("every face collapsed to a degenerate triangle after quantisation: "
                             "raise n_bins or check the mesh's scale")
        shift = Fc.argmin(axis=1)
        idx = (shift[:, None] + np.arange(3)[None, :]) % 3
        Fc = np.take_along_axis(Fc, idx, axis=1)
        Fc = np.unique(Fc, axis=0)  # sorted lexicographically, duplicates dropped
        used = np.unique(Fc)
        remap = -np.ones(len(Vc), dtype=np.int64)
        remap[used] = np.arange(len(used))
        return Vc[used], remap[Fc]

    def dequantize(self, qverts: np.ndarray) -> np.ndarray:
        """Bin centres in [-0.5, 0.5]."""
        return (np.asarray(qverts, dtype=np.float64) + 0.5) / self.n_bins - 0.5

    # serialisation ----------------------------------------------------------------------
    def encode(self, vertices: Any, faces: Any, label: int | None = None) -> list[int]:
        """Token ids ``[BOS, class?, 9 per face..., EOS]`` of a mesh (any vertex/face order)."""
        Vq, Fq = self.quantize(vertices, faces)
        return self.encode_quantized(Vq, Fq, label)

    def encode_quantized(self, qverts: np.ndarray, faces: np.ndarray,
                         label: int | None = None) -> list[int]:
        coords = qverts[:, self._perm][faces]  # (m, 3 corners, 3 axes)
        if self.axis_tokens:
            coords = coords + self.n_bins * np.arange(3)
        coords = coords.reshape(-1) + NUM_SPECIAL
        head = [BOS] + ([self.class_token(label)] if label is not None else [])
        return head + coords.tolist() + [EOS]

    def prefix(self, label: int | None = None) -> list[int]:
        """The prompt of a conditional generation: ``[BOS, class]``."""
        return [BOS] + ([self.class_token(label)] if label is not None else [])

    def face_tokens(self, ids: Any) -> np.ndarray:
        """The coordinate tokens of a sequence (BOS, class, EOS, PAD and anything after EOS
        removed), validated."""
        ids = [int(t) for t in (ids.tolist() if hasattr(ids, "tolist") else ids)]
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"token ids {bad[:5]} are outside the vocabulary 0.."
                             f"{self.vocab_size - 1} of this tokenizer (n_bins={self.n_bins}, "
                             f"n_classes={self.n_classes})")
        if EOS in ids:
            ids = ids[:ids.index(EOS)]
        first_class = NUM_SPECIAL + self.n_coord_tokens
        body = [t for t in ids if t not in (PAD, BOS) and t < first_class]
        return np.asarray(body, dtype=np.int64)

    def decode(self, ids: Any, *, strict: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Vertices (bin centres, float) and faces of a token sequence, canonicalised.

        ``strict=True`` raises on a body whose length is not a multiple of 9; ``strict=False``
        drops the trailing partial face (useful on truncated generations)."""
        Vq, F = self.decode_quantized(ids, strict=strict)
        return self.dequantize(Vq), F

    def decode_quantized(self, ids: Any, *, strict: bool = True) -> tuple[np.ndarray, np.ndarray]:
        body = self.face_tokens(ids)
        rem = len(body) % TOKENS_PER_FACE
        if rem:
            if strict:
                raise ValueError(f"{len(body)} coordinate tokens is not a multiple of "
                                 f"{TOKENS_PER_FACE} (3 vertices x 3 coordinates per face): "
                                 "pass strict=False to drop the partial last face")
            body = body[:len(body) - rem]
        if len(body) == 0:
            raise ValueError("the sequence holds no complete face")
        coords = (body - NUM_SPECIAL).reshape(-1, 3, 3)
        if self.axis_tokens:
            slot = coords // self.n_bins
            if (slot != np.arange(3)).any():
                raise ValueError("a coordinate token sits in another axis's slot: with "
                                 "axis_tokens each vertex is one token of each axis in "
                                 f"vertex_order {self.vertex_order!r}")
            coords = coords % self.n_bins
        xyz = np.empty_like(coords)
        xyz[..., self._perm] = coords
        flat = xyz.reshape(-1, 3)
        faces = np.arange(len(flat)).reshape(-1, 3)
        return self.canonicalize(flat, faces)

    def is_valid(self, ids: Any) -> bool:
        """A generated sequence is a valid mesh when it ends with EOS, its body is whole faces of
        coordinate tokens only, and no face is degenerate or repeated (after canonicalisation
        nothing is dropped)."""
        try:
            ids = [int(t) for t in (ids.tolist() if hasattr(ids, "tolist") else ids)]
            if EOS not in ids:
                return False
            ids = ids[:ids.index(EOS)]
            start = 1 if ids and ids[0] == BOS else 0
            if start < len(ids) and ids[start] >= NUM_SPECIAL + self.n_coord_tokens:
                start += 1
            body = ids[start:]
            if not body or len(body) % TOKENS_PER_FACE or not all(map(self.is_coord, body)):
                return False
            _, F = self.decode_quantized(body)
            return len(F) == len(body) // TOKENS_PER_FACE
        except ValueError:
            return False
