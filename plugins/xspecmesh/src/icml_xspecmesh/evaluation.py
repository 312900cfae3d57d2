"""Mesh-generation evaluation of one decoding arm: backbone calls, accepted tokens per call,
wall time, valid-mesh rate and Chamfer distance to the class references."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from icml_xspecmesh.config import DecodeConfig
from icml_xspecmesh.dataset import CLASSES, primitive, random_pose
from icml_xspecmesh.metrics import bootstrap_ci, chamfer_to_references, sample_surface
from icml_xspecmesh.tokenizer import MeshTokenizer


@dataclass
class ArmResult:
    """Per-arm totals and per-mesh quality."""

    name: str
    rule: str
    n_calls: int = 0
    n_tokens: int = 0
    seconds: float = 0.0
    n_drafted: int = 0
    n_accepted: int = 0
    valid: list[bool] = field(default_factory=list)
    chamfer: list[float] = field(default_factory=list)
    sequences: list[list[int]] = field(default_factory=list, repr=False)

    @property
    def tokens_per_call(self) -> float:
        return self.n_tokens / max(self.n_calls, 1)

    @property
    def calls_per_mesh(self) -> float:
        return self.n_calls / max(len(self.valid), 1)

    @property
    def seconds_per_mesh(self) -> float:
        return self.seconds / max(len(self.valid), 1)

    @property
    def valid_rate(self) -> float:
        return float(np.mean(self.valid)) if self.valid else float("nan")

    @property
    def acceptance_rate(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else float("nan")

    def chamfer_ci(self, seed: int = 0) -> tuple[float, float, float]:
        return bootstrap_ci(self.chamfer, seed=seed)


def class_references(tokenizer: MeshTokenizer, *, n_refs: int = 8, n_points: int = 512,
                     seed: int = 0, rotate: bool = False) -> dict[int, list[np.ndarray]]:
    """Surface samples of ``n_refs`` posed, quantised instances per class: the class template
    a generated mesh is compared with (Chamfer to the nearest)."""
    rng = np.random.default_rng(seed)
    refs: dict[int, list[np.ndarray]] = {}
    for c, name in enumerate(CLASSES[:tokenizer.n_classes]):
        V, F = primitive(name)
        pts = []
        for i in range(n_refs):
            Vq, Fq = tokenizer.quantize(random_pose(V, rng, rotate=rotate), F)
            pts.append(sample_surface(tokenizer.dequantize(Vq), Fq, n_points, seed + i))
        refs[c] = pts
    return refs


def mesh_quality(tokenizer: MeshTokenizer, ids: list[int], label: int,
                 refs: dict[int, list[np.ndarray]], *, n_points: int = 512,
                 seed: int = 0) -> tuple[bool, float]:
    """(valid, Chamfer to the class references); Chamfer is NaN for an invalid mesh."""
    if not tokenizer.is_valid(ids):
        return False, math.nan
    try:
        V, F = tokenizer.decode(ids)
        return True, chamfer_to_references((V, F), refs[label], n_points=n_points, seed=seed)
    except ValueError:  # zero-area surface
        return True, math.nan


@dataclass
class Arm:
    """One decoder to evaluate: ``heads=None`` is the autoregressive baseline."""

    name: str
    heads: Any
    rule: str


def run_arms(model: Any, arms: list[Arm], tokenizer: MeshTokenizer, labels: list[int],
             decode: DecodeConfig | None = None, *, refs: dict[int, list[np.ndarray]],
             seed: int = 0, max_new_tokens: int = 200, n_points: int = 512,
             progress: Any = None) -> list[ArmResult]:
    """Generate one mesh per label with every arm (each with the settings of ``decode``,
    default ``DecodeConfig()``) and score it. Arms are interleaved mesh by mesh (in rotating
    order) so that every arm is timed under the same machine load; each arm has its own
    generator seeded with ``seed``."""
    import torch

    from icml_xspecmesh.speculative import speculative_generate

    device = next(model.parameters()).device
    gens = [torch.Generator(device=device).manual_seed(seed) for _ in arms]
    results = [ArmResult(a.name, a.rule) for a in arms]
    it = list(enumerate(labels))
    for i, label in (progress(it, desc="decoding") if progress else it):
        prompt = torch.tensor([tokenizer.prefix(label)], device=device)
        for j in [(i + s) % len(arms) for s in range(len(arms))]:
            arm, res = arms[j], results[j]
            out = speculative_generate(model, arm.heads, prompt, decode,
                                       max_new_tokens=max_new_tokens, acceptance=arm.rule,
                                       eos_token_id=2, pad_token_id=0, generator=gens[j])
            ids = out.sequences[0].tolist()
            res.n_calls += out.n_backbone_calls[0]
            res.n_tokens += out.n_new_tokens[0]
            res.seconds += out.seconds
            res.n_drafted += out.n_drafted[0]
            res.n_accepted += out.n_accepted[0]
            ok, cd = mesh_quality(tokenizer, ids, label, refs, n_points=n_points, seed=seed + i)
            res.valid.append(ok)
            res.chamfer.append(cd)
            res.sequences.append(ids)
    return results
