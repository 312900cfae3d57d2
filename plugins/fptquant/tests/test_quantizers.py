"""Quantizers: error bounds, STE gradients, per-head shapes, GPTQ vs RTN, bad bit widths."""

from __future__ import annotations

import pytest
import torch
from icml_fptquant.quantizers import (
    NF4_LEVELS,
    ActQuantizer,
    check_bits,
    fake_quant_asym,
    quantize_weight_gptq,
    quantize_weight_nf4,
    quantize_weight_rtn,
    reuse_subsamples,
)

GEN = torch.Generator().manual_seed(0)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_rtn_error_at_most_half_step(bits):
    w = torch.randn(16, 40, generator=GEN, dtype=torch.float64)
    q = quantize_weight_rtn(w, bits)
    step = w.abs().amax(1, keepdim=True) / (2 ** (bits - 1) - 1)
    assert ((q - w).abs() <= step / 2 + 1e-12).all()
    levels = torch.round(q / step)
    assert torch.allclose(levels * step, q) and levels.abs().max() <= 2 ** (bits - 1)


def test_ste_gradient_is_identity():
    w = torch.randn(4, 8, generator=GEN, dtype=torch.float64, requires_grad=True)
    x = torch.randn(8, generator=GEN, dtype=torch.float64)
    lo, hi = torch.tensor(-10.0, dtype=torch.float64), torch.tensor(10.0, dtype=torch.float64)
    (fake_quant_asym(x * w, lo, hi, 4).sum()).backward()
    assert torch.allclose(w.grad, x.expand_as(w))


def test_asym_error_bound_and_clipping():
    x = torch.linspace(-3, 5, 1001, dtype=torch.float64)
    lo, hi = torch.tensor(-2.0, dtype=torch.float64), torch.tensor(4.0, dtype=torch.float64)
    q = fake_quant_asym(x, lo, hi, 4)
    step = 6.0 / 15
    inside = (x >= -2) & (x <= 4)
    assert ((q - x).abs()[inside] <= step / 2 + step * 1e-9 + 1e-12).all()
    assert q.max() <= 4 + step and q.min() >= -2 - step
    assert len(torch.unique(q)) <= 16


def test_act_quantizer_per_head_ranges_and_mse_beats_minmax():
    x = torch.randn(2, 3, 50, 8, generator=GEN)
    x[:, 1] *= 10
    x[0, 2, 0, 0] = 60.0  # one outlier
    errs = {}
    for method in ("minmax", "mse"):
        q = ActQuantizer(4, groups=3, group_dim=1, method=method)
        q.start_observing()
        assert torch.equal(q(x), x)
        q.finish_observing()
        assert q.lo.shape == (3,) and (q.hi[1] > 5 * q.hi[0])
        errs[method] = float((q(x) - x).pow(2).mean())
    assert errs["mse"] < errs["minmax"]


def test_gptq_beats_rtn_on_correlated_inputs():
    x = torch.randn(512, 32, generator=GEN, dtype=torch.float64) @ \
        torch.randn(32, 32, generator=GEN, dtype=torch.float64)
    w = torch.randn(24, 32, generator=GEN, dtype=torch.float64)
    h = x.T @ x
    e_rtn = (x @ (quantize_weight_rtn(w, 3) - w).T).pow(2).mean()
    e_gptq = (x @ (quantize_weight_gptq(w, h, 3, block=8) - w).T).pow(2).mean()
    assert e_gptq < 0.8 * e_rtn


