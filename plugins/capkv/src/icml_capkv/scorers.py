"""Token scorers behind one interface: CapKV and the eviction baselines it unifies.

Every scorer maps the prefill state of one attention layer to a score per KV head and token,
shape ``(B, H_kv, T)``; higher means keep. Inputs travel in a :class:`ScoreInputs`:

* ``keys``/``values``: ``(B, H_kv, T, d)`` as cached (keys after RoPE),
* ``queries``: ``(B, H_q, T_q, d)`` the last ``T_q`` prefill queries after RoPE (SnapKV, H2O),
* ``query_anchor``: ``(B, H_q, d)`` CapKV's anchor (mean pre-RoPE query rotated by the average
  future RoPE matrix).

Query heads map to KV heads as ``h // (H_q // H_kv)`` (the transformers ``repeat_kv`` layout).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from icml_capkv.config import PressConfig

# The scorers' defaults are the press settings' (written once, in icml_capkv.config.PressConfig);
# SnapKV's own kernel and pooling defaults live here and SnapKVPress reads them.
_PRESS = PressConfig()
SNAPKV_KERNEL = 5
SNAPKV_POOLING = "full"

__all__ = ["ScoreInputs", "capkv_relevance", "capkv_scores", "h2o_scores", "knorm_scores",
           "random_scores", "snapkv_scores", "streaming_scores"]


@dataclass
class ScoreInputs:
    """The tensors a scorer may read. ``queries``/``query_anchor`` may be None when unused."""

    keys: torch.Tensor
    values: torch.Tensor
    queries: torch.Tensor | None = None
    query_anchor: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.keys.ndim != 4 or self.keys.shape != self.values.shape:
            raise ValueError(f"keys and values must both have shape (B, H_kv, T, d), got "
                             f"{tuple(self.keys.shape)} and {tuple(self.values.shape)}")
        for name in ("queries", "query_anchor"):
            q = getattr(self, name)
            if q is None:
                continue
            if q.shape[0] != self.keys.shape[0] or q.shape[-1] != self.keys.shape[-1]:
                raise ValueError(f"{name} must share batch size and head dim with keys, got "
                                 f"{tuple(q.shape)} vs keys {tuple(self.keys.shape)}")
            if q.shape[1] % self.keys.shape[1]:
                raise ValueError(f"{name} has {q.shape[1]} heads, not a multiple of the "
                                 f"{self.keys.shape[1]} KV heads")

    def need(self, name: str, scorer: str) -> torch.Tensor:
        t = getattr(self, name)
        if t is None:
            raise ValueError(f"the {scorer} scorer needs ScoreInputs.{name}; pass it (the press "
                             "hook computes it from the model)")
        return t


def _group(t: torch.Tensor, n_kv: int) -> torch.Tensor:
    """(B, H_q, ...) -> (B, H_kv, n_rep, ...)."""
    return t.reshape(t.shape[0], n_kv, t.shape[1] // n_kv, *t.shape[2:])


def capkv_relevance(keys: torch.Tensor, query_anchor: torch.Tensor, tau: float = _PRESS.tau,
                    normalize: bool = _PRESS.normalize, n_sink: int = 0) -> torch.Tensor:
    """Query relevance ``w`` of shape ``(B, H_kv, n_rep, T)``.

    ``w_i = exp(tau * (c_i - max_j c_j))`` where ``c_i`` is ``cos(k_i, mu_q)`` (``normalize``, as
    in the authors' kvpress scorer) or ``k_i . mu_q / sqrt(d)`` (raw attention logit, closer to
    the paper's dot product). The max runs over non-sink tokens; ``tau = 0`` gives ``w = 1``.
    """
    n_kv = keys.shape[1]
    dt = torch.float64 if keys.dtype == torch.float64 else torch.float32
    k = keys.to(dt)
    mu = _group(query_anchor.to(dt), n_kv)  # (B, H_kv, r, d)
    if normalize:
        k = torch.nn.functional.normalize(k, dim=-1)
        mu = torch.nn.functional.normalize(mu, dim=-1)
        logit = (mu @ k.transpose(-1, -2)).clamp(-1.0, 1.0)  # rounding can pass +-1
    else:
        logit = (mu @ k.transpose(-1, -2)) / math.sqrt(k.shape[-1])
    ref = logit[..., n_sink:] if logit.shape[-1] > n_sink else logit
    return torch.exp(tau * (logit - ref.amax(-1, keepdim=True)))


def capkv_scores(inputs: ScoreInputs, tau: float = _PRESS.tau, ridge: float = _PRESS.ridge,
                 normalize: bool = _PRESS.normalize, n_sink: int = _PRESS.n_sink,
                 capacity_vectors: str = _PRESS.capacity_vectors) -> torch.Tensor:
    """CapKV: relevance-weighted ridge leverage of the capacity vectors, averaged over the query
    heads of each KV head. Sinks (the first ``n_sink`` tokens) are left out of ``A``; their
    score is set above every other so any top-k keeps them.

    Cost per query head: one ``(d, T) x (T, d)`` product for its Gram matrix ``A``, one
    ``d x d`` Cholesky factor (batched over all heads) and one triangular solve for the
    quadratic forms ``u_t^T A^-1 u_t``: ``O(T d^2)``, no Python loop over heads and nothing of
    size ``T x T``."""
    if capacity_vectors not in ("values", "keys"):
        raise ValueError(f"capacity_vectors must be 'values' or 'keys', got {capacity_vectors!r}")
    if not ridge > 0:
        raise ValueError(f"ridge must be > 0 (the noise variance), got {ridge}")
    keys, values = inputs.keys, inputs.values
    B, n_kv, T, d = keys.shape
    anchor = inputs.need("query_anchor", "capkv")
    w = capkv_relevance(keys, anchor, tau, normalize, n_sink)  # (B, H_kv, r, T)
    if n_sink >= T:
        return torch.ones(B, n_kv, T, dtype=w.dtype, device=w.device)  # all sinks: keep all
    # Sinks are not in A: work on the non-sink tokens only.
    u = (values if capacity_vectors == "values" else keys)[:, :, n_sink:].to(w.dtype)
    w = w[..., n_sink:]  # (B, H_kv, r, T - n_sink)
    ub = u.unsqueeze(2)  # (B, H_kv, 1, T', d), broadcast over the r query heads of a KV head
    # A_j = ridge I + sum_t w_jt u_t u_t^T for every query head j: (B, H_kv, r, d, d)
    A = (w.unsqueeze(-1) * ub).transpose(-1, -2) @ ub
    A.diagonal(dim1=-2, dim2=-1).add_(ridge)
    L = torch.linalg.cholesky(A)  # batched over (B, H_kv, r): A is SPD
    # u_t^T A_j^-1 u_t = ||L_j^-1 u_t||^2, one batched triangular solve for all tokens.
    Z = torch.linalg.solve_triangular(L, ub.transpose(-1, -2), upper=False)  # (B, H_kv, r, d, T')
    s = (w * Z.square().sum(-2)).mean(2)  # (B, H_kv, T')
    if n_sink == 0:
        return s
    top = (s.amax(-1, keepdim=True) + 1.0).expand(B, n_kv, n_sink)
    return torch.cat([top, s], -1)


def knorm_scores(inputs: ScoreInputs) -> torch.Tensor:
    """Key-norm baseline: keep the keys with the *smallest* norm (score ``-||k||``)."""
    return -inputs.keys.float().norm(dim=-1)


def streaming_scores(inputs: ScoreInputs) -> torch.Tensor:
    """StreamingLLM: the most recent tokens score highest (sinks are kept by the selector)."""
    B, n_kv, T, _ = inputs.keys.shape
    pos = torch.arange(T, dtype=torch.float32, device=inputs.keys.device)
    return pos.expand(B, n_kv, T).clone()


def random_scores(inputs: ScoreInputs, generator: torch.Generator | None = None) -> torch.Tensor:
    """Uniform random scores (drawn on CPU from ``generator`` for reproducibility)."""
    B, n_kv, T, _ = inputs.keys.shape
    return torch.rand(B, n_kv, T, generator=generator).to(inputs.keys.device)


def _attention_probs(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Causal softmax attention of the last T_q queries over T keys: (B, H_kv, r, T_q, T)."""
    n_kv, T = keys.shape[1], keys.shape[2]
    q = _group(queries.float(), n_kv)  # (B, H_kv, r, Tq, d)
    Tq = q.shape[3]
    logits = torch.einsum("bhrqd,bhtd->bhrqt", q, keys.float()) / math.sqrt(keys.shape[-1])
    qpos = torch.arange(T - Tq, T, device=keys.device)[:, None]
    kpos = torch.arange(T, device=keys.device)[None, :]
    logits = logits.masked_fill(kpos > qpos, float("-inf"))
    return logits.softmax(-1)


def snapkv_scores(inputs: ScoreInputs, window: int = _PRESS.window,
                  kernel: int = SNAPKV_KERNEL, pooling: str = SNAPKV_POOLING) -> torch.Tensor:
    """SnapKV: attention of the last ``window`` queries (the observation window), averaged over
    window queries and the query heads of a KV head, smoothed by average pooling of width
    ``kernel``; the window itself scores highest (always kept).

    ``pooling="full"`` (default) pools over all ``T`` positions and averages over the positions
    inside the sequence only (``count_include_pad=False``), so the tokens just before the window
    are smoothed with the window's own attention. ``pooling="kvpress"`` is kvpress's
    ``SnapKVPress``: only the ``T - window`` keys before the window are scored and pooled, with
    zero padding counted in the average at both ends (the first and the last ``kernel // 2``
    scores before the window are shrunk), and the window gets ``max + 1``."""
    if pooling not in ("full", "kvpress"):
        raise ValueError(f"pooling must be 'full' or 'kvpress', got {pooling!r}")
    q = inputs.need("queries", "snapkv")
    T = inputs.keys.shape[2]
    window = max(1, min(window, q.shape[2], T))
    probs = _attention_probs(q[:, :, -window:], inputs.keys)  # (B, H_kv, r, w, T)
    s = probs.mean(3).mean(2)  # (B, H_kv, T)
    B, H, _ = s.shape
    if pooling == "kvpress":
        if T <= window:
            raise ValueError(f"kvpress pooling needs more than window={window} tokens, got {T}")
        s = s[..., : T - window]
        if kernel > 1:
            s = torch.nn.functional.avg_pool1d(s.reshape(B * H, 1, T - window), kernel,
                                               stride=1, padding=kernel // 2,
                                               count_include_pad=True).reshape(B, H, -1)
            s = s[..., : T - window]
        top = s.amax() + 1.0  # kvpress pads with the global max + 1
        return torch.cat([s, top.expand(B, H, window)], -1)
    if kernel > 1:
        s = torch.nn.functional.avg_pool1d(s.reshape(B * H, 1, T), kernel, stride=1,
                                           padding=kernel // 2, count_include_pad=False)
        s = s.reshape(B, H, -1)[..., :T]
    s = s.clone()
    s[..., T - window:] = s.amax(-1, keepdim=True) + 1.0
    return s


def h2o_scores(inputs: ScoreInputs) -> torch.Tensor:
    """H2O-style heavy hitters: attention each key received from every prefill query, summed
    and divided by the number of queries that could see it (causal), averaged over the group."""
    q = inputs.need("queries", "h2o")
    T = inputs.keys.shape[2]
    probs = _attention_probs(q, inputs.keys)  # (B, H_kv, r, Tq, T)
    Tq = q.shape[2]
    seen = torch.arange(T, device=q.device)
    n_seen = (T - torch.maximum(seen, torch.tensor(T - Tq, device=q.device))).clamp(min=1)
    return (probs.sum(3) / n_seen).mean(2)
