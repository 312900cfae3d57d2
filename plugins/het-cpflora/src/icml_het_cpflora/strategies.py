"""Federated LoRA strategies behind one interface. A strategy says which rank each client
trains, what it uploads, how the server aggregates, and how a client applies what it gets.

Payloads are flat ``{"<module>|<part>": tensor}`` dicts, so any transport (in-process, Flower
``ArrayRecord``) can carry them and the communication can be counted byte for byte.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from icml_het_cpflora.config import (
    FlexLoRAConfig,
    HetCPFLoRAConfig,
    HetLoRAConfig,
    HomogeneousConfig,
    LoRAConfig,
    StrategyConfig,
)
from icml_het_cpflora.ranks import ClientRankSpec
from icml_het_cpflora.server import (
    aggregate_shared,
    aggregation_weights,
    shared_product,
    svd_refactor,
)
from icml_het_cpflora.subspace import Adapter, LoRAFactors, merge_lora, split_lora

Payload = dict[str, Any]


def payload_bytes(payload: Payload) -> int:
    """Bytes of the tensors in a payload."""
    return int(sum(t.numel() * t.element_size() for t in payload.values()))


def _pack(**named: dict[str, Any]) -> Payload:
    out: Payload = {}
    for part, mats in named.items():
        for module, t in mats.items():
            out[f"{module}|{part}"] = t
    return out


def _unpack(payload: Payload, part: str) -> dict[str, Any]:
    return {k.rsplit("|", 1)[0]: v for k, v in payload.items() if k.rsplit("|", 1)[1] == part}


class Strategy:
    """Base class. Subclasses override :meth:`upload`, :meth:`aggregate`, :meth:`download`."""

    name = "base"
    train_A = True          # FFA-LoRA freezes A
    common_init = False     # start every client from client 0's init (homogeneous peers)
    section: ClassVar[str | None] = None  # the StrategyConfig field this class is built from

    def ranks(self, specs: Sequence[ClientRankSpec]) -> list[ClientRankSpec]:
        """The rank split each client trains under this strategy."""
        return list(specs)

    def upload(self, adapter: Adapter, spec: ClientRankSpec) -> Payload:
        return {}

    def aggregate(self, uploads: dict[int, Payload], specs: dict[int, ClientRankSpec],
                  num_samples: dict[int, int]) -> dict[int, Payload]:
        return {i: {} for i in uploads}

    def download(self, adapter: Adapter, payload: Payload, spec: ClientRankSpec) -> Adapter:
        return adapter

    def regularizer(self, spec: ClientRankSpec) -> Any:
        """An extra local loss ``f({module: (A, B)}) -> tensor`` added at every local step on
        the client, or None (HetLoRA's rank self-pruning uses it)."""
        return None


class LocalOnly(Strategy):
    """No communication: every client trains its own adapter."""

    name = "local"


@dataclass(eq=False)
class HetCPFLoRA(Strategy, HetCPFLoRAConfig):
    """Het-CPFLoRA: upload the shared factors (A_s, B_s); the server aggregates the products
    B_s A_s weighted by r_s (official) and re-factorises to each client's r_s by truncated SVD;
    the personal factors (A_p, B_p) never leave the client.

    The settings are :class:`~icml_het_cpflora.config.HetCPFLoRAConfig`'s; ``alpha`` is the
    clients' LoRA alpha (``LoRAConfig.alpha``, used by ``scaling="alpha_over_r"``), passed by
    :func:`make_strategy`."""

    name = "het-cpflora"
    section: ClassVar[str | None] = "het_cpflora"
    alpha: float = dataclasses.field(default_factory=lambda: LoRAConfig().alpha)
    # every client's r_s, in client order (set by :meth:`ranks`; ``r_shared_by_position``)
    all_r_shared: list[int] = dataclasses.field(default_factory=list, init=False, repr=False)

    def ranks(self, specs):
        self.all_r_shared = [s.r_shared for s in specs]
        return list(specs)

    def _weights(self, ids: list[int], selected: list[int], specs, num_samples) -> list[float]:
        if self.weighting != "r_shared_by_position":
            return aggregation_weights([specs[i].r_shared for i in ids],
                                       [num_samples[i] for i in ids], self.weighting)
        # official FedAvg_all_rank2: weights over ALL clients' r_s, the k-th selected client
        # takes the k-th weight (its position in the round's client set), no renormalisation
        if len(self.all_r_shared) < len(selected):
            raise ValueError("weighting='r_shared_by_position' needs every client's r_s: call "
                             "ranks(specs) with all clients first (simulate and Flower do)")
        total = sum(self.all_r_shared)
        pos = {i: k for k, i in enumerate(selected)}
        return [self.all_r_shared[pos[i]] / total for i in ids]

    def upload(self, adapter: Adapter, spec: ClientRankSpec) -> Payload:
        if spec.r_shared == 0:
            return {}
        sh = split_lora(adapter, spec).shared
        return _pack(A_s={m: f.A for m, f in sh.items()}, B_s={m: f.B for m, f in sh.items()})

    def aggregate(self, uploads, specs, num_samples):
        ids = [i for i in sorted(uploads) if uploads[i]]
        if not ids:
            return {i: {} for i in uploads}
        products = []
        for i in ids:
            A, B = _unpack(uploads[i], "A_s"), _unpack(uploads[i], "B_s")
            sh = {m: LoRAFactors(A[m], B[m]) for m in A}
            products.append(shared_product(sh, scaling=self.scaling, alpha=self.alpha,
                                           rank=specs[i].rank))
        w = self._weights(ids, sorted(uploads), specs, num_samples)
        delta = aggregate_shared(products, w)
        out: dict[int, Payload] = {i: {} for i in uploads}
        for i in ids:
            unscale = self.alpha / specs[i].rank if self.scaling == "alpha_over_r" else 1.0
            A, B = {}, {}
            for m, d in delta.items():
                f = svd_refactor(d, specs[i].r_shared).factors
                A[m], B[m] = f.A, f.B / unscale
            out[i] = _pack(A_s=A, B_s=B)
        return out

    def download(self, adapter, payload, spec):
        if not payload:
            return adapter
        A, B = _unpack(payload, "A_s"), _unpack(payload, "B_s")
        shared = {m: LoRAFactors(A[m], B[m]) for m in A}
        return merge_lora(shared, split_lora(adapter, spec).personal)


@dataclass(eq=False)
class FlexLoRA(Strategy, FlexLoRAConfig):
    """FlexLoRA (Bai et al. 2024): average the full products B A (weighted by sample count in
    the paper), then truncated SVD back to each client's own rank."""

    name = "flexlora"
    section: ClassVar[str | None] = "flexlora"

    def ranks(self, specs):
        return [ClientRankSpec(s.rank, 0) for s in specs]

    def upload(self, adapter, spec):
        return _pack(A={m: f.A for m, f in adapter.items()}, B={m: f.B for m, f in adapter.items()})

    def aggregate(self, uploads, specs, num_samples):
        ids = sorted(uploads)
        prods = [{m: _unpack(uploads[i], "B")[m] @ a for m, a in _unpack(uploads[i], "A").items()}
                 for i in ids]
        w = aggregation_weights([specs[i].rank for i in ids], [num_samples[i] for i in ids],
                                self.weighting)
        delta = aggregate_shared(prods, w)
        out = {}
        for i in ids:
            fs = {m: svd_refactor(d, specs[i].rank).factors for m, d in delta.items()}
            out[i] = _pack(A={m: f.A for m, f in fs.items()}, B={m: f.B for m, f in fs.items()})
        return out

    def download(self, adapter, payload, spec):
        A, B = _unpack(payload, "A"), _unpack(payload, "B")
        return {m: LoRAFactors(A[m], B[m]) for m in A}


@dataclass(eq=False)
class _Homogeneous(Strategy, HomogeneousConfig):
    """Peers that need one rank for all clients (FedIT, FFA-LoRA, FedSA-LoRA); ``rank=0``:
    the mean of the clients' ranks."""

    common_init = True
    section: ClassVar[str | None] = "homogeneous"
    parts: ClassVar[tuple[str, ...]] = ("A", "B")

    def ranks(self, specs):
        r = self.rank or max(1, round(sum(s.rank for s in specs) / len(specs)))
        return [ClientRankSpec(r, 0) for _ in specs]

    def upload(self, adapter, spec):
        named = {}
        if "A" in self.parts:
            named["A"] = {m: f.A for m, f in adapter.items()}
        if "B" in self.parts:
            named["B"] = {m: f.B for m, f in adapter.items()}
        return _pack(**named)

    def aggregate(self, uploads, specs, num_samples):
        ids = sorted(uploads)
        w = aggregation_weights([1] * len(ids), [num_samples[i] for i in ids], "num_samples")
        avg = aggregate_shared([uploads[i] for i in ids], w)
        return {i: dict(avg) for i in ids}

    def download(self, adapter, payload, spec):
        A, B = _unpack(payload, "A"), _unpack(payload, "B")
        return {m: LoRAFactors(A.get(m, f.A), B.get(m, f.B)) for m, f in adapter.items()}


@dataclass(eq=False)
class FedIT(_Homogeneous):
    """FedIT (Zhang et al. 2024): FedAvg of A and B."""

    name = "fedit"


@dataclass(eq=False)
class FFALoRA(_Homogeneous):
    """FFA-LoRA (Sun et al. 2024): A frozen at a common init, FedAvg of B."""

    name = "ffa-lora"
    train_A = False
    parts: ClassVar[tuple[str, ...]] = ("B",)


@dataclass(eq=False)
class FedSALoRA(_Homogeneous):
    """FedSA-LoRA (Guo et al. 2025): A shared (FedAvg), B kept local."""

    name = "fedsa-lora"
    parts: ClassVar[tuple[str, ...]] = ("A",)


def live_rank(adapter: Adapter) -> int:
    """The adapter's rank minus its trailing *pruned* components (A row and B column both
    exactly zero in every module). peft's init (B = 0, A random) counts as live."""
    r = next(iter(adapter.values())).A.shape[0]
    while r > 1 and all(not f.A[r - 1].any() and not f.B[:, r - 1].any()
                        for f in adapter.values()):
        r -= 1
    return r


@dataclass(eq=False)
class HetLoRA(Strategy, HetLoRAConfig):
    """HetLoRA (Cho et al. 2024): zero-pad every client's factors to the largest rank,
    aggregate, truncate back to each client's rank.

    ``weighting="sparsity"`` (the paper's sparsity-weighted aggregation, the default): per
    module, client k's weight is ‖B_k A_k‖_F / Σ_j ‖B_j A_j‖_F; ``"num_samples"``: sample
    counts. ``prune=True`` (default, the paper's): rank self-pruning. Local training adds
    ``reg · Σ_modules ‖B[:, lo:r] A[lo:r]‖_F`` on the last components (lo = ⌊gamma·r⌋ of the
    live rank r); when that tail norm is smaller than in the client's previous round, the
    client's rank drops to max(1, ⌊gamma·r⌋). The pruned components are zeroed in A and B
    (they then get no gradient and stay zero) and no longer travel. The decision is made on the
    server from the uploaded factors, which hold the same numbers the client has (the paper
    prunes on the client; reconstructed from the paper's description)."""

    name = "hetlora"
    section: ClassVar[str | None] = "hetlora"
    # server state, not settings
    live: dict[int, int] = dataclasses.field(default_factory=dict, init=False, repr=False)
    prev_tail: dict[int, float] = dataclasses.field(default_factory=dict, init=False,
                                                    repr=False)

    def ranks(self, specs):
        return [ClientRankSpec(s.rank, 0) for s in specs]

    def _tail(self, r: int) -> int:
        return min(int(self.gamma * r), r - 1) if r > 1 else 0

    def regularizer(self, spec):
        if not self.prune or self.reg == 0:
            return None

        def penalty(factors: dict[str, tuple[Any, Any]]) -> Any:
            with_zero = {m: LoRAFactors(a.detach(), b.detach()) for m, (a, b) in
                         factors.items()}
            r = live_rank(with_zero)
            lo = self._tail(r)
            return self.reg * sum(
                (b[:, lo:r] @ a[lo:r]).norm() for a, b in factors.values())

        return penalty

    def upload(self, adapter, spec):
        r = live_rank(adapter)
        return _pack(A={m: f.A[:r] for m, f in adapter.items()},
                     B={m: f.B[:, :r] for m, f in adapter.items()})

    def aggregate(self, uploads, specs, num_samples):
        import torch

        ids = sorted(uploads)
        ups = {i: (_unpack(uploads[i], "A"), _unpack(uploads[i], "B")) for i in ids}
        for i in ids:
            A, B = ups[i]
            r = next(iter(A.values())).shape[0]
            if self.prune:
                lo = self._tail(r)
                tail = float(sum((B[m][:, lo:r] @ A[m][lo:r]).norm() for m in A))
                if i in self.prev_tail and tail < self.prev_tail[i] and r > 1:
                    r = max(1, int(self.gamma * r))
                self.prev_tail[i] = tail
            self.live[i] = r
        rmax = max(next(iter(ups[i][0].values())).shape[0] for i in ids)
        samples = aggregation_weights([1] * len(ids), [num_samples[i] for i in ids],
                                      "num_samples")
        avg: dict[str, Any] = {}
        for m in ups[ids[0]][0]:
            if self.weighting == "sparsity":
                norms = [float((ups[i][1][m] @ ups[i][0][m]).norm()) for i in ids]
                total = sum(norms)
                w = [n / total for n in norms] if total > 0 else [1 / len(ids)] * len(ids)
            else:
                w = samples
            accA = accB = None
            for wi, i in zip(w, ids):
                A, B = ups[i][0][m], ups[i][1][m]
                pa = torch.cat([A, A.new_zeros(rmax - A.shape[0], A.shape[1])], 0) * wi
                pb = torch.cat([B, B.new_zeros(B.shape[0], rmax - B.shape[1])], 1) * wi
                accA = pa if accA is None else accA + pa
                accB = pb if accB is None else accB + pb
            avg[f"{m}|A"], avg[f"{m}|B"] = accA, accB
        out = {}
        for i in ids:
            r = min(self.live[i], specs[i].rank)
            out[i] = {k: (v[:r] if k.endswith("|A") else v[:, :r]).clone()
                      for k, v in avg.items()}
        return out

    def download(self, adapter, payload, spec):
        A, B = _unpack(payload, "A"), _unpack(payload, "B")
        out = {}
        for m, f in adapter.items():
            a, b = f.A.new_zeros(f.A.shape), f.B.new_zeros(f.B.shape)
            r = A[m].shape[0]
            a[:r], b[:, :r] = A[m], B[m]
            out[m] = LoRAFactors(a, b)
        return out


STRATEGIES = {c.name: c for c in (HetCPFLoRA, FlexLoRA, FedIT, FFALoRA, FedSALoRA, HetLoRA,
                                   LocalOnly)}


def make_strategy(name: str, config: StrategyConfig | None = None,
                  lora: LoRAConfig | None = None) -> Strategy:
    """Build a strategy by name (see ``STRATEGIES``) from its section of ``config`` (default:
    the defaults); ``lora`` gives Het-CPFLoRA the clients' LoRA alpha."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}: use one of {sorted(STRATEGIES)}")
    cls = STRATEGIES[name]
    if cls.section is None:
        return cls()
    section = getattr(config or StrategyConfig(), cls.section)
    kwargs = {f.name: getattr(section, f.name) for f in dataclasses.fields(section) if f.init}
    if cls is HetCPFLoRA:
        kwargs["alpha"] = (lora or LoRAConfig()).alpha
    return cls(**kwargs)
