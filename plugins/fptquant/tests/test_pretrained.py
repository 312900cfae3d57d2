"""On the real pretrained model (SmolLM2-135M-Instruct): the real low-bit kernels give the
simulated path's perplexity, and a saved quantized model round-trips through load_quantized
while plain from_pretrained refuses it."""

from __future__ import annotations

import copy

import pytest
import torch
from icml_fptquant.config import QuantOptions, TrainingOptions, TransformOptions

pytestmark = pytest.mark.pretrained


@pytest.fixture(scope="module")
def smollm():
    from icml.testing import pretrained_or_skip

    return pretrained_or_skip()


def _data(tok):
    from icml.data import eval_token_ids

    ev = torch.tensor(eval_token_ids(tok, 256))
    calib = torch.tensor(eval_token_ids(tok, 256, offset=200_000)).view(2, 128)
    return ev, calib


def test_w8a8_kernel_layers_equal_simulated_on_the_real_model(smollm):
    """Every int8 linear equals its simulated twin on the real activations (same integers,
    float summation order only). The whole model against the float simulated path is not
    asserted equal: on the coarse static INT8 grid float-order differences flip a few codes per
    layer and 30 layers amplify them; the whole-model equality is the int-exact test below."""
    from icml_fptquant import FPTQuantConfig, merge_and_quantize
    from icml_fptquant.kernels import Int8Linear
    from icml_fptquant.qlinear import decoder_linears

    model, tok = smollm
    ev, calib = _data(tok)
    sim = merge_and_quantize(copy.deepcopy(model), calib,
                             FPTQuantConfig(quant=QuantOptions(w_bits=8, a_bits=8, kv_bits=16)))
    inputs = {}
    handles = [lin.register_forward_pre_hook(lambda m, a, n=n: inputs.__setitem__(n, a[0]))
               for n, lin in decoder_linears(sim).items()]
    with torch.no_grad():
        sim(ev[None, :64], use_cache=False)
    for h in handles:
        h.remove()
    for name, lin in decoder_linears(sim).items():
        with torch.no_grad():
            a, b = lin(inputs[name]), Int8Linear(lin)(inputs[name])
        assert (a - b).abs().max() < 1e-5 * a.abs().max(), name


def test_w8a8_kernel_logits_equal_the_int_exact_simulation_on_the_real_model(smollm):
    """The whole real model: the int8 kernel path's logits are the integer-exact simulated
    path's (``quant.int_exact``) bit for bit, so their perplexities are equal; the
    dequantize-then-float-matmul path differs only by float rounding, which flips activation
    codes on this model's coarse static grid (its perplexity differs: see the README)."""
    from icml_fptquant import FPTQuantConfig, merge_and_quantize
    from icml_fptquant.kernels import to_kernels
    from icml_fptquant.qlinear import set_int_exact

    from icml.data import perplexity

    model, tok = smollm
    ev, calib = _data(tok)
    sim = merge_and_quantize(copy.deepcopy(model), calib, FPTQuantConfig(
        quant=QuantOptions(w_bits=8, a_bits=8, kv_bits=16, int_exact=True)))
    fast = to_kernels(copy.deepcopy(sim), "w8a8")
    with torch.no_grad():
        a = sim(ev[None, :128], use_cache=False).logits
        b = fast(ev[None, :128], use_cache=False).logits
    assert torch.equal(a, b)
    p_exact, p_kernel = perplexity(sim, ev.tolist(), window=128), perplexity(
        fast, ev.tolist(), window=128)
    assert p_exact == p_kernel
    p_float = perplexity(set_int_exact(sim, False), ev.tolist(), window=128)
    print(f"W8A8 perplexity: int-exact {p_exact:.3f}, kernel {p_kernel:.3f}, "
          f"float matmul {p_float:.3f}")


