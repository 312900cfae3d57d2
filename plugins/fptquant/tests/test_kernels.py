"""Real low-bit CPU kernels (torch._int_mm, torch's packed int4 kernel) against the simulated
(fake-quant) path of the same quantized model."""

from __future__ import annotations

import copy

import pytest
import torch
from icml_fptquant import FPTQuantConfig, apply_fpt_transforms, merge_and_quantize
from icml_fptquant.config import QuantOptions, TrainingOptions
from icml_fptquant.kernels import Int4Linear, Int8Linear, to_kernels, weight_bytes


def _model(tiny_model, **kw):
    model = tiny_model("llama", hidden_size=64, num_heads=4, num_kv_heads=2,
                       intermediate_size=128).float()
    return model


def _logits(model, ids):
    with torch.no_grad():
        return model(ids, use_cache=False).logits


def _calib():
    return torch.randint(4, 260, (4, 24), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("transforms", [False, True])
def test_w8a8_int_mm_equals_simulated(tiny_model, ids, transforms):
    model = _model(tiny_model)
    cfg = FPTQuantConfig(quant=QuantOptions(w_bits=8, a_bits=8, kv_bits=16),
                         training=TrainingOptions(local_steps=0))
    if transforms:  # online Hadamard and dynamic residual scaling run before the kernel
        apply_fpt_transforms(model, cfg)
    merge_and_quantize(model, _calib(), cfg)
    sim = _logits(model, ids)
    fast = to_kernels(copy.deepcopy(model), "w8a8")
    assert isinstance(fast.model.layers[0].mlp.down_proj, Int8Linear)
    out = _logits(fast, ids)
    # same integers; only the float summation order differs
    assert (out - sim).abs().max() < 1e-4 * sim.abs().max()
    a = model.generate(ids[:, :4], max_new_tokens=6, do_sample=False)
    assert torch.equal(fast.generate(ids[:, :4], max_new_tokens=6, do_sample=False), a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_w4a16_int4pack_equals_simulated(tiny_model, ids, dtype):
    model = _model(tiny_model)
    cfg = FPTQuantConfig(quant=QuantOptions(w_bits=4, a_bits=16, kv_bits=16),
                         training=TrainingOptions(local_steps=0))
    apply_fpt_transforms(model, cfg)
    merge_and_quantize(model, _calib(), cfg)
    fast = to_kernels(copy.deepcopy(model), "w4a16", dtype=dtype)
    model = model.to(dtype)
    sim = _logits(model, ids).float()
    before = weight_bytes(model)
    assert isinstance(fast.model.layers[1].self_attn.q_proj, Int4Linear)
    out = _logits(fast, ids).float()
    tol = 1e-4 if dtype == torch.float32 else 3e-2  # bf16: the scale is rounded to bf16
    assert (out - sim).abs().max() < tol * sim.abs().max()
    lin = fast.model.layers[0].mlp.up_proj
    assert lin.packed.dtype == torch.uint8 and lin.packed.numel() == 128 * 64 // 2
    assert weight_bytes(fast) < before


def test_kernels_refuse_the_wrong_quantization(tiny_model):
    model = _model(tiny_model)
    cfg = FPTQuantConfig(quant=QuantOptions(w_bits=4, a_bits=4, kv_bits=16),
                         training=TrainingOptions(local_steps=0))
    merge_and_quantize(model, _calib(), cfg)
    with pytest.raises(ValueError, match="a_bits=8"):
        to_kernels(copy.deepcopy(model), "w8a8")
    with pytest.raises(ValueError, match="a_bits=16"):
        to_kernels(copy.deepcopy(model), "w4a16")
    with pytest.raises(ValueError, match="unknown"):
        to_kernels(model, "w2")


@pytest.mark.parametrize("transforms", [False, True])
def test_w8a8_int_mm_equals_the_int_exact_simulation_bit_for_bit(tiny_model, ids, transforms):
    """The simulated path with ``int_exact`` computes every quantized linear as the int8 kernel
    does (exact integer sums, one rounding, one scaling), so the logits are the same floats.
    The dequantize-then-float-matmul path (the old simulated path) is not: it differs by the
    rounding of its float sums, which this test would catch."""
    from icml_fptquant.qlinear import set_int_exact

    model = _model(tiny_model)
    cfg = FPTQuantConfig(quant=QuantOptions(w_bits=8, a_bits=8, kv_bits=16, int_exact=True),
                         training=TrainingOptions(local_steps=0))
    if transforms:
        apply_fpt_transforms(model, cfg)
    merge_and_quantize(model, _calib(), cfg)
    assert model.model.layers[0].mlp.down_proj.fpt_int_exact
    exact = _logits(model, ids)
    fast = _logits(to_kernels(copy.deepcopy(model), "w8a8"), ids)
    assert torch.equal(fast, exact)
    old = _logits(set_int_exact(model, False), ids)  # float matmul: same grid, other rounding
    assert not torch.equal(old, exact)
    assert (old - exact).abs().max() < 1e-4 * exact.abs().max()
    assert torch.equal(_logits(set_int_exact(model, True), ids), exact)


def test_int_exact_holds_at_w4a4_and_refuses_off_grid_weights(tiny_model, ids):
    from icml_fptquant.qlinear import int_exact_linear

    model = _model(tiny_model)
    cfg = FPTQuantConfig(quant=QuantOptions(w_bits=4, a_bits=4, kv_bits=16, int_exact=True),
                         training=TrainingOptions(local_steps=0))
    merge_and_quantize(model, _calib(), cfg)
    lin = model.model.layers[0].self_attn.q_proj
    x = torch.randn(3, 5, lin.in_features, generator=torch.Generator().manual_seed(0))
    ref = torch.nn.functional.linear(lin.act_quant(x), lin.fpt_qweight)
    y = int_exact_linear(lin, x)
    assert (y - ref).abs().max() < 1e-5 * ref.abs().max()
    lin.fpt_qweight = lin.fpt_qweight + 1e-3  # no longer on the 4-bit grid
    with pytest.raises(ValueError, match="per-channel grid"):
        _logits(model, ids)
