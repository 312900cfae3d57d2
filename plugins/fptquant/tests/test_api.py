"""Baselines, outlier injection, bad input, save/load, the user-model path and the claim."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from icml_fptquant import (
    FPTQuantConfig,
    apply_fpt_transforms,
    apply_quarot,
    apply_smoothquant,
    inject_outliers,
    merge_and_quantize,
    perplexity,
)
from icml_fptquant.config import QuantOptions, TrainingOptions, TransformOptions


def _logits(model, ids):
    with torch.no_grad():
        return model(ids, use_cache=False).logits


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_baselines_and_outliers_preserve_function(tiny_model, ids, arch):
    model = tiny_model(arch)
    ref = _logits(model, ids)
    inject_outliers(model, 30.0)
    assert model.model.layers[0].input_layernorm.weight.max() > 20
    assert (_logits(model, ids) - ref).abs().max() < 1e-10
    sq = apply_smoothquant(copy.deepcopy(model), ids, alpha=0.5)
    assert (_logits(sq, ids) - ref).abs().max() < 1e-10
    assert sq.model.layers[0].input_layernorm.weight.max() < 20  # outliers migrated
    qr = apply_quarot(copy.deepcopy(model))
    assert (_logits(qr, ids) - ref).abs().max() < 1e-10


def test_unsupported_architecture(tiny_model):
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50))
    with pytest.raises(ValueError, match="llama, qwen2"):
        apply_fpt_transforms(gpt2)


def test_tied_embeddings_need_untying(tiny_model, ids):
    model = tiny_model("qwen2")
    model.lm_head.weight = model.model.embed_tokens.weight
    ref = _logits(model, ids)
    with pytest.raises(ValueError, match="untie_embeddings=True"):
        apply_fpt_transforms(copy.deepcopy(model))
    apply_fpt_transforms(model, FPTQuantConfig(transforms=TransformOptions(untie_embeddings=True)))
    assert (_logits(model, ids) - ref).abs().max() < 1e-10


def test_bad_bits_and_empty_calibration(tiny_model, ids):
    from icml_fptquant import QuantizeConfig

    from icml.config import ConfigError, build_config

    with pytest.raises(ConfigError, match=r"quant\.a_bits.*>= 2"):
        build_config(QuantizeConfig, {}, ["quant.a_bits=1"])
    with pytest.raises(ConfigError, match="a_bits"):  # the pre-0.3.7 flat key is unknown
        build_config(QuantizeConfig, {}, ["a_bits=4"])
    with pytest.raises(ConfigError, match="arms"):
        build_config(QuantizeConfig, {}, ["arms=rtn,gptq9"])
    model = tiny_model("llama")
    with pytest.raises(ValueError, match=r"quant\.w_bits.*>= 2"):  # the Python API too
        FPTQuantConfig(quant=QuantOptions(w_bits=1))
    with pytest.raises(ValueError, match="calibration/evaluation set is empty"):
        merge_and_quantize(model, [], FPTQuantConfig())


@pytest.mark.parametrize("mlp_bias", [False, True])
def test_residual_scaling_with_biased_projections(tiny_model, ids, mlp_bias):
    """With a bias on o_proj (and down_proj) 1/c moves to the projection's output; still exact."""
    model = tiny_model("llama", attention_bias=True, mlp_bias=mlp_bias)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.Linear) and mod.bias is not None:
                mod.bias.normal_(0, 0.1)
    ref = _logits(model, ids)
    apply_fpt_transforms(model, FPTQuantConfig())
    assert (_logits(model, ids) - ref).abs().max() < 1e-10


def test_value_transform_stays_invertible_through_e2e(tiny_model, ids):
    from icml_fptquant import optimize_e2e

    model = tiny_model("llama").float()
    cfg = FPTQuantConfig(training=TrainingOptions(local_steps=0, e2e_steps=12, e2e_lr=0.05,
                                                  e2e_recalibrate_every=4))
    apply_fpt_transforms(model, cfg)
    hist = optimize_e2e(model, ids, cfg)
    assert len(hist["loss"]) == 12 and all(torch.isfinite(torch.tensor(hist["loss"])))
    for v in model.fpt_transforms.value:
        assert v.log_diag.abs().max() > 1e-4  # it was trained
        eye = torch.eye(v.r0.shape[0]).expand(v.a.shape)
        assert (v.matrices() @ v.inverses() - eye).abs().max() < 1e-4
    assert max(hist["value_cond"]) < 1e3


