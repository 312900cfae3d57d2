"""Quantizers: per-output-channel weights (RTN, GPTQ-style, NF4), static per-tensor activations
and static per-head KV cache, all as fake quantization with straight-through estimators."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

NF4_LEVELS = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
              -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
              0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
              0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
              0.7229568362236023, 1.0)


def check_bits(bits: int, what: str = "bits") -> int:
    """Validate a bit width: 2..16 (16 means no quantization)."""
    if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 16:
        raise ValueError(f"{what}={bits!r} is out of range: use an integer from 2 to 16 "
                         "(16 = keep full precision)")
    return bits


_FROZEN: dict | None = None


@contextmanager
def frozen_rounding(mode: str) -> Iterator[None]:
    """Checking aid for the straight-through estimator (STE). ``mode="record"``: run as usual
    and remember every rounding offset ``round(x) - x`` in call order; ``mode="replay"``: add
    the recorded offsets as constants instead of rounding. With the offsets frozen the loss is
    a smooth function of the transform parameters whose true gradient is exactly the STE
    gradient at the recorded point, so finite differences can check it."""
    global _FROZEN
    if mode not in ("record", "replay"):
        raise ValueError(f"mode {mode!r} unknown: use 'record' or 'replay'")
    if mode == "record":
        _FROZEN = {"mode": "record", "offsets": [], "i": 0}
    elif _FROZEN is None or not _FROZEN["offsets"]:
        raise ValueError("nothing recorded: run a forward pass under frozen_rounding('record')")
    else:
        _FROZEN = {**_FROZEN, "mode": "replay", "i": 0}
    try:
        yield
    finally:
        _FROZEN = {**_FROZEN, "mode": "off"}  # offsets kept for further replays


class _RoundClamp(torch.autograd.Function):
    """``clamp(round(x), lo, hi)`` in two passes, saving only the in-range mask: the same
    values and gradient as ``clamp(x + (round(x) - x).detach(), lo, hi)`` (``round(x) - x`` is
    exact in floating point, so is their sum), in fewer elementwise passes and with a boolean
    mask as the only saved tensor."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
        r = torch.round(x)
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward((r >= lo) & (r <= hi))  # what clamp's backward tests
        return r.clamp_(lo, hi)

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> tuple:
        (inside,) = ctx.saved_tensors
        return torch.where(inside, grad, 0.0), None, None


