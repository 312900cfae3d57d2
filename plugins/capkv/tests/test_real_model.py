"""The real pretrained chat model (SmolLM2-135M-Instruct, offline): a short needle task the full
cache answers, exact grading equal to greedy ``generate``, and decoding on a compressed cache equal
to decoding on the full cache with the evicted positions masked out of attention."""

from __future__ import annotations

import math

import pytest
import torch

pytestmark = pytest.mark.pretrained


def test_short_needle_full_cache_answers_and_grading_is_greedy_decoding(smol) -> None:
    from icml_capkv import CapKVPress, StreamingLLMPress, prefill
    from icml_capkv.longctx import evaluate_item, make_items

    model, tok = smol
    items = make_items(tok, "niah_single", 256, 1, seed=0)
    for it in items:
        ids = torch.tensor([it.context_ids + it.question_ids])
        out = model.generate(ids, max_new_tokens=len(it.answer_ids), do_sample=False)
        assert out[0, ids.shape[1]:].tolist() == it.answer_ids  # the full cache answers
        rows = evaluate_item(model, it, ["capkv", "streaming"], [0.9], modes=(False,))
        assert [r["correct"] for r in rows if r["policy"] == "full"] == [1.0]
        # the engine's exact grade (teacher-forced) equals greedy generate on a compressed cache
        for press in (CapKVPress(0.9), StreamingLLMPress(0.9)):
            ctx = torch.tensor([it.context_ids])
            cache = prefill(model, ctx, press)
            q = torch.tensor([it.question_ids])
            gen = model.generate(torch.cat([ctx, q], 1), cache=cache, do_sample=False,
                                 max_new_tokens=len(it.answer_ids),
                                 attention_mask=torch.ones(1, ctx.shape[1] + q.shape[1],
                                                           dtype=torch.long))
            ok = gen[0, ctx.shape[1] + q.shape[1]:].tolist() == it.answer_ids
            row = next(r for r in rows if r["policy"] == press.name)
            assert row["correct"] == float(ok), (press.name, row)


def _masked_attention(evicted: dict):
    """An eager attention that also masks, per layer and KV head, the evicted context columns."""

    def attn(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        n_rep = query.shape[1] // key.shape[1]
        k = key.repeat_interleave(n_rep, 1)
        v = value.repeat_interleave(n_rep, 1)
        scale = scaling if scaling is not None else 1 / math.sqrt(query.shape[-1])
        logits = query @ k.transpose(-1, -2) * scale
        if attention_mask is not None:
            m = attention_mask[..., : k.shape[-2]]
            logits = (logits.masked_fill(~m, -math.inf) if m.dtype == torch.bool
                      else logits + m)
        ev = evicted.get(module.layer_idx)
        if ev is not None:  # (B, H_kv, T_ctx) True = evicted
            ev = ev.repeat_interleave(n_rep, 1)[:, :, None, :]
            logits[..., : ev.shape[-1]] = logits[..., : ev.shape[-1]].masked_fill(ev, -math.inf)
        out = logits.softmax(-1) @ v
        return out.transpose(1, 2).contiguous(), None

    return attn


def test_compressed_cache_decoding_equals_masked_full_cache(smol) -> None:
    from icml_capkv import CapKVPress, continuation_logits, prefill
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    from icml.data import eval_token_ids

    model, tok = smol
    ids = torch.tensor([eval_token_ids(tok, 224)])
    ctx, cont = ids[:, :200], ids[:, 200:]
    cache = prefill(model, ctx, CapKVPress(0.5))
    logits_c = continuation_logits(model, cache, cont)
    evicted = {}
    for i, layer in enumerate(cache.layers):
        ev = torch.ones(1, layer.positions.shape[1], 200, dtype=torch.bool)
        ev.scatter_(2, layer.positions[..., : layer.physical_length - cont.shape[1]], False)
        evicted[i] = ev
    assert all(int(e.sum()) == 3 * 100 for e in evicted.values())  # 100 of 200 kept per head
    AttentionInterface.register("capkv_masked_test", _masked_attention(evicted))
    AttentionMaskInterface.register("capkv_masked_test", ALL_MASK_ATTENTION_FUNCTIONS["eager"])
    old = model.config._attn_implementation
    try:
        model.set_attn_implementation("capkv_masked_test")
        masks = dict(evicted)
        evicted.clear()  # the prefill's own attention stays full, as with the press
        full = prefill(model, ctx)
        evicted.update(masks)
        logits_m = continuation_logits(model, full, cont)
    finally:
        model.set_attn_implementation(old)
    torch.testing.assert_close(logits_c, logits_m, atol=2e-4, rtol=1e-4)
    assert torch.equal(logits_c.argmax(-1), logits_m.argmax(-1))
    # and eviction matters: the unmasked full cache gives other logits
    logits_f = continuation_logits(model, prefill(model, ctx), cont)
    assert (logits_f - logits_c).abs().max() > 1e-2


def test_cli_runs_the_needle_table_on_the_pretrained_model(smol, tmp_path) -> None:
    import json

    from icml.testing import icml_cli

    proc = icml_cli("run", "capkv", "--set", "model=smollm2-135m-instruct", "--set",
                    "long_items=1", "--set", "long_context_len=256", "--set", "ratios=[0.5]",
                    "--set", "policies=capkv,streaming", "--set", "question_aware=agnostic",
                    "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(next(tmp_path.rglob("result.json")).read_text())
    m = res["metrics"]
    assert m["full_accuracy/niah_single/agnostic"] == 1.0
    assert {"accuracy/niah_single/agnostic/capkv/0.5",
            "kl/niah_single/agnostic/streaming/0.5"} <= set(m)
    assert 0 < m["capkv_scoring_over_prefill"] < 1