def _gptq_column_by_column(w, h, bits, damp=0.01):
    """The textbook GPTQ loop: every column's error reaches all later columns at once."""
    w, h = w.double().clone(), h.double().clone()
    n = w.shape[1]
    dead = torch.diagonal(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    qmax = 2 ** (bits - 1) - 1
    scale = (w.abs().amax(1) / qmax).clamp_min(1e-12)
    h += damp * torch.diagonal(h).mean() * torch.eye(n, dtype=h.dtype)
    hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    q = torch.empty_like(w)
    for i in range(n):
        q[:, i] = torch.clamp(torch.round(w[:, i] / scale), -qmax - 1, qmax) * scale
        e = (w[:, i] - q[:, i]) / hinv[i, i]
        w[:, i + 1:] -= e[:, None] * hinv[i, i + 1:]
    return q


@pytest.mark.parametrize(("block", "sub_block"), [(128, 16), (16, 4), (7, 3), (1, 1)])
def test_gptq_lazy_updates_equal_the_column_by_column_loop(block, sub_block):
    """Both levels of lazy batch updates only reorder float64 sums: the rounded weights are the
    textbook loop's, dead input channels included."""
    x = torch.randn(256, 45, generator=GEN, dtype=torch.float64) @ \
        torch.randn(45, 45, generator=GEN, dtype=torch.float64)
    x[:, 5] = 0.0  # a dead channel: zero Hessian row and column
    w = torch.randn(20, 45, generator=GEN, dtype=torch.float64)
    h = x.T @ x
    expect = _gptq_column_by_column(w, h, 3)
    got = quantize_weight_gptq(w, h, 3, block=block, sub_block=sub_block)
    assert torch.equal(got, expect)
    assert not torch.equal(got[:, 6:], quantize_weight_rtn(w, 3)[:, 6:])  # feedback acted


def test_reused_subsamples_are_the_drawn_ones(monkeypatch):
    """Inside reuse_subsamples a second identically seeded quantizer reuses the first one's
    draws instead of drawing: same ranges and the same generator state as without reuse."""
    xs = [torch.randn(2, 40, 8, generator=GEN) * (i + 1) for i in range(3)]

    def run():
        q = ActQuantizer(4, method="mse", max_samples=100, seed=3)
        q.start_observing()
        for x in xs:
            q(x)
        q.finish_observing()
        return q.lo.clone(), q.hi.clone(), q._gen.get_state()

    plain = run()
    calls = []
    real = torch.randperm
    monkeypatch.setattr(torch, "randperm", lambda *a, **k: calls.append(a) or real(*a, **k))
    with reuse_subsamples():
        first, second = run(), run()
    assert len(calls) == 3  # one draw per batch, all reused by the second quantizer
    for got in (first, second):
        assert all(torch.equal(a, b) for a, b in zip(got, plain))
    with pytest.raises(ValueError, match="max_entries"):
        with reuse_subsamples(0):
            pass


def test_nf4_uses_the_code_book():
    w = torch.randn(4, 128, generator=GEN)
    q = quantize_weight_nf4(w)
    absmax = w.reshape(4, 2, 64).abs().amax(-1, keepdim=True)
    codes = (q.reshape(4, 2, 64) / absmax).unsqueeze(-1)
    assert (codes - torch.tensor(NF4_LEVELS)).abs().amin(-1).max() < 1e-6


@pytest.mark.parametrize("bits", [1, 17, 0, 4.0, True])
def test_bits_out_of_range(bits):
    with pytest.raises(ValueError, match="out of range"):
        check_bits(bits)


def test_empty_calibration_rejected():
    q = ActQuantizer(4, method="mse")
    q.start_observing()
    with pytest.raises(ValueError, match="no activations"):
        q.finish_observing()


def test_native_nf4_matches_bitsandbytes():
    pytest.importorskip("bitsandbytes")
    from icml_fptquant.peers import bnb_dequantized

    w = torch.randn(8, 128, generator=GEN)
    assert torch.equal(bnb_dequantized(w, "nf4"), quantize_weight_nf4(w))
    q8 = bnb_dequantized(w, "int8")
    step = w.abs().amax(1, keepdim=True) / 127
    assert ((q8 - w).abs() <= step / 2 + 1e-6).all()


def test_fast_quant_error_is_bit_identical_to_fake_quant_asym():
    """The range search's in-place error equals the straight-through fake quantizer's,
    bit for bit, on heavy-tailed data and every width and ratio the search uses."""
    import math

    from icml_fptquant.quantizers import fake_quant_asym, mse_range, quant_error

    gen = torch.Generator().manual_seed(0)
    s = (torch.randn(3, 4000, generator=gen, dtype=torch.float64)
         * torch.rand(3, 4000, generator=gen, dtype=torch.float64).pow(-0.7))
    s[1] = s[1].abs()  # a one-sided row (lo = 0)
    lo, hi = s.amin(1).clamp(max=0.0), s.amax(1).clamp(min=0.0)
    shrunk = []
    for bits in (2, 4, 8):
        best = torch.full_like(lo, math.inf)
        blo, bhi = lo.clone(), hi.clone()
        for r in torch.linspace(1.0, 0.2, 33, dtype=torch.float64):
            ref = (fake_quant_asym(s, (lo * r)[:, None], (hi * r)[:, None], bits) - s
                   ).pow(2).mean(1)
            assert torch.equal(quant_error(s, lo * r, hi * r, bits), ref)
            better = ref < best
            best = torch.where(better, ref, best)
            blo, bhi = torch.where(better, lo * r, blo), torch.where(better, hi * r, bhi)
        got = mse_range(s, lo, hi, bits)
        assert torch.equal(got[0], blo) and torch.equal(got[1], bhi)
        shrunk.append(not torch.equal(blo, lo))
    assert any(shrunk)  # the search did shrink ranges (the comparison means something)
