"""Cache invariants of the presses on real transformers architectures."""

import pytest
import torch
from icml_capkv import (
    POLICIES,
    CapKVCache,
    CapKVPress,
    StreamingLLMPress,
    continuation_logits,
    generate_with_press,
    make_press,
    n_kept,
    prefill,
)
from icml_capkv.config import PressConfig
from transformers import DynamicCache


def _masked_reference(model, ctx, cont, kept):
    """Full-cache logits of ``cont`` with every evicted context entry masked out, per layer and
    KV head (``kept[layer]``: (B, H_kv, K) original positions), same position ids."""
    B, T = ctx.shape
    q = cont.shape[1]
    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=ctx, cache=cache, use_cache=True)
    attns = [layer.self_attn for layer in model.model.layers]
    n_rep = model.config.num_attention_heads // model.config.num_key_value_heads
    handles = []
    for attn in attns:
        allowed = torch.zeros(B, model.config.num_attention_heads, q, T + q, dtype=torch.bool)
        kv_kept = torch.zeros(B, model.config.num_key_value_heads, T, dtype=torch.bool)
        kv_kept.scatter_(2, kept[attn.layer_idx], True)
        allowed[..., :T] = kv_kept.repeat_interleave(n_rep, 1)[:, :, None, :]
        allowed[..., T:] = torch.ones(q, q, dtype=torch.bool).tril()
        mask = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)

        def pre(mod, args, kwargs, mask=mask):
            kwargs = dict(kwargs)
            kwargs["attention_mask"] = mask
            return args, kwargs

        handles.append(attn.register_forward_pre_hook(pre, with_kwargs=True))
    try:
        with torch.no_grad():
            return model(input_ids=cont, cache=cache, use_cache=True).logits
    finally:
        for h in handles:
            h.remove()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("policy,layer_ratios", [("capkv", None), ("snapkv", None),
                                                  ("capkv", [0.25, 0.75])])
def test_compressed_decoding_equals_masked_full_cache(tiny_model, ids, arch, policy,
                                                      layer_ratios) -> None:
    ctx, cont = ids
    press = make_press(policy, 0.5, layer_ratios=layer_ratios)
    cache = prefill(tiny_model(arch), ctx, press)
    kept = [layer.positions.clone() for layer in cache.layers]
    assert cache.get_seq_length() == ctx.shape[1]
    got = continuation_logits(tiny_model(arch), cache, cont, press if layer_ratios else None)
    ref = _masked_reference(tiny_model(arch, "eager"), ctx, cont, kept)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    # The cache kept growing by the continuation, with positions continuing from T.
    assert cache.get_seq_length() == ctx.shape[1] + cont.shape[1]
    assert cache.layers[0].positions[0, 0, -3:].tolist() == [40, 41, 42]


@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_policy_keeps_budget_sinks_and_order(tiny_model, ids, policy) -> None:
    ctx, _ = ids
    for ratio in (0.3, 0.75):
        cache = prefill(tiny_model("llama"), ctx, make_press(policy, ratio))
        for layer in cache.layers:
            P = layer.positions
            assert P.shape == (2, 2, n_kept(40, ratio))
            assert bool((P[..., :4] == torch.arange(4)).all()), "sinks not kept"
            assert bool((P.diff(dim=-1) > 0).all()), "kept entries not in position order"
            assert layer.keys.shape[2] == layer.values.shape[2] == P.shape[-1]


def test_kept_entries_are_the_original_keys(tiny_model, ids) -> None:
    ctx, _ = ids
    full = prefill(tiny_model("qwen2"), ctx)
    comp = prefill(tiny_model("qwen2"), ctx, CapKVPress(0.6))
    for lf, lc in zip(full.layers, comp.layers):
        g = lc.positions.unsqueeze(-1).expand(*lc.positions.shape, lf.keys.shape[-1])
        torch.testing.assert_close(lf.keys.gather(2, g), lc.keys)
        torch.testing.assert_close(lf.values.gather(2, g), lc.values)


def test_ratio_zero_is_identity(tiny_model, ids) -> None:
    ctx, cont = ids
    m = tiny_model("llama")
    full = continuation_logits(m, prefill(m, ctx), cont)
    for policy in POLICIES:
        press = make_press(policy, 0.0)
        cache = prefill(m, ctx, press)
        assert cache.physical_lengths() == [40, 40]
        torch.testing.assert_close(continuation_logits(m, cache, cont), full)


def test_generate_matches_full_generate_at_ratio_zero_and_runs_compressed(tiny_model,
                                                                          ids) -> None:
    ctx, q = ids
    m = tiny_model("qwen2")
    with torch.no_grad():
        ref = m.generate(torch.cat([ctx, q], 1), max_new_tokens=6, do_sample=False)[:, 43:]
    assert torch.equal(generate_with_press(m, ctx, CapKVPress(0.0), 6, question_ids=q), ref)
    assert torch.equal(generate_with_press(m, ctx, None, 6, question_ids=q), ref)
    out = generate_with_press(m, ctx, CapKVPress(0.5), 6, question_ids=q)
    assert out.shape == (2, 6)
    # Greedy generate on the compressed cache equals a manual greedy loop on the same cache.
    cache = prefill(m, ctx[:, :-1], CapKVPress(0.5))
    step = torch.cat([ctx[:, -1:], q], 1)
    toks = []
    for _ in range(6):
        nxt = continuation_logits(m, cache, step)[:, -1].argmax(-1, keepdim=True)
        toks.append(nxt)
        step = nxt
    assert torch.equal(torch.cat(toks, 1), out)


