"""Target-token log-probabilities with a closed-form, chunked backward.

``token_logprobs(logits, labels)`` returns log softmax(z)_y per row, in float32, like
``-F.cross_entropy(logits.float(), labels, reduction="none")`` (float64 for float64 logits), but:

* it never stores a float32 copy of the logits or of the log-softmax: the forward keeps only
  the per-row log-sum-exp, the backward recomputes softmax chunk by chunk and writes the gradient
  ``g * (e_y - softmax z)`` straight into a tensor of the logits' dtype. Peak memory is the
  logits, their gradient and one float32 chunk, which is no more than cross-entropy needs;
* rows whose label is ``ignore_index`` get log p = 0 and a zero gradient;
* the target entry of the gradient, ``g (1 - p_y)``, is formed as minus the sum of the row's
  other entries, so it keeps its relative precision as p_y -> 1 (``g - g p_y`` would not).

Every objective of the family is then an elementwise function of these log-probabilities
(:mod:`icml_beyond_nll.loss`).
"""

from __future__ import annotations

from typing import Any

DEFAULT_CHUNK_ELEMENTS = 1 << 22  # float32 elements per chunk (16 MiB)


def _chunk_rows(n: int, v: int, chunk_size: int | None) -> int:
    if chunk_size is not None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1 row, got {chunk_size}")
        return chunk_size
    return max(1, min(n, DEFAULT_CHUNK_ELEMENTS // max(v, 1)))


def _function() -> Any:
    import torch

    class _TokenLogProbs(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, logits: Any, labels: Any, valid: Any, rows: int) -> Any:
            n = logits.shape[0]
            acc = torch.float64 if logits.dtype == torch.float64 else torch.float32
            out = torch.zeros(n, dtype=acc, device=logits.device)
            lse = torch.zeros(n, dtype=acc, device=logits.device)
            idx = labels.clamp(min=0).unsqueeze(-1)
            for i in range(0, n, rows):
                x = logits[i:i + rows].to(acc)
                lse[i:i + rows] = torch.logsumexp(x, dim=-1)
                out[i:i + rows] = x.gather(-1, idx[i:i + rows]).squeeze(-1) - lse[i:i + rows]
            out = torch.where(valid, out, torch.zeros_like(out))
            ctx.save_for_backward(logits, idx, valid, lse)
            ctx.rows = rows
            return out

        @staticmethod
        def backward(ctx: Any, grad_out: Any) -> Any:
            logits, idx, valid, lse = ctx.saved_tensors
            rows = ctx.rows
            g = torch.where(valid, grad_out.to(lse.dtype), torch.zeros_like(lse))
            grad = torch.empty_like(logits)
            same = logits.dtype == lse.dtype
            for i in range(0, logits.shape[0], rows):
                gi = g[i:i + rows].unsqueeze(-1)
                # softmax * (-g), written in place (straight into grad when dtypes agree)
                buf = grad[i:i + rows] if same else None
                sm = torch.sub(logits[i:i + rows], lse[i:i + rows].unsqueeze(-1), out=buf)
                sm.exp_().mul_(-gi)
                # target entry g (1 - p_y) as minus the sum of the other entries: exact as p_y -> 1,
                # where g - g p_y would cancel (and the row sums to zero, like the true gradient)
                sm.scatter_(-1, idx[i:i + rows], 0.0)
                sm.scatter_(-1, idx[i:i + rows], -sm.sum(-1, keepdim=True))
                if not same:
                    grad[i:i + rows].copy_(sm)
            return grad, None, None, None

    return _TokenLogProbs


_FN: Any = None


def token_logprobs(logits: Any, labels: Any, *, ignore_index: int = -100,
                   chunk_size: int | None = None) -> Any:
    """log p(label) per row of ``logits`` (``[N, V]``, any float dtype) for integer ``labels``
    (``[N]``); float32 result (float64 for float64 logits), 0 where ``labels ==
    ignore_index``. Differentiable in ``logits``.
    ``chunk_size`` bounds the rows processed at once (default: 4M float32 elements)."""
    import torch

    global _FN
    if _FN is None:
        _FN = _function()
    if logits.dim() != 2 or labels.dim() != 1 or labels.shape[0] != logits.shape[0]:
        raise ValueError(f"token_logprobs wants logits [N, V] and labels [N], got "
                         f"{tuple(logits.shape)} and {tuple(labels.shape)}")
    if not torch.is_floating_point(logits):
        raise TypeError(f"logits must be a float tensor, got {logits.dtype}")
    labels = labels.to(logits.device)
    valid = labels != ignore_index
    if valid.any():
        lv = labels[valid]
        if int(lv.min()) < 0 or int(lv.max()) >= logits.shape[1]:
            raise ValueError(f"labels must be in [0, {logits.shape[1]}) or ignore_index "
                             f"{ignore_index}; got values from {int(lv.min())} to {int(lv.max())}")
    rows = _chunk_rows(logits.shape[0], logits.shape[1], chunk_size)
    logits = logits if logits.is_contiguous() else logits.contiguous()
    return _FN.apply(logits, labels, valid, rows)
