"""The server side of Het-CPFLoRA: shared products, their weighted aggregation, and the
re-factorisation of the aggregate to each client's own shared rank by truncated SVD."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from icml_het_cpflora.subspace import Adapter, LoRAFactors

SCALINGS = ("raw", "alpha_over_r")
WEIGHTINGS = ("r_shared", "num_samples", "uniform")


def shared_product(shared: Adapter, *, scaling: str = "raw", alpha: float = 16.0,
                   rank: int | None = None) -> dict[str, Any]:
    """G = B_s A_s per module. ``scaling="raw"`` is the official code (no alpha/r);
    ``"alpha_over_r"`` multiplies by alpha / rank (``rank`` = the client's total rank r_i, the
    factor peft applies), so the aggregate is the real weight update."""
    if scaling not in SCALINGS:
        raise ValueError(f"scaling={scaling!r}: use one of {SCALINGS}")
    factor = 1.0
    if scaling == "alpha_over_r":
        if not rank:
            raise ValueError("scaling='alpha_over_r' needs the client's total rank")
        factor = alpha / rank
    return {name: f.product() * factor for name, f in shared.items()}


def aggregation_weights(r_shared: Sequence[int], num_samples: Sequence[int] | None = None,
                        by: str = "r_shared") -> list[float]:
    """Weights that sum to 1: proportional to r_s (official), to sample counts, or uniform.
    Clients with r_s = 0 contribute nothing and get weight 0."""
    if by not in WEIGHTINGS:
        raise ValueError(f"weighting={by!r}: use one of {WEIGHTINGS}")
    if by == "num_samples":
        if num_samples is None or len(num_samples) != len(r_shared):
            raise ValueError("weighting='num_samples' needs one sample count per client")
        raw = [float(n) if r > 0 else 0.0 for n, r in zip(num_samples, r_shared)]
    elif by == "uniform":
        raw = [1.0 if r > 0 else 0.0 for r in r_shared]
    else:
        raw = [float(r) for r in r_shared]
    total = sum(raw)
    if total <= 0:
        raise ValueError("no client has a shared subspace (all r_shared = 0 or no samples): "
                         "there is nothing to aggregate")
    return [w / total for w in raw]


def aggregate_shared(products: Sequence[dict[str, Any]],
                     weights: Sequence[float]) -> dict[str, Any]:
    """ΔG = Σ_i w_i G_i per module (every client must cover the same modules)."""
    if len(products) != len(weights) or not products:
        raise ValueError("aggregate_shared needs one weight per product and >= 1 product")
    names = set(products[0])
    for i, p in enumerate(products):
        if set(p) != names:
            diff = sorted(names ^ set(p))
            raise ValueError(f"client {i} has different target modules than client 0: "
                             f"{diff[:4]}; every client must adapt the same modules")
    out = {}
    for name in products[0]:
        acc = None
        for p, w in zip(products, weights):
            if w == 0:
                continue
            term = p[name] * w
            acc = term if acc is None else acc + term
        out[name] = acc if acc is not None else products[0][name] * 0
    return out


@dataclass
class Refactored:
    """Result of :func:`svd_refactor`: the factors and the Frobenius truncation error."""

    factors: LoRAFactors
    error: float


def svd_refactor(delta: Any, rank: int) -> Refactored:
    """Best rank-``rank`` factorisation of ``delta`` (out, in): B = U_r Σ_r, A = V_rᵀ.
    The error is √(Σ of the discarded σ²) (Eckart–Young)."""
    import torch

    out_f, in_f = delta.shape
    if rank < 0 or rank > min(out_f, in_f):
        raise ValueError(f"rank {rank} must be in 0..{min(out_f, in_f)} for a "
                         f"({out_f}, {in_f}) update")
    work = delta.float() if delta.dtype in (torch.bfloat16, torch.float16) else delta
    U, S, Vh = torch.linalg.svd(work, full_matrices=False)
    B = (U[:, :rank] * S[:rank]).to(delta.dtype)
    A = Vh[:rank].to(delta.dtype)
    err = float(torch.sqrt((S[rank:] ** 2).sum()))
    return Refactored(LoRAFactors(A.contiguous(), B.contiguous()), err)
