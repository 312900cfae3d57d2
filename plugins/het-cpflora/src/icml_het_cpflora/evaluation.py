"""Personalization (own test set) and generalization (the other clients' test sets) of every
client's adapter, with fixed weights (w_s = w_p = 1) or the OOD mixer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from icml_het_cpflora.mixer import OODMixer, subspace_weights
from icml_het_cpflora.ranks import ClientRankSpec
from icml_het_cpflora.task import exact_match


def _accuracy(model: Any, name: str, spec: ClientRankSpec, enc: dict[str, Any], *,
              include_style: bool, mixer: OODMixer | None) -> float:
    import torch

    model.set_adapter(name)
    if mixer is None or spec.r_personal == 0 or spec.r_shared == 0:
        return float(exact_match(model, enc["input_ids"], enc["prompt_len"],
                                 include_style=include_style).float().mean())
    weights = mixer.weights(model, enc["prompt_ids"])
    # group prompts with the same weights (rounded to 1e-3) to batch the weighted passes
    groups: dict[tuple[float, float], list[int]] = {}
    for j, (ws, wp) in enumerate(weights):
        groups.setdefault((round(ws, 3), round(wp, 3)), []).append(j)
    hits = 0.0
    for (ws, wp), idx in groups.items():
        sel = torch.tensor(idx, device=enc["input_ids"].device)
        with subspace_weights(model, name, spec, ws, wp):
            hits += float(exact_match(model, enc["input_ids"][sel], enc["prompt_len"],
                                      include_style=include_style).float().sum())
    return hits / len(weights)


def evaluate_clients(model: Any, specs: Sequence[ClientRankSpec], names: Sequence[str],
                     tests: Sequence[dict[str, Any]], *,
                     mixers: Sequence[OODMixer] | None = None) -> list[tuple[float, float]]:
    """(local accuracy, other-clients accuracy) per client. Local counts the client's style
    mark; other-clients counts the answer digits only (another client's mark is unknowable)."""
    import torch

    out = []
    for i, (spec, name) in enumerate(zip(specs, names)):
        mixer = mixers[i] if mixers else None
        local = _accuracy(model, name, spec, tests[i], include_style=True, mixer=mixer)
        others = [tests[j] for j in range(len(tests)) if j != i]
        other = {"input_ids": torch.cat([t["input_ids"] for t in others]),
                 "prompt_ids": torch.cat([t["prompt_ids"] for t in others]),
                 "prompt_len": tests[i]["prompt_len"]}
        gen = _accuracy(model, name, spec, other, include_style=False, mixer=mixer)
        out.append((local, gen))
    return out
