"""Per-client peft LoRA adapters on one base model (no model copies): attach, read, write."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from icml_het_cpflora.ranks import ClientRankSpec
from icml_het_cpflora.subspace import Adapter, LoRAFactors


def adapter_name(i: int) -> str:
    return f"client{i}"


def resolve_target_modules(target_modules: Sequence[str] | Sequence[Sequence[str]],
                           num_clients: int) -> list[str]:
    """One target-module list for all clients; per-client lists must agree."""
    items = list(target_modules)
    if items and not isinstance(items[0], str):
        lists = [sorted(t) for t in items]
        if len(lists) != num_clients:
            raise ValueError(f"{len(lists)} target-module lists for {num_clients} clients")
        for i, t in enumerate(lists):
            if t != lists[0]:
                raise ValueError(f"client {i} targets {t} but client 0 targets {lists[0]}: "
                                 "every client must adapt the same modules (the server "
                                 "aggregates module by module)")
        items = lists[0]
    if not items:
        raise ValueError("target_modules is empty: name at least one linear layer, e.g. "
                         "['q_proj', 'v_proj']")
    return list(items)


def check_targets(model: Any, target_modules: Sequence[str],
                  specs: Sequence[ClientRankSpec]) -> None:
    """Raise a clear error when a target is missing or a rank does not fit a module."""
    import torch

    found: dict[str, list[tuple[str, Any]]] = {t: [] for t in target_modules}
    for name, mod in model.named_modules():
        for t in target_modules:
            if name == t or name.endswith("." + t):
                found[t].append((name, mod))
    missing = [t for t, hits in found.items() if not hits]
    if missing:
        raise ValueError(f"the base model ({type(model).__name__}) has no module named "
                         f"{missing}: pick target_modules among its linear layers (e.g. "
                         "q_proj, v_proj for Llama/Qwen2)")
    for hits in found.values():
        for name, mod in hits:
            if not isinstance(mod, torch.nn.Linear):
                raise ValueError(f"target module {name!r} is a {type(mod).__name__}, not a "
                                 "Linear layer")
            for i, spec in enumerate(specs):
                try:
                    spec.check_dims(mod.out_features, mod.in_features, name)
                except ValueError as exc:
                    raise ValueError(f"client {i}: {exc}") from None


def init_seed(seed: int, client: int) -> int:
    """The torch seed set before client ``client``'s adapter is initialised."""
    return seed * 1000 + client


def attach_client_adapters(model: Any, specs: Sequence[ClientRankSpec],
                           target_modules: Sequence[str], *, alpha: float = 16.0,
                           dropout: float = 0.05, seed: int = 0,
                           client_ids: Sequence[int] | None = None,
                           init_from: Sequence[int] | None = None) -> Any:
    """Wrap ``model`` in a peft model holding one LoRA adapter of rank r_i per client
    (``client0``, ``client1``, ...), each with peft's default init (A Kaiming, B = 0).

    ``client_ids`` names the clients (default 0..n-1; a Flower node attaches only its own);
    ``init_from[k]`` is the client whose init seed adapter k uses (default its own id)."""
    import torch
    from peft import LoraConfig, get_peft_model

    check_targets(model, target_modules, specs)
    ids = list(range(len(specs))) if client_ids is None else list(client_ids)
    inits = ids if init_from is None else list(init_from)
    if len(ids) != len(specs) or len(inits) != len(specs):
        raise ValueError("client_ids and init_from need one entry per spec")
    peft_model = None
    for i, init, spec in zip(ids, inits, specs):
        cfg = LoraConfig(r=spec.rank, lora_alpha=alpha, lora_dropout=dropout,
                         target_modules=list(target_modules), bias="none")
        torch.manual_seed(init_seed(seed, init))
        if peft_model is None:
            peft_model = get_peft_model(model, cfg, adapter_name=adapter_name(i))
        else:
            peft_model.add_adapter(adapter_name(i), cfg)
    for p in peft_model.parameters():
        p.requires_grad_(False)
    return peft_model


def lora_layers(peft_model: Any, name: str) -> dict[str, Any]:
    """Module path -> peft LoraLayer holding adapter ``name``."""
    from peft.tuners.lora import LoraLayer

    out = {}
    for path, mod in peft_model.named_modules():
        if isinstance(mod, LoraLayer) and name in mod.lora_A:
            out[path.replace("base_model.model.", "", 1)] = mod
    if not out:
        raise KeyError(f"no LoRA adapter named {name!r} on the model")
    return out


def read_adapter(peft_model: Any, name: str) -> Adapter:
    """A detached copy of adapter ``name``'s factors."""
    return {p: LoRAFactors(m.lora_A[name].weight.detach().clone(),
                           m.lora_B[name].weight.detach().clone())
            for p, m in lora_layers(peft_model, name).items()}


def write_adapter(peft_model: Any, name: str, adapter: Adapter) -> None:
    """Copy factors into adapter ``name`` (shapes must match)."""
    import torch

    layers = lora_layers(peft_model, name)
    if set(adapter) != set(layers):
        raise ValueError(f"adapter covers modules {sorted(adapter)[:3]}... but the model has "
                         f"{sorted(layers)[:3]}...")
    with torch.no_grad():
        for p, f in adapter.items():
            layers[p].lora_A[name].weight.copy_(f.A)
            layers[p].lora_B[name].weight.copy_(f.B)


def adapter_parameters(peft_model: Any, name: str, *, train_A: bool = True) -> list[Any]:
    """The trainable tensors of adapter ``name`` (A frozen when ``train_A`` is False)."""
    params = []
    for m in lora_layers(peft_model, name).values():
        if train_A:
            params.append(m.lora_A[name].weight)
        params.append(m.lora_B[name].weight)
    return params
