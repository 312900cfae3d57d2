"""The function-preserving transforms (FPTs) as learnable modules, and the weight
parametrizations that fold them into a transformers model's linears.

Notation: column vectors, ``y = W x``; query head ``h`` reads KV head ``g(h) = h // n_rep``.

* :class:`ResidualRotation` Q (orthogonal, Cayley or matrix-exp map around a Hadamard/random
  init): readers ``W <- W Q^T``, writers ``W <- Q W``, embedding ``E <- E Q^T``.
* :class:`PreRoPETransform` T_g: per KV head and RoPE pair j a scaled 2x2 rotation
  ``s_j R(theta_j)``; keys ``W_k[g] <- T_g W_k[g]``, queries ``W_q[h] <- T_g(h)^{-T} W_q[h]``.
  Commutes with RoPE (both are per-pair 2-D rotations/scalings), so scores are unchanged.
* :class:`ValueTransform` M_g = R_g diag(exp(d_g)) (always invertible, cond = e^(max d - min d)):
  ``W_v[g] <- M_g W_v[g]``, o_proj columns of head h ``<- . M_g(h)^{-1}``.
* :class:`MLPScale` u = exp(log u): ``W_up <- diag(u) W_up``, ``W_down <- W_down diag(u)^{-1}``.
* The online grouped Hadamard H before down_proj merges ``H^T`` into ``W_down`` (see qlinear).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from icml_fptquant.hadamard import grouped_hadamard, hadamard, random_orthogonal


def _skew(a: torch.Tensor) -> torch.Tensor:
    return a - a.transpose(-1, -2)


@contextmanager
def pinned_threads(n: int) -> Iterator[None]:
    """Run the block at ``n`` torch threads (``n == 0``: as the caller set them), then restore.
    Float sums in matmuls and their backward are split by thread, so the same training run at
    1 and 2 threads ends in states that differ by rounding, which the static quantized model
    amplifies; a fixed count makes training the same at any thread count of the caller."""
    if n < 0:
        raise ValueError(f"threads={n} must be >= 0 (0 = the caller's setting)")
    before = torch.get_num_threads()
    if n and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def orthogonal_map(a: torch.Tensor, kind: str, threads: int = 0) -> torch.Tensor:
    """An orthogonal matrix from an unconstrained square (batch of) matrix ``a``; identity at
    ``a = 0``. ``cayley``: (I - S)^{-1}(I + S); ``matrix_exp``: exp(S), with S = a - a^T.

    ``threads``: torch threads of the Cayley solve (0: the caller's count). LAPACK's LU
    factorisation splits its work by thread count, so on CPU the solve's result changes in
    the last bits with the count (measured on SmolLM2's 576 x 576 rotation: up to 2e-7 at 1
    vs 2 threads; the matmuls of the merge and matrix_exp do not change). A fixed count makes
    Q, hence the merged weights and everything calibrated on them, the same at any thread
    count of the caller (the transforms' ``solve_threads`` option, 1 by default)."""
    s = _skew(a)
    if kind == "matrix_exp":
        return torch.linalg.matrix_exp(s)
    if kind == "cayley":
        eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device).expand_as(s)
        with pinned_threads(threads if a.device.type == "cpu" else 0):
            return torch.linalg.solve(eye - s, eye + s)
    raise ValueError(f"orthogonal_map {kind!r} unknown: use 'cayley' or 'matrix_exp'")


class ResidualRotation(nn.Module):
    """Learnable d x d orthogonal Q = Q0 · ortho(A), A initialised to zero. ``threads``: see
    :func:`orthogonal_map` (0: the caller's count)."""

    def __init__(self, d: int, init: str, kind: str, seed: int = 0,
                 dtype: Any = torch.float32, device: Any = None, threads: int = 0) -> None:
        super().__init__()
        if init == "hadamard":
            q0 = grouped_hadamard(d, dtype, device)
        elif init == "random":
            q0 = random_orthogonal(d, seed, dtype, device)
        else:
            raise ValueError(f"residual rotation init {init!r} unknown: use 'hadamard' or "
                             "'random'")
        self.kind, self.threads = kind, threads
        self.register_buffer("q0", q0)
        self.a = nn.Parameter(torch.zeros(d, d, dtype=dtype, device=device))
        self.cache: torch.Tensor | None = None  # set inside cached_rotation() only

    def matrix(self) -> torch.Tensor:
        if self.cache is not None:
            return self.cache
        return self.q0 @ orthogonal_map(self.a, self.kind, self.threads)


@contextmanager
def cached_rotation(rotation: ResidualRotation | None) -> Iterator[None]:
    """Compute Q once for every weight that reads it inside the block (one forward/backward
    pass; the parameters must not change inside it)."""
    if rotation is None or rotation.cache is not None:
        yield
        return
    rotation.cache = rotation.matrix()
    try:
        yield
    finally:
        rotation.cache = None


class PreRoPETransform(nn.Module):
    """Per KV head g and RoPE pair j (channels j and j + head_dim/2, transformers' half-split
    convention) the complex factor ``exp(sigma) * exp(i theta)``."""

    def __init__(self, kv_heads: int, head_dim: int, dtype: Any = torch.float32,
                 device: Any = None) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.theta = nn.Parameter(torch.zeros(kv_heads, head_dim // 2, dtype=dtype,
                                              device=device))
        self.log_scale = nn.Parameter(torch.zeros(kv_heads, head_dim // 2, dtype=dtype,
                                                  device=device))

    def _blocks(self, scale: torch.Tensor) -> torch.Tensor:
        c, s = torch.cos(self.theta) * scale, torch.sin(self.theta) * scale
        top = torch.cat([torch.diag_embed(c), torch.diag_embed(-s)], -1)
        bottom = torch.cat([torch.diag_embed(s), torch.diag_embed(c)], -1)
        return torch.cat([top, bottom], -2)

    def key_matrices(self) -> torch.Tensor:
        """T_g, shape (kv_heads, head_dim, head_dim)."""
        return self._blocks(torch.exp(self.log_scale))

    def query_matrices(self) -> torch.Tensor:
        """T_g^{-T}: the same rotation with scale exp(-sigma)."""
        return self._blocks(torch.exp(-self.log_scale))


class ValueTransform(nn.Module):
    """Per KV head M_g = R0 · ortho(A_g) · diag(exp(d_g)), invertible by construction.
    ``threads``: see :func:`orthogonal_map` (0: the caller's count)."""

    def __init__(self, kv_heads: int, head_dim: int, init: str, kind: str,
                 dtype: Any = torch.float32, device: Any = None, threads: int = 0) -> None:
        super().__init__()
        if init == "identity":
            r0 = torch.eye(head_dim, dtype=dtype, device=device)
        elif init == "hadamard":
            r0 = grouped_hadamard(head_dim, dtype, device)
        else:
            raise ValueError(f"value_init {init!r} unknown: use 'identity' or 'hadamard'")
        self.kind, self.threads = kind, threads
        self.register_buffer("r0", r0)
        self.a = nn.Parameter(torch.zeros(kv_heads, head_dim, head_dim, dtype=dtype,
                                          device=device))
        self.log_diag = nn.Parameter(torch.zeros(kv_heads, head_dim, dtype=dtype,
                                                 device=device))

    def rotation(self) -> torch.Tensor:
        return self.r0 @ orthogonal_map(self.a, self.kind, self.threads)

    def matrices(self) -> torch.Tensor:
        return self.rotation() * torch.exp(self.log_diag).unsqueeze(-2)

    def inverses(self) -> torch.Tensor:
        return torch.exp(-self.log_diag).unsqueeze(-1) * self.rotation().transpose(-1, -2)

    def condition_numbers(self) -> torch.Tensor:
        d = self.log_diag.detach()
        return torch.exp(d.amax(-1) - d.amin(-1))


class MLPScale(nn.Module):
    """Per intermediate channel scale u = exp(log_u)."""

    def __init__(self, ffn: int, dtype: Any = torch.float32, device: Any = None) -> None:
        super().__init__()
        self.log_u = nn.Parameter(torch.zeros(ffn, dtype=dtype, device=device))

    def scale(self) -> torch.Tensor:
        return torch.exp(self.log_u)


# --- parametrizations: functions of the original weight (or bias) -------------------------

class ReaderRotation(nn.Module):
    """weight ``(out, d) -> W Q^T`` (also the embedding ``E Q^T``)."""

    def __init__(self, rot: ResidualRotation) -> None:
        super().__init__()
        self.rot = rot

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w @ self.rot.matrix().T.to(w.dtype)


class WriterRotation(nn.Module):
    """weight ``(d, in) -> Q W``; bias ``(d,) -> Q b``."""

    def __init__(self, rot: ResidualRotation) -> None:
        super().__init__()
        self.rot = rot

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return self.rot.matrix().to(w.dtype) @ w


def per_head(m: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Per-KV-head matrices ``(kv_heads, ...)`` -> per query head ``(kv_heads * n_rep, ...)``,
    head h getting ``m[h // n_rep]``. Expand and reshape rather than ``m[index]``: the backward
    is then a plain sum over the ``n_rep`` copies, the same on every run, while advanced
    indexing's backward (an accumulating ``index_put_``) gave different last bits from run to
    run with two CPU threads (measured), which the trained transforms magnified."""
    if n_rep == 1:
        return m
    return m.unsqueeze(1).expand(m.shape[0], n_rep, *m.shape[1:]).reshape(-1, *m.shape[1:])


class HeadLeft(nn.Module):
    """Left-multiply each head's block of rows (or bias entries) by a per-KV-head matrix."""

    def __init__(self, source: nn.Module, which: str, heads: int, n_rep: int) -> None:
        super().__init__()
        if heads % n_rep:
            raise ValueError(f"heads={heads} is not a multiple of n_rep={n_rep}")
        self.source = source
        self.which = which
        self.n_rep = n_rep

    def mats(self) -> torch.Tensor:
        if self.which == "query":
            return self.source.query_matrices()
        if self.which == "key":
            return self.source.key_matrices()
        return self.source.matrices()

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        m = per_head(self.mats().to(w.dtype), self.n_rep)
        h, dh = m.shape[0], m.shape[1]
        if w.dim() == 1:
            return (m @ w.reshape(h, dh, 1)).reshape(-1)
        return (m @ w.reshape(h, dh, -1)).reshape(w.shape)


class OProjValueInverse(nn.Module):
    """o_proj weight ``(d, heads*head_dim)``: columns of head h right-multiplied by
    ``M_g(h)^{-1}``."""

    def __init__(self, value: ValueTransform, heads: int, n_rep: int) -> None:
        super().__init__()
        if heads % n_rep:
            raise ValueError(f"heads={heads} is not a multiple of n_rep={n_rep}")
        self.value = value
        self.n_rep = n_rep

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        minv = per_head(self.value.inverses().to(w.dtype), self.n_rep)
        d = w.shape[0]
        h, dh = minv.shape[0], minv.shape[1]
        return torch.einsum("ohj,hjk->ohk", w.reshape(d, h, dh), minv).reshape(d, h * dh)


class RowScale(nn.Module):
    """up_proj weight rows (or bias) times u."""

    def __init__(self, mlp: MLPScale) -> None:
        super().__init__()
        self.mlp = mlp

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        u = self.mlp.scale().to(w.dtype)
        return w * (u.unsqueeze(1) if w.dim() == 2 else u)


class ColInverseScale(nn.Module):
    """down_proj weight columns divided by u."""

    def __init__(self, mlp: MLPScale) -> None:
        super().__init__()
        self.mlp = mlp

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w / self.mlp.scale().to(w.dtype).unsqueeze(0)


class ColHadamard(nn.Module):
    """down_proj weight ``W -> W H^T`` for the online Hadamard ``x -> H x`` on its input."""

    def __init__(self, block: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("block", block)

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        from icml_fptquant.hadamard import apply_grouped

        return apply_grouped(w, self.block)


class ColHeadMix(nn.Module):
    """o_proj weight ``W -> W (M kron I)^T`` for the online head mix ``x -> (M kron I) x``."""

    def __init__(self, mix: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mix", mix)

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        from icml_fptquant.qlinear import apply_head_mix

        return apply_head_mix(w, self.mix)


def head_mix_matrix(heads: int, seed: int, dtype: Any, device: Any) -> torch.Tensor:
    """Orthogonal ``heads x heads`` matrix: a normalised Hadamard when ``heads`` is a power of
    two, else a seeded random orthogonal matrix (no Sylvester Hadamard of that order)."""
    if heads & (heads - 1) == 0:
        return hadamard(heads, dtype, device)
    return random_orthogonal(heads, seed + 7919, dtype, device)


def hadamard_block(n: int, dtype: Any, device: Any) -> torch.Tensor:
    from icml_fptquant.hadamard import largest_pow2_divisor

    return hadamard(largest_pow2_divisor(n), dtype, device)