def test_quantized_model_saves_loads_and_generates(tiny_model, ids, tmp_path):
    from icml_fptquant import load_quantized, optimize_local, save_quantized

    model = tiny_model("qwen2").float()
    inject_outliers(model, 10.0)
    cfg = FPTQuantConfig(training=TrainingOptions(local_steps=5),
                         quant=QuantOptions(weight_quantizer="gptq"))
    apply_fpt_transforms(model, cfg)
    optimize_local(model, cfg)
    merge_and_quantize(model, ids, cfg)
    out = _logits(model, ids)
    save_quantized(model, tmp_path / "q")
    loaded, _ = load_quantized(tmp_path / "q")
    assert (_logits(loaded, ids) - out).abs().max() < 1e-4
    a = model.generate(ids[:, :4], max_new_tokens=5, do_sample=False)
    b = loaded.generate(ids[:, :4], max_new_tokens=5, do_sample=False)
    assert a.shape == (2, 9) and torch.equal(a, b)


def test_user_model_path_and_claim(tmp_path):
    """A model saved with save_pretrained loads through `model=`; on the outlier model at
    W4A4KV4 FPTQuant closes more than half of RTN's perplexity gap and beats QuaRot-style.
    Local training runs the job's 150 steps: with 60, FPTQuant-local was behind QuaRot-style
    on seed 0 (22.24 vs 21.95; seeds 1, 2 ahead), with 150 it is ahead on seeds 0, 1, 2
    (20.79 vs 21.95, 17.12 vs 21.23, 18.62 vs 21.01)."""
    from icml_fptquant import QuantizeConfig
    from icml_fptquant.pipeline import build_model, run_arms

    from icml.models import byte_tokenizer

    cfg = QuantizeConfig(arms=["fp", "rtn", "quarot", "fptquant_local"], train_steps=120,
                         calib_samples=4, eval_samples=8, seq_len=48,
                         training=TrainingOptions(local_steps=150))
    base = build_model(cfg, "cpu", torch.float32, seed=0)
    base["model"].save_pretrained(tmp_path / "m")
    byte_tokenizer().save_pretrained(tmp_path / "m")
    user = dataclasses.replace(cfg, model=str(tmp_path / "m"))
    loaded = build_model(user, "cpu", torch.float32, seed=0)
    assert torch.equal(loaded["eval"], base["eval"])
    rows = run_arms(user, loaded, seed=0)["rows"]
    fp, rtn = rows["fp"]["ppl"], rows["rtn"]["ppl"]
    assert rtn > 1.5 * fp  # the outlier model really hurts RTN
    assert rows["fptquant_local"]["rtn_gap_closed"] > 0.5
    assert rows["fptquant_local"]["ppl"] < rows["quarot"]["ppl"]
    assert perplexity(loaded["model"], loaded["eval"]) == pytest.approx(fp, rel=1e-6)


def test_evaluate_hook_on_saved_quantized_model(tmp_path):
    from icml_fptquant import save_quantized

    from icml.models import byte_tokenizer, tiny_causal_lm
    from icml.runner import run

    model = tiny_causal_lm("llama", hidden_size=32)
    calib = torch.randint(4, 260, (2, 32), generator=torch.Generator().manual_seed(0))
    cfg = FPTQuantConfig(training=TrainingOptions(local_steps=0))
    merge_and_quantize(apply_fpt_transforms(model, cfg), calib, cfg)
    save_quantized(model, tmp_path / "q", byte_tokenizer())
    result = run("fptquant", "evaluate", overrides=[f"quantized={tmp_path / 'q'}",
                 "seq_len=32", "eval_samples=2", "calib_samples=2"], out=tmp_path / "run",
                 device="cpu", show_progress=False)
    assert result.status == "ok" and result.metrics["ppl"] > 1


def test_bfloat16_model_end_to_end():
    """bf16 models work: transforms keep float32 parameters, the function is preserved up to
    bf16 rounding, and the quantized model trains, merges and generates."""
    from icml_fptquant import optimize_e2e, optimize_local

    from icml.models import tiny_causal_lm

    model = tiny_causal_lm("qwen2", hidden_size=32, dtype=torch.bfloat16)
    x = torch.randint(4, 260, (2, 16), generator=torch.Generator().manual_seed(0))
    ref = _logits(model, x).float()
    cfg = FPTQuantConfig(training=TrainingOptions(local_steps=3, e2e_steps=2))
    apply_fpt_transforms(model, cfg)
    assert model.fpt_transforms.rotation.a.dtype == torch.float32
    assert (_logits(model, x).float() - ref).abs().max() < 0.05 * ref.abs().max()
    optimize_local(model, cfg)
    optimize_e2e(model, x, cfg)
    merge_and_quantize(model, x, cfg)
    assert model.model.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16
    assert model.generate(x[:1, :4], max_new_tokens=3, do_sample=False).shape == (1, 7)


