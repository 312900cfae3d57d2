"""The in-process federated simulator: one base model, one peft adapter per client, seeded
local training, a strategy's upload/aggregate/download each round, and byte accounting."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from icml_het_cpflora.adapters import (
    adapter_name,
    adapter_parameters,
    attach_client_adapters,
    init_seed,
    read_adapter,
    resolve_target_modules,
    write_adapter,
)
from icml_het_cpflora.config import FederationConfig, LoRAConfig
from icml_het_cpflora.ranks import ClientRankSpec
from icml_het_cpflora.strategies import Strategy, payload_bytes


class Diverged(FloatingPointError):
    """Local training produced a non-finite loss: the run diverged (a learning rate too large
    for the model, say). Raised as soon as it happens, naming the round and the client."""


@dataclass
class ClientDataset:
    """A client's training data as HF-style tensors: ``input_ids`` and ``labels`` (N, T) with
    -100 on positions without loss, optional ``attention_mask``, and optional ``prompt_ids``
    (the prompts alone, the OOD mixer's reference set)."""

    input_ids: Any
    labels: Any
    attention_mask: Any = None
    prompt_ids: Any = None

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass
class SimulationResult:
    """What a federated run leaves: the peft model with every client's adapter, the specs each
    client trained, per-round bytes per client (up, down), mean local losses and timings."""

    model: Any
    specs: list[ClientRankSpec]
    bytes_up: list[list[int]] = field(default_factory=list)
    bytes_down: list[list[int]] = field(default_factory=list)
    losses: list[list[float]] = field(default_factory=list)
    round_seconds: list[float] = field(default_factory=list)
    participants: list[list[int]] = field(default_factory=list)

    def adapter(self, client: int) -> str:
        return adapter_name(client)


def client_seeds(seed: int, client: int) -> tuple[int, int]:
    """(adapter-init seed, batch-sampling seed) of one client. Both backends use these, so a
    client's randomness never depends on which other clients exist or share its process."""
    return init_seed(seed, client), seed * 7919 + client


def round_seed(seed: int, round_: int, client: int) -> int:
    """The torch seed set before a client's local training in a round (LoRA dropout)."""
    return seed * 104_729 + round_ * 1_009 + client


def local_train(model: Any, name: str, data: ClientDataset, *, steps: int, lr: float,
                batch_size: int, train_A: bool, generator: Any,
                regularizer: Callable[[dict[str, Any]], Any] | None = None) -> float:
    """Train adapter ``name`` for ``steps`` AdamW steps (fresh optimizer, as the official code
    builds a new trainer each round); returns the mean task loss. ``regularizer`` (a
    strategy's extra local loss on ``{module: (A, B)}``) is added to the loss it optimises."""
    import torch

    from icml_het_cpflora.adapters import lora_layers

    factors = {p: (m.lora_A[name].weight, m.lora_B[name].weight)
               for p, m in lora_layers(model, name).items()} if regularizer else {}

    model.set_adapter(name)
    params = adapter_parameters(model, name, train_A=train_A)
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    model.train()
    total = 0.0
    n = len(data)
    for _ in range(steps):
        idx = torch.randint(0, n, (min(batch_size, n),), generator=generator)
        kw = {"input_ids": data.input_ids[idx], "labels": data.labels[idx]}
        if data.attention_mask is not None:
            kw["attention_mask"] = data.attention_mask[idx]
        loss = model(**kw).loss
        opt.zero_grad(set_to_none=True)
        (loss + regularizer(factors) if regularizer else loss).backward()
        opt.step()
        total += float(loss.detach())
    model.eval()
    for p in params:
        p.requires_grad_(False)
    return total / max(steps, 1)


def simulate(model: Any, datasets: Sequence[ClientDataset], specs: Sequence[ClientRankSpec],
             strategy: Strategy, federation: FederationConfig | None = None,
             lora: LoRAConfig | None = None, *, seed: int = 0,
             participation: Callable[[int], Sequence[int]] | None = None,
             progress: Callable[..., Any] | None = None) -> SimulationResult:
    """Run ``federation.rounds`` federated rounds of ``strategy`` in-process (``federation``
    and ``lora`` default to their configs' defaults). ``model`` (a transformers causal LM) is
    wrapped in place by peft. ``participation(round)`` returns the clients that take part in a
    round (default: all); a client that drops out keeps its adapter and neither uploads nor
    receives that round; the round completes with the others. A non-finite local loss raises
    :class:`Diverged`."""
    import math

    import torch

    fed = federation if federation is not None else FederationConfig()
    lora = lora if lora is not None else LoRAConfig()
    if not specs:
        raise ValueError("no clients: give at least one rank spec and one dataset")
    if len(datasets) != len(specs):
        raise ValueError(f"{len(datasets)} client datasets but {len(specs)} rank specs")
    for i, d in enumerate(datasets):
        if len(d) == 0:
            raise ValueError(f"client {i} has an empty dataset: give every client at least one "
                             "example or leave it out")
    targets = resolve_target_modules(lora.target_modules, len(specs))
    run_specs = strategy.ranks(specs)
    n = len(specs)
    # homogeneous peers start every client from client 0's init (same rank, same seed)
    model = attach_client_adapters(model, run_specs, targets, alpha=lora.alpha,
                                   dropout=lora.dropout, seed=seed,
                                   init_from=[0] * n if strategy.common_init else None)
    result = SimulationResult(model=model, specs=run_specs)
    num_samples = {i: len(d) for i, d in enumerate(datasets)}
    gens = [torch.Generator().manual_seed(client_seeds(seed, i)[1]) for i in range(n)]
    it = range(fed.rounds)
    if progress is not None:
        it = progress(it, desc=f"{strategy.name} rounds")
    for t in it:
        start = time.perf_counter()
        active = sorted(set(participation(t))) if participation else list(range(n))
        bad = [i for i in active if not 0 <= i < n]
        if bad:
            raise ValueError(f"participation({t}) names unknown clients {bad}")
        losses, uploads = [float("nan")] * n, {}
        for i in active:
            torch.manual_seed(round_seed(seed, t, i))  # lora dropout
            losses[i] = local_train(model, adapter_name(i), datasets[i],
                                    steps=fed.local_steps, lr=fed.lr,
                                    batch_size=fed.batch_size, train_A=strategy.train_A,
                                    generator=gens[i],
                                    regularizer=strategy.regularizer(run_specs[i]))
            if not math.isfinite(losses[i]):
                raise Diverged(f"{strategy.name} diverged: client {i}'s local loss is "
                               f"{losses[i]} in round {t + 1} (lr={fed.lr})")
            uploads[i] = strategy.upload(read_adapter(model, adapter_name(i)), run_specs[i])
        up = [payload_bytes(uploads[i]) if i in uploads else 0 for i in range(n)]
        down = [0] * n
        if uploads:
            downloads = strategy.aggregate(uploads, {i: run_specs[i] for i in uploads},
                                           {i: num_samples[i] for i in uploads})
            for i, payload in downloads.items():
                down[i] = payload_bytes(payload)
                new = strategy.download(read_adapter(model, adapter_name(i)), payload,
                                        run_specs[i])
                write_adapter(model, adapter_name(i), new)
        result.bytes_up.append(up)
        result.bytes_down.append(down)
        result.losses.append(losses)
        result.participants.append(active)
        result.round_seconds.append(time.perf_counter() - start)
    return result
