import pytest
import torch
from icml_synsem import (
    clip_quantiles,
    default_layers,
    extract_sentence_reps,
    load_model,
    resolve_layers,
)
from icml_synsem.config import ExtractionOptions


def _one_by_one(model, tok, sentences, **kw):
    return torch.cat([extract_sentence_reps(model, tok, [s], ExtractionOptions(batch_size=1, **kw))
                      for s in sentences], dim=1)


@pytest.mark.parametrize("pool", ["mean", "concat"])
def test_batched_equals_per_sentence(byte_lm, sentences, pool):
    """Right padding leaves every real token's hidden state unchanged, and clipping quantiles
    are computed over each sentence's own tokens only."""
    model, tok = byte_lm
    batched = extract_sentence_reps(model, tok, sentences,
                                    ExtractionOptions(layers=[0, 1, 2], pool=pool, batch_size=4))
    single = _one_by_one(model, tok, sentences, layers=[0, 1, 2], pool=pool)
    assert batched.shape == (3, len(sentences), 32 * (3 if pool == "concat" else 1))
    torch.testing.assert_close(batched, single, atol=2e-5, rtol=1e-4)


def test_concat_chunks_average_to_mean_pool(byte_lm, sentences):
    model, tok = byte_lm
    sentences = [s for s in sentences if len(s) >= 4]
    cat = extract_sentence_reps(model, tok, sentences, ExtractionOptions(layers=[2], pool="concat",
                                                                         last_n=4))
    mean = extract_sentence_reps(model, tok, sentences, ExtractionOptions(layers=[2], pool="mean",
                                                                          last_n=4))
    torch.testing.assert_close(cat.reshape(1, len(sentences), 4, 32).mean(2), mean)


