"""Het-CPFLoRA: the public API. Nothing heavy is imported here; torch, transformers and peft
load when an attribute is first used."""

from __future__ import annotations

from icml.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "ClientRankSpec": "ranks",
    "parse_ranks": "ranks",
    "FederationConfig": "config",
    "LoRAConfig": "config",
    "StrategyConfig": "config",
    "HetCPFLoRAConfig": "config",
    "FlexLoRAConfig": "config",
    "HetLoRAConfig": "config",
    "HomogeneousConfig": "config",
    "LoRAFactors": "subspace",
    "SplitAdapter": "subspace",
    "split_lora": "subspace",
    "merge_lora": "subspace",
    "shared_product": "server",
    "aggregation_weights": "server",
    "aggregate_shared": "server",
    "svd_refactor": "server",
    "attach_client_adapters": "adapters",
    "read_adapter": "adapters",
    "write_adapter": "adapters",
    "Strategy": "strategies",
    "HetCPFLoRA": "strategies",
    "FlexLoRA": "strategies",
    "FedIT": "strategies",
    "FFALoRA": "strategies",
    "FedSALoRA": "strategies",
    "HetLoRA": "strategies",
    "LocalOnly": "strategies",
    "STRATEGIES": "strategies",
    "make_strategy": "strategies",
    "payload_bytes": "strategies",
    "ClientDataset": "simulator",
    "Diverged": "simulator",
    "SimulationResult": "simulator",
    "simulate": "simulator",
    "OODMixer": "mixer",
    "prompt_ppl": "mixer",
    "similarity": "mixer",
    "mixer_weights": "mixer",
    "subspace_weights": "mixer",
})