def test_streaming_keeps_sinks_and_recent_window(tiny_model, ids) -> None:
    cache = prefill(tiny_model("llama"), ids[0], StreamingLLMPress(0.5, n_sink=4))
    expected = list(range(4)) + list(range(40 - 16, 40))
    assert cache.layers[1].positions[1, 1].tolist() == expected


@pytest.mark.parametrize("family", ["mistral", "qwen3"])
def test_mistral_and_qwen3_style_models_work(family) -> None:
    import transformers
    from transformers import AutoModelForCausalLM

    cls = {"mistral": transformers.MistralConfig, "qwen3": transformers.Qwen3Config}[family]
    torch.manual_seed(0)
    cfg = cls(vocab_size=64, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, intermediate_size=128, head_dim=16)
    m = AutoModelForCausalLM.from_config(cfg).eval()
    ctx = torch.randint(4, 64, (1, 30))
    cache = prefill(m, ctx, CapKVPress(0.5))
    assert cache.physical_lengths() == [15, 15]
    out = generate_with_press(m, ctx, CapKVPress(0.5), 4)
    assert out.shape == (1, 4)


def test_deterministic(tiny_model, ids) -> None:
    a = prefill(tiny_model("llama"), ids[0], CapKVPress(0.5)).layers[1].positions
    b = prefill(tiny_model("llama"), ids[0], CapKVPress(0.5)).layers[1].positions
    assert torch.equal(a, b)


def test_bad_input_is_refused(tiny_model, ids) -> None:
    ctx, _ = ids
    m = tiny_model("llama")
    for r in (1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=r"in \[0, 1\)"):
            CapKVPress(r)
    with pytest.raises(ValueError, match="in \\[0, 1\\)"):
        CapKVPress(0.5, layer_ratios=[0.5, 1.0])
    with pytest.raises(ValueError, match="sink"):
        prefill(m, ctx[:, :8], CapKVPress(0.9))
    with pytest.raises(ValueError, match="padded"):
        prefill(m, ctx, CapKVPress(0.5), attention_mask=torch.tensor([[0] + [1] * 39] * 2))
    with pytest.raises(ValueError, match="one ratio per layer"):
        prefill(m, ctx, CapKVPress(0.5, layer_ratios=[0.5]))
    with pytest.raises(ValueError, match="CapKVCache"):
        with CapKVPress(0.5)(m), torch.no_grad():
            m(input_ids=ctx, cache=DynamicCache(), use_cache=True)
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    with pytest.raises(ValueError, match="Llama"):
        prefill(gpt2, ctx, CapKVPress(0.5))
    with pytest.raises(ValueError, match="takes no option.*tau"):
        make_press("leverage", 0.5, tau=5.0)  # leverage is tau = 0 by definition
    assert make_press("leverage", 0.5, PressConfig(tau=5.0)).tau == 0.0  # a config's: unread
    with pytest.raises(ValueError, match=r"'snapkv' takes no option\(s\) taw"):
        make_press("snapkv", 0.5, taw=5.0)  # a typo is named, not dropped
    with pytest.raises(ValueError, match="takes no option.*window"):
        make_press("capkv", 0.5, window=8)
    assert make_press("capkv", 0.5, PressConfig(window=8)).tau == PressConfig().tau
    assert make_press("greedy_logdet", 0.5, tau=2.0).tau == 2.0
    with pytest.raises(ValueError, match="unknown policy"):
        make_press("h3o", 0.5)
    assert isinstance(prefill(m, ctx), CapKVCache)


def test_bfloat16_model(ids) -> None:
    from icml.models import tiny_causal_lm

    m = tiny_causal_lm("llama", hidden_size=64, vocab_size=64, dtype=torch.bfloat16)
    for policy in ("capkv", "greedy_logdet", "snapkv"):
        cache = prefill(m, ids[0], make_press(policy, 0.5))
        assert cache.layers[0].keys.dtype == torch.bfloat16
        assert cache.physical_lengths() == [20, 20]
        assert bool(torch.isfinite(continuation_logits(m, cache, ids[1]).float()).all())


def test_padded_mask_in_direct_model_call_is_refused(tiny_model, ids) -> None:
    """Inside ``with press(model)`` the attention layers get a 4D (or no) mask, so padding must be
    caught where the 2D mask enters the decoder, not silently compressed."""
    ctx, _ = ids
    m = tiny_model("llama")
    mask = torch.ones_like(ctx)
    mask[0, 0] = 0
    with pytest.raises(ValueError, match="padding"):
        with CapKVPress(0.5)(m), torch.no_grad():
            m(input_ids=ctx, attention_mask=mask, cache=CapKVCache(), use_cache=True)
    with CapKVPress(0.5)(m), torch.no_grad():  # an all-ones mask is fine
        cache = CapKVCache()
        m(input_ids=ctx, attention_mask=torch.ones_like(ctx), cache=cache, use_cache=True)
    assert cache.physical_lengths() == [20, 20]