def test_static_kv_quantization_is_consistent_with_the_cache():
    """KV4 is applied per KV head to post-RoPE keys and values: it changes the logits, and
    incremental decoding through the cache gives the same last-token logits as a full pass."""
    from icml.models import tiny_causal_lm

    model = tiny_causal_lm("llama", hidden_size=32)
    x = torch.randint(4, 260, (2, 12), generator=torch.Generator().manual_seed(0))
    cfg = FPTQuantConfig(training=TrainingOptions(local_steps=0),
                         quant=QuantOptions(w_bits=16, a_bits=16, kv_bits=2))
    base = _logits(model, x)
    merge_and_quantize(apply_fpt_transforms(model, cfg), x, cfg)
    kq = model.model.layers[0].self_attn.fpt_k_quant
    assert kq.state == "quant" and kq.lo.shape == (2,) and not torch.equal(kq.lo, kq.hi)
    assert (_logits(model, x) - base).abs().max() > 1e-3  # KV2 is really applied
    with torch.no_grad():
        full = model(x).logits[:, -1]
        prefix = model(x[:, :-1], use_cache=True)
        cache = prefix["cache"] if "cache" in prefix else prefix["past_key_values"]
        step = model(x[:, -1:], cache=cache, use_cache=True).logits[:, -1]
    assert (full - step).abs().max() < 1e-5


def test_outlier_sites_subset_and_bad_site(tiny_model, ids):
    """A subset of outlier kinds injects exactly those (same channels as the full set), still
    function-preserving; an unknown kind is a clear error."""
    from icml_fptquant import QuantizeConfig

    from icml.config import ConfigError, build_config

    full, sub = tiny_model("llama"), tiny_model("llama")
    ref = _logits(full, ids)
    k0 = sub.model.layers[0].self_attn.k_proj.weight.clone()
    inject_outliers(full, 30.0)
    inject_outliers(sub, 30.0, sites=("norm", "mlp"))
    assert (_logits(sub, ids) - ref).abs().max() < 1e-10
    a, b = full.model.layers[1], sub.model.layers[1]
    assert torch.equal(a.input_layernorm.weight, b.input_layernorm.weight)
    assert torch.equal(a.mlp.down_proj.weight, b.mlp.down_proj.weight)
    # k_proj columns shrink with the norm outliers, but no key row is scaled up
    rows_ratio = sub.model.layers[0].self_attn.k_proj.weight.abs().amax(1) / k0.abs().amax(1)
    assert rows_ratio.max() < 1.01
    assert not torch.equal(a.self_attn.v_proj.weight, b.self_attn.v_proj.weight)
    with pytest.raises(ValueError, match="outlier sites"):
        inject_outliers(sub, 30.0, sites=("keys",))
    with pytest.raises(ConfigError, match="outlier sites"):
        build_config(QuantizeConfig, {}, ["outlier_sites=norm,attn"])


def test_activation_ranges_are_static_and_kv_quant_acts_in_generate():
    """Static ranges: a sequence's quantized logits do not depend on what else is in the batch
    or on later tokens, and the ranges never change after calibration. The KV quantizer sees
    the growing cache during generate()."""
    from icml.models import tiny_causal_lm

    model = tiny_causal_lm("llama", hidden_size=32)
    x = torch.randint(4, 260, (4, 12), generator=torch.Generator().manual_seed(0))
    cfg = FPTQuantConfig(training=TrainingOptions(local_steps=0), quant=QuantOptions(kv_bits=3))
    merge_and_quantize(apply_fpt_transforms(model, cfg), x[:2], cfg)
    from icml_fptquant.quantize import quantizers

    ranges = [(q.lo.clone(), q.hi.clone()) for q in quantizers(model)]
    alone = _logits(model, x[:1])
    assert torch.equal(_logits(model, torch.cat([x[:1], x[1:]])).narrow(0, 0, 1), alone)
    assert torch.equal(_logits(model, x[:1, :6]), alone[:, :6])
    assert all(torch.equal(q.lo, a) and torch.equal(q.hi, b)
               for q, (a, b) in zip(quantizers(model), ranges))
    kq = model.model.layers[0].self_attn.fpt_k_quant
    seen = []
    hook = kq.register_forward_hook(lambda m, a, o: seen.append((m.state, a[0].shape[2])))
    try:
        model.generate(x[:1, :4], max_new_tokens=3, do_sample=False)
    finally:
        hook.remove()
    assert seen == [("quant", 4), ("quant", 5), ("quant", 6)]