def round_clamp_ste(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """``clamp(round(x), lo, hi)`` with the straight-through gradient (1 where the rounded value
    is inside ``[lo, hi]``, else 0). Under :func:`frozen_rounding` the offsets and the in-range
    mask are recorded / replayed, so the replayed function has no kinks at the range ends."""
    if _FROZEN is None or _FROZEN["mode"] == "off":
        return _RoundClamp.apply(x, lo, hi)
    off = (torch.round(x) - x).detach()
    if _FROZEN["mode"] == "replay":
        off, inside = _FROZEN["offsets"][_FROZEN["i"]]
        _FROZEN["i"] += 1
        y = x + off
        return torch.where(inside, y, torch.clamp(y, lo, hi).detach())
    y = torch.clamp(x + off, lo, hi)
    if _FROZEN["mode"] == "record":
        r = x.detach() + off
        _FROZEN["offsets"].append((off, (r >= lo) & (r <= hi)))
    return y


def quantize_weight_rtn(w: torch.Tensor, bits: int) -> torch.Tensor:
    """Symmetric per-output-channel (row) round-to-nearest fake quantization, STE gradient.
    Elementwise error is at most half the row's step ``max|w_row| / (2^(bits-1) - 1)``."""
    check_bits(bits, "w_bits")
    if bits >= 16:
        return w
    qmax = 2 ** (bits - 1) - 1
    scale = (w.abs().amax(dim=1, keepdim=True) / qmax).clamp_min(1e-12)
    return round_clamp_ste(w / scale, -qmax - 1, qmax) * scale


def quantize_weight_nf4(w: torch.Tensor, block_size: int = 64) -> torch.Tensor:
    """NF4 weight-only fake quantization (absmax per block of ``block_size`` inputs, the
    bitsandbytes NormalFloat-4 code book), as a simulated reference arm."""
    out, inn = w.shape
    bs = block_size if inn % block_size == 0 else inn
    blocks = w.reshape(out, inn // bs, bs)
    absmax = blocks.abs().amax(-1, keepdim=True).clamp_min(1e-12)
    levels = torch.tensor(NF4_LEVELS, dtype=w.dtype, device=w.device)
    idx = (blocks / absmax).unsqueeze(-1).sub(levels).abs().argmin(-1)
    return (levels[idx] * absmax).reshape(out, inn)


@torch.no_grad()
def quantize_weight_gptq(w: torch.Tensor, hessian: torch.Tensor, bits: int,
                         damp: float = 0.01, block: int = 128,
                         sub_block: int = 16, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """GPTQ-style error correction (Frantar et al. 2023): quantize columns one by one with the
    per-row RTN grid and spread each column's error over the remaining columns with the inverse
    Hessian ``H = X X^T`` of the layer's calibration inputs. Returns the dequantized weight.

    As GPTQ does it (damping, the upper Cholesky factor of ``H^-1``, lazy batch updates per
    ``block`` of columns), plus one more level of lazy updates: inside a block, a column's
    error reaches only the columns of its ``sub_block`` at once, the rest of the block through
    one matrix product per sub-block. Columns are kept contiguous (the weight is transposed).
    The arithmetic is the same up to the order of float64 sums (tested equal to the
    column-by-column algorithm). On CPU, where the loop costs per operation more than per
    element, it is 1.4-3x faster per matrix (1.5x for a whole SmolLM2-135M).

    ``dtype``: the arithmetic; float64 by default, ``torch.float32`` as the reference GPTQ
    code computes (faster, and its Cholesky can fail sooner on ill-conditioned Hessians)."""
    check_bits(bits, "w_bits")
    if bits >= 16:
        return w
    if block < 1 or sub_block < 1:
        raise ValueError(f"block={block} and sub_block={sub_block} must be >= 1")
    if dtype not in (torch.float64, torch.float32):
        raise ValueError(f"dtype={dtype} is not supported: use torch.float64 or torch.float32")
    w = w.detach().to(dtype).clone()
    h = hessian.detach().to(dtype).clone()
    n = w.shape[1]
    dead = torch.diagonal(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    qmax = 2 ** (bits - 1) - 1
    scale = (w.abs().amax(dim=1) / qmax).clamp_min(1e-12)
    h += damp * torch.diagonal(h).mean() * torch.eye(n, dtype=h.dtype, device=h.device)
    hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    diag = hinv.diagonal().tolist()
    wt = w.T.contiguous()  # row i = column i of w
    qt, errt = torch.empty_like(wt), torch.empty_like(wt)
    for i1 in range(0, n, block):
        i2 = min(i1 + block, n)
        for j1 in range(i1, i2, sub_block):
            j2 = min(j1 + sub_block, i2)
            for i in range(j1, j2):
                col, qc, e = wt[i], qt[i], errt[i]
                torch.div(col, scale, out=qc)
                qc.round_().clamp_(-qmax - 1, qmax).mul_(scale)
                torch.sub(col, qc, out=e).div_(diag[i])
                if i + 1 < j2:
                    wt[i + 1:j2] -= hinv[i, i + 1:j2, None] * e
            if j2 < i2:
                wt[j2:i2] -= hinv[j1:j2, j2:i2].T @ errt[j1:j2]
        if i2 < n:
            wt[i2:] -= hinv[i1:i2, i2:].T @ errt[i1:i2]
    return qt.T.contiguous().to(hessian.dtype if hessian.is_floating_point() else torch.float32)


def fake_quant_asym(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor,
                    bits: int) -> torch.Tensor:
    """Asymmetric uniform fake quantization of ``x`` to ``[lo, hi]`` (broadcast), STE through
    rounding and zero gradient outside the range."""
    levels = 2 ** bits - 1
    scale = ((hi - lo) / levels).clamp_min(1e-12)
    zero = torch.round(-lo / scale)
    q = round_clamp_ste(x / scale + zero, 0, levels)
    return (q - zero) * scale


def fake_quant_dynamic(x: torch.Tensor, bits: int, symmetric: bool = False,
                       clip: float = 1.0) -> torch.Tensor:
    """Dynamic fake quantization with one range per vector of the last dimension (per token;
    per token and KV head for ``(batch, heads, seq, head_dim)``), clipped to ``clip`` times the
    vector's range: symmetric (absmax, levels -2^(b-1)..2^(b-1)-1) or asymmetric (min/max)."""
    if symmetric:
        qmax = 2 ** (bits - 1) - 1
        scale = (x.detach().abs().amax(-1, keepdim=True) * clip / qmax).clamp_min(1e-12)
        return round_clamp_ste(x / scale, -qmax - 1, qmax) * scale
    lo = (x.detach().amin(-1, keepdim=True) * clip).clamp(max=0.0)
    hi = (x.detach().amax(-1, keepdim=True) * clip).clamp(min=0.0)
    return fake_quant_asym(x, lo, hi, bits)


@torch.no_grad()
def quant_error(s: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, bits: int) -> torch.Tensor:
    """Per row of ``s``: mean squared error of :func:`fake_quant_asym` to ``[lo, hi]`` (one
    range per row), computed in place without the straight-through bookkeeping. Bit-identical
    to ``(fake_quant_asym(s, lo[:, None], hi[:, None], bits) - s).pow(2).mean(1)``: there
    ``x + (round(x) - x)`` is exactly ``round(x)`` (the difference of a float and its rounding
    is exact), and every other operation is the same in the same order (tested). ``lo`` and
    ``hi`` may carry leading dimensions (several ranges per row at once, e.g. ``(ratios,
    rows)``); the result then has their shape."""
    levels = 2 ** bits - 1
    scale = ((hi - lo) / levels).clamp_min(1e-12)[..., None]
    zero = torch.round(-lo[..., None] / scale)
    t = s / scale
    t += zero
    t.round_().clamp_(0, levels)
    t -= zero
    t *= scale
    t -= s
    return t.pow_(2).mean(-1)


@torch.no_grad()
def mse_range(s: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor,
              bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The static range search: ``[lo, hi]`` shrunk by the ratio among 33 from 1 to 0.2 that
    minimises each row's quantization MSE (the first such ratio on ties). Four ratios per
    broadcast :func:`quant_error` call: the errors are those of one call per ratio, bit for
    bit (tested against that loop), at about half its time on CPU (more ratios per call
    spill the cache)."""
    ratios = torch.linspace(1.0, 0.2, 33, dtype=torch.float64).to(lo)[:, None]
    lo_r, hi_r = lo * ratios, hi * ratios  # (ratios, rows)
    err = torch.cat([quant_error(s, lo_r[i:i + 4], hi_r[i:i + 4], bits)
                     for i in range(0, len(ratios), 4)])
    best = err.argmin(0, keepdim=True)  # the first minimum, as a strict running minimum
    return lo_r.gather(0, best)[0], hi_r.gather(0, best)[0]


_SUBSAMPLES: dict | None = None  # set inside reuse_subsamples() only
_SUBSAMPLES_MAX = 0


@contextmanager
def reuse_subsamples(max_entries: int = 4096) -> Iterator[None]:
    """Inside the block, a calibration subsample (the first ``k`` of ``randperm(n)`` drawn
    from a quantizer's generator) is drawn once per (generator state, ``n``, ``k``) and then
    reused, with the generator moved on exactly as drawing moves it: results are identical
    (tested). Quantizers are seeded by position, so every model with the same architecture
    and calibration shapes draws the same subsamples: a benchmark that calibrates many arms
    pays for the draws once (``randperm`` of a 4 x 256-token batch takes milliseconds per
    quantizer). Keeps at most ``max_entries`` subsamples (int32, ``4 k`` bytes each)."""
    global _SUBSAMPLES, _SUBSAMPLES_MAX
    if max_entries < 1:
        raise ValueError(f"max_entries={max_entries} must be >= 1")
    outer = _SUBSAMPLES, _SUBSAMPLES_MAX
    _SUBSAMPLES, _SUBSAMPLES_MAX = {}, max_entries
    try:
        yield
    finally:
        _SUBSAMPLES, _SUBSAMPLES_MAX = outer


def subsample_index(gen: torch.Generator, n: int, k: int) -> torch.Tensor:
    """``randperm(n, generator=gen)[:k]`` (reused inside :func:`reuse_subsamples`)."""
    if _SUBSAMPLES is None:
        return torch.randperm(n, generator=gen)[:k]
    key = (gen.get_state().numpy().tobytes(), n, k)
    hit = _SUBSAMPLES.get(key)
    if hit is not None:
        idx, after = hit
        gen.set_state(after)
        return idx.long()
    idx = torch.randperm(n, generator=gen)[:k]
    if len(_SUBSAMPLES) < _SUBSAMPLES_MAX:
        small = idx.to(torch.int32) if n <= torch.iinfo(torch.int32).max else idx.clone()
        _SUBSAMPLES[key] = (small, gen.get_state())
    return idx


class ActQuantizer(nn.Module):
    """Static asymmetric activation quantizer with ranges calibrated on data.

    ``group_dim=None``: one range per tensor (activations). ``group_dim=1``: one range per
    index of that dimension (the KV cache, shape ``(batch, kv_heads, seq, head_dim)``). States:
    ``observe`` (record statistics, pass through), ``quant`` (fake-quantize), ``off``.
    """

    def __init__(self, bits: int, groups: int = 1, group_dim: int | None = None, *,
                 method: str, max_samples: int = 1 << 15, seed: int = 0,
                 dynamic: bool = False, symmetric: bool = False, clip: float = 1.0) -> None:
        super().__init__()
        self.bits = check_bits(bits)
        if not 0 < clip <= 1:
            raise ValueError(f"clip={clip} must be in (0, 1]")
        self.dynamic, self.symmetric, self.clip = dynamic, symmetric, clip
        self.group_dim = group_dim
        self.groups = groups
        if method not in ("mse", "minmax"):
            raise ValueError(f"range method {method!r} unknown: use 'mse' or 'minmax'")
        self.method = method
        self.max_samples = max_samples
        self.register_buffer("lo", torch.zeros(groups))
        self.register_buffer("hi", torch.zeros(groups))
        self.state = "off"
        self._samples: list[torch.Tensor] = []
        self._gen = torch.Generator().manual_seed(seed)

    def _grouped(self, x: torch.Tensor) -> torch.Tensor:
        if self.group_dim is None:
            return x.reshape(1, -1)
        return x.transpose(0, self.group_dim).reshape(x.shape[self.group_dim], -1)

    def start_observing(self) -> None:
        self.state, self._samples = "observe", []

    def _shape(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if self.group_dim is None:
            return t.reshape(())
        shape = [1] * x.dim()
        shape[self.group_dim] = -1
        return t.reshape(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dynamic:  # QuaRot: a range per token (per token and head for the KV cache)
            if self.state != "quant" or self.bits >= 16:
                return x
            return fake_quant_dynamic(x, self.bits, self.symmetric, self.clip)
        if self.state == "observe":
            g = self._grouped(x.detach()).float().cpu()
            k = min(g.shape[1], self.max_samples)
            idx = subsample_index(self._gen, g.shape[1], k)
            self._samples.append(torch.cat([g[:, idx], g.amin(1, keepdim=True),
                                            g.amax(1, keepdim=True)], 1))
            return x
        if self.state == "quant" and self.bits < 16:
            return fake_quant_asym(x, self._shape(self.lo, x).to(x.dtype),
                                   self._shape(self.hi, x).to(x.dtype), self.bits)
        return x

    @torch.no_grad()
    def finish_observing(self) -> None:
        """Set the static ranges from what was observed and switch to ``quant``."""
        if self.dynamic:
            self.state, self._samples = "quant", []
            return
        if not self._samples:
            raise ValueError("the calibration set produced no activations: pass at least one "
                             "non-empty sequence as calibration data")
        s = torch.cat(self._samples, 1).double()
        lo = s.amin(1).clamp(max=0.0)
        hi = s.amax(1).clamp(min=0.0)
        if self.method == "mse" and self.bits < 16:
            lo, hi = mse_range(s, lo, hi, self.bits)
        self.lo.copy_(lo.to(self.lo))
        self.hi.copy_(hi.to(self.hi))
        self._samples = []
        self.state = "quant"