def test_mean_pool_matches_manual_hidden_states(byte_lm):
    model, tok = byte_lm
    s = "a small manual check"
    ids = torch.tensor([tok(s, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        hs = model(input_ids=ids, output_hidden_states=True).hidden_states
    for layer in (0, 1, 2):
        h = hs[layer][0]
        lo, hi = torch.quantile(h.flatten(), torch.tensor([0.05, 0.95]))
        want = h.clamp(lo, hi)[-3:].mean(0)
        got = extract_sentence_reps(model, tok, [s], ExtractionOptions(layers=[layer]))[0, 0]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    raw = extract_sentence_reps(model, tok, [s], ExtractionOptions(layers=[2], clip=False))[0, 0]
    torch.testing.assert_close(raw, hs[2][0, -3:].mean(0), atol=1e-5, rtol=1e-5)


def test_clip_quantiles_bounds_and_padding_ignored():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(2, 5, 4, generator=g)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    h_pad = h.clone()
    h_pad[0, 3:] = 1e6  # huge padding values must not move the quantiles
    out = clip_quantiles(h_pad, mask, (0.1, 0.9))
    lo, hi = torch.quantile(h[0, :3].flatten(), torch.tensor([0.1, 0.9]))
    assert out[0, :3].min() >= lo - 1e-6 and out[0, :3].max() <= hi + 1e-6
    torch.testing.assert_close(out[0, :3], h[0, :3].clamp(lo, hi))
    torch.testing.assert_close(clip_quantiles(h, torch.ones(2, 5), (0.0, 1.0)), h)
    with pytest.raises(ValueError, match="low < high"):
        clip_quantiles(h, mask, (0.9, 0.1))


def test_default_layers_keep_first_and_last():
    for n in range(1, 40):
        layers = default_layers(n)
        assert layers[0] == 1 and layers[-1] == n
        assert layers == sorted(set(layers))
        assert len(layers) == (1 if n == 1 else max(2, -(-n // 2)))
    assert resolve_layers([-1, 0], 4) == [0, 4]
    with pytest.raises(ValueError, match="out of range.*0..4"):
        resolve_layers([5], 4)


def test_bad_input(byte_lm):
    model, tok = byte_lm
    with pytest.raises(ValueError, match="fewer than last_n=3"):
        extract_sentence_reps(model, tok, ["ok sentence", "ab"])
    with pytest.raises(ValueError, match="no sentences"):
        extract_sentence_reps(model, tok, [])
    with pytest.raises(ValueError, match="out of range"):
        extract_sentence_reps(model, tok, ["abcdef"], ExtractionOptions(layers=[7]))
    with pytest.raises(ValueError, match="pool"):
        extract_sentence_reps(model, tok, ["abcdef"], ExtractionOptions(pool="max"))
    with pytest.raises(TypeError, match="list of strings"):
        extract_sentence_reps(model, tok, "abcdef")


def test_encoder_model_and_qwen2(byte_lm, sentences):
    from transformers import BertConfig, BertModel

    from icml.models import tiny_causal_lm

    _, tok = byte_lm
    torch.manual_seed(0)
    bert = BertModel(BertConfig(vocab_size=260, hidden_size=32, num_hidden_layers=2,
                                num_attention_heads=4, intermediate_size=64,
                                pad_token_id=0)).eval()
    qwen = tiny_causal_lm("qwen2", num_layers=2, hidden_size=32, seed=1)
    for model in (bert, qwen):
        batched = extract_sentence_reps(model, tok, sentences, ExtractionOptions(layers=[0, 2],
                                                                                 batch_size=3))
        assert batched.shape == (2, len(sentences), 32) and torch.isfinite(batched).all()
        torch.testing.assert_close(batched, _one_by_one(model, tok, sentences, layers=[0, 2]),
                                   atol=2e-5, rtol=1e-4)


def test_bfloat16_runs(byte_lm, sentences):
    model, tok = byte_lm
    ref = extract_sentence_reps(model, tok, sentences, ExtractionOptions(layers=[2]))
    bf = extract_sentence_reps(model.to(torch.bfloat16), tok, sentences,
                               ExtractionOptions(layers=[2]))
    model.to(torch.float32)
    assert bf.dtype == torch.float32 and torch.isfinite(bf).all()
    cos = torch.nn.functional.cosine_similarity(bf[0], ref[0], dim=1)
    assert cos.min() > 0.98


def test_load_model_from_save_pretrained(toy, tmp_path):
    model, tok, data, _ = toy
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, ltok = load_model(str(tmp_path))
    a = extract_sentence_reps(model, tok, data.originals[:10], ExtractionOptions(layers=[1, 3]))
    b = extract_sentence_reps(loaded, ltok, data.originals[:10], ExtractionOptions(layers=[1, 3]))
    torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="save_pretrained"):
        load_model(str(tmp_path / "missing"))


@pytest.mark.parametrize("q", [(0.05, 0.95), (0.1, 0.3), (0.6, 0.99), (0.0, 1.0)])
def test_clip_quantiles_match_torch_quantile(q):
    g = torch.Generator().manual_seed(1)
    h = torch.randn(6, 9, 5, generator=g)
    lengths = [9, 1, 4, 7, 2, 9]
    mask = (torch.arange(9)[None] < torch.tensor(lengths)[:, None]).long()
    out = clip_quantiles(h, mask, q)
    for i, n in enumerate(lengths):
        lo, hi = torch.quantile(h[i, :n].flatten(), torch.tensor(q))
        torch.testing.assert_close(out[i, :n], h[i, :n].clamp(lo, hi))


def test_causal_models_skip_the_attention_mask(byte_lm, sentences):
    """Right padding needs no mask in a causal model (each real token attends only to earlier,
    real tokens), so the batched forward runs without one (the faster is_causal attention); an
    encoder still gets the mask. Results are checked against the per-sentence loop above."""
    from icml_synsem.representations import is_causal
    from transformers import BertConfig, BertModel

    model, tok = byte_lm
    bert = BertModel(BertConfig(vocab_size=260, hidden_size=32, num_hidden_layers=1,
                                num_attention_heads=4, intermediate_size=64)).eval()
    assert is_causal(model) and not is_causal(bert) and not is_causal(torch.nn.Linear(2, 2))
    for m, want_mask in ((model, False), (bert, True)):
        seen = []
        base = getattr(m, "base_model", m)
        handle = base.register_forward_pre_hook(
            lambda mod, args, kwargs, seen=seen: seen.append(kwargs.get("attention_mask")),
            with_kwargs=True)
        try:
            extract_sentence_reps(m, tok, sentences, ExtractionOptions(layers=[-1],
                                                                       batch_size=len(sentences)))
        finally:
            handle.remove()
        assert len(seen) == 1 and (seen[0] is not None) == want_mask
