"""Het-CPFLoRA: the public API. Nothing heavy is imported here; torch, transformers and peft
load when an attribute is first used."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ClientRankSpec": "icml_het_cpflora.ranks",
    "parse_ranks": "icml_het_cpflora.ranks",
    "LoRAFactors": "icml_het_cpflora.subspace",
    "SplitAdapter": "icml_het_cpflora.subspace",
    "split_lora": "icml_het_cpflora.subspace",
    "merge_lora": "icml_het_cpflora.subspace",
    "shared_product": "icml_het_cpflora.server",
    "aggregation_weights": "icml_het_cpflora.server",
    "aggregate_shared": "icml_het_cpflora.server",
    "svd_refactor": "icml_het_cpflora.server",
    "attach_client_adapters": "icml_het_cpflora.adapters",
    "read_adapter": "icml_het_cpflora.adapters",
    "write_adapter": "icml_het_cpflora.adapters",
    "Strategy": "icml_het_cpflora.strategies",
    "HetCPFLoRA": "icml_het_cpflora.strategies",
    "FlexLoRA": "icml_het_cpflora.strategies",
    "FedIT": "icml_het_cpflora.strategies",
    "FFALoRA": "icml_het_cpflora.strategies",
    "FedSALoRA": "icml_het_cpflora.strategies",
    "HetLoRA": "icml_het_cpflora.strategies",
    "LocalOnly": "icml_het_cpflora.strategies",
    "STRATEGIES": "icml_het_cpflora.strategies",
    "make_strategy": "icml_het_cpflora.strategies",
    "payload_bytes": "icml_het_cpflora.strategies",
    "ClientDataset": "icml_het_cpflora.simulator",
    "SimulationResult": "icml_het_cpflora.simulator",
    "simulate": "icml_het_cpflora.simulator",
    "OODMixer": "icml_het_cpflora.mixer",
    "prompt_ppl": "icml_het_cpflora.mixer",
    "similarity": "icml_het_cpflora.mixer",
    "mixer_weights": "icml_het_cpflora.mixer",
    "subspace_weights": "icml_het_cpflora.mixer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'icml_het_cpflora' has no attribute {name!r}")