def test_w4a16_kernel_perplexity_equals_simulated_on_the_real_model(smollm):
    from icml_fptquant import FPTQuantConfig, merge_and_quantize
    from icml_fptquant.kernels import to_kernels, weight_bytes

    from icml.data import perplexity

    model, tok = smollm
    ev, calib = _data(tok)
    sim = merge_and_quantize(copy.deepcopy(model), calib,
                             FPTQuantConfig(quant=QuantOptions(w_bits=4, a_bits=16, kv_bits=16)))
    fast = to_kernels(copy.deepcopy(sim), "w4a16")  # float32 activations: same function
    # 64 tokens: torch's int4 CPU kernel costs ~0.14 s per call at 128 float32 tokens (58 s
    # for the 256 tokens this test used before); the whole 30-layer model still runs
    p_sim, p_fast = perplexity(sim, ev[:64], window=64), perplexity(fast, ev[:64], window=64)
    assert p_fast == pytest.approx(p_sim, rel=1e-4)
    assert weight_bytes(fast) < 0.5 * weight_bytes(model)  # rest float32; bf16: README


def test_saved_real_model_round_trip_and_refusal(smollm, tmp_path):
    from icml_fptquant import (
        FPTQuantConfig,
        apply_fpt_transforms,
        load_quantized,
        merge_and_quantize,
        save_quantized,
    )
    from transformers import AutoModelForCausalLM

    model, tok = smollm
    ev, calib = _data(tok)
    cfg = FPTQuantConfig(training=TrainingOptions(local_steps=0),
                         transforms=TransformOptions(untie_embeddings=True))
    q = merge_and_quantize(apply_fpt_transforms(copy.deepcopy(model), cfg), calib, cfg)
    save_quantized(q, tmp_path / "q", tok)
    with pytest.raises(OSError):
        AutoModelForCausalLM.from_pretrained(tmp_path / "q")
    loaded, tok2 = load_quantized(tmp_path / "q")
    with torch.no_grad():
        a = q(ev[None, :64], use_cache=False).logits
        b = loaded(ev[None, :64], use_cache=False).logits
    assert torch.equal(a, b) and tok2 is not None


def test_layer_readouts_of_the_transformed_model_are_the_originals(smollm):
    """Issue 50 on SmolLM2: on the merged, unquantized FPTQuant transform the read-out of every
    intermediate layer (readout_basis + final norm + lm_head) is the original model's
    distribution (it was total-variation distance 1.0 before the maps), a read-out of the last
    7 positions after a 38-token forward runs (it crashed in the residual scaling), and
    unwrap() gives the original no-norm logit lens too."""
    from icml_fptquant import FPTQuantConfig, apply_fpt_transforms, merge_transforms
    from icml_fptquant.interop import unwrap

    from icml import compose

    model, tok = smollm
    ref = model
    ids = torch.tensor([tok("The capital of France is Paris, and the capital of Italy is Rome."
                            " Water boils at one hundred degrees.")["input_ids"][:38]])
    fpt = apply_fpt_transforms(copy.deepcopy(ref),
                               FPTQuantConfig(transforms=TransformOptions(untie_embeddings=True),
                                              training=TrainingOptions(local_steps=0)))
    merge_transforms(fpt)

    def trace(m):
        got = {}
        h = m.model.norm.register_forward_pre_hook(lambda mod, a: got.update(pre=a[0]))
        with torch.no_grad():
            out = m(ids, output_hidden_states=True)
        h.remove()
        return list(out.hidden_states[:-1]) + [got["pre"]], out.logits

    hs_ref, logits_ref = trace(ref)
    hs, logits = trace(fpt)
    assert (logits - logits_ref).abs().max() < 1e-2
    worst = 0.0
    with torch.no_grad():
        for i in range(1, len(hs)):
            h = compose.readout_basis(fpt, hs[i][:, -7:], i)
            p = fpt.lm_head(fpt.model.norm(h)).softmax(-1)
            q = ref.lm_head(ref.model.norm(hs_ref[i][:, -7:])).softmax(-1)
            worst = max(worst, float(0.5 * (p - q).abs().sum(-1).max()))
    assert worst < 1e-3
    plain = unwrap(fpt)
    hs_plain, _ = trace(plain)
    with torch.no_grad():
        for i in (1, 15, 29):
            p = plain.lm_head(hs_plain[i]).softmax(-1)
            q = ref.lm_head(hs_ref[i]).softmax(-1)
            assert float(0.5 * (p - q).abs().sum(-1).max()) < 1e-3
