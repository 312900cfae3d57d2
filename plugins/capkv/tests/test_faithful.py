"""CapKV's scorer against an independent re-derivation of the authors' kvpress ``CapPress``
(written from the method description, not from their code): anchor from the pre-RoPE queries of
the non-sink context tokens rotated by the explicit average future RoPE matrix, cosine relevance
with a max-shift over non-sink tokens, value capacity vectors, ``A = I + sum w v v^T`` over the
non-sink tokens, ``s = w v^T A^-1 v`` by a linear solve, mean over the query heads of a KV head."""

import math

import pytest
import torch
from icml_capkv import CapKVCache, CapKVPress, ScoreInputs, capkv_relevance, capkv_scores
from icml_capkv.presses import query_anchor


def _capture(model, ctx):
    """Prefill ``ctx`` into a full cache; return each layer's attention input."""
    hidden = {}

    def pre(mod, args, kwargs):
        hidden[mod.layer_idx] = kwargs["hidden_states"].detach().clone()

    hs = [la.self_attn.register_forward_pre_hook(pre, with_kwargs=True)
          for la in model.model.layers]
    cache = CapKVCache()
    try:
        with torch.no_grad():
            model(input_ids=ctx, cache=cache, use_cache=True)
    finally:
        for h in hs:
            h.remove()
    return hidden, cache


def _reference_scores(model, attn, h, keys, values, tau=5.0, n_sink=4, n_future=512):
    cfg = model.config
    B, T, _ = h.shape
    Hq, Hkv, d = cfg.num_attention_heads, cfg.num_key_value_heads, attn.head_dim
    rep = Hq // Hkv
    with torch.no_grad():
        q = attn.q_proj(h[:, n_sink:]).view(B, T - n_sink, Hq, d).transpose(1, 2).double()
        cos, sin = model.model.rotary_emb(h[:, :1], torch.arange(T, T + n_future)[None])
    cos, sin = cos[0].double(), sin[0].double()  # (n_future, d)
    half = d // 2
    P = torch.zeros(d, d, dtype=torch.float64)  # rotate-half as a matrix: P x = (-x2, x1)
    P[:half, half:] = -torch.eye(half, dtype=torch.float64)
    P[half:, :half] = torch.eye(half, dtype=torch.float64)
    R = torch.stack([torch.diag(c) + torch.diag(s) @ P for c, s in zip(cos, sin)]).mean(0)
    mu = (q @ R.T).mean(2)  # rotate every query, then average: (B, Hq, d)
    out = torch.zeros(B, Hkv, T, dtype=torch.float64)
    for b in range(B):
        for hq in range(Hq):
            k = keys[b, hq // rep, n_sink:].double()
            v = values[b, hq // rep, n_sink:].double()
            c = (torch.nn.functional.normalize(k, dim=-1)
                 @ torch.nn.functional.normalize(mu[b, hq], dim=0)).clamp(-1, 1)
            w = torch.exp(tau * c - (tau * c).max())
            A = torch.eye(d, dtype=torch.float64) + (v * w[:, None]).T @ v
            s = w * (v * torch.linalg.solve(A, v.T).T).sum(-1)
            out[b, hq // rep, n_sink:] += s / rep
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_press_scores_equal_independent_cappress_derivation(tiny_model, arch) -> None:
    """Fails if the anchor averages the sink tokens' queries too (our earlier divergence), if the
    future RoPE rotation or the GQA pooling were wrong, or the leverage solve were off."""
    m = tiny_model(arch)
    ctx = torch.randint(4, 64, (2, 48), generator=torch.Generator().manual_seed(3))
    # A loud first token makes a sink-inclusive anchor visibly different.
    ctx[:, 0] = 1
    hidden, cache = _capture(m, ctx)
    press = CapKVPress(0.5)
    press._rotary = m.model.rotary_emb
    for layer in m.model.layers:
        attn = layer.self_attn
        i = attn.layer_idx
        with torch.no_grad():
            inputs = press._inputs(attn, hidden[i], {}, cache.layers[i])
            got = press.score(inputs).double()
        ref = _reference_scores(m, attn, hidden[i], cache.layers[i].keys, cache.layers[i].values)
        torch.testing.assert_close(got[..., 4:], ref[..., 4:], rtol=2e-4, atol=1e-6)
        # Same kept set as top-k of the reference (sinks first), the kvpress selection.
        k = int(48 * 0.5)
        ref_keep = ref.clone()
        ref_keep[..., :4] = math.inf
        assert torch.equal(press.select(inputs, 0.5), ref_keep.topk(k, -1).indices.sort(-1).values)


def test_anchor_leaves_sinks_out(tiny_model) -> None:
    m = tiny_model("llama")
    attn = m.model.layers[0].self_attn
    h = torch.randn(1, 12, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a4 = query_anchor(attn, h, m.model.rotary_emb, n_future=8, n_sink=4)
        h2 = h.clone()
        h2[:, :4] = 100 * torch.randn(1, 4, 64)  # sinks do not move the anchor
        torch.testing.assert_close(query_anchor(attn, h2, m.model.rotary_emb, 8, 4), a4)
        # ... and it is the anchor of the non-sink tokens rotated for positions 12..19.
        mu = attn.q_proj(h[:, 4:]).view(1, 8, 4, 16).transpose(1, 2).mean(2)
        cos, sin = m.model.rotary_emb(h, torch.arange(12, 20)[None])
        cos, sin = cos.mean(1), sin.mean(1)
        rot = torch.cat([-mu[..., 8:], mu[..., :8]], -1)
        torch.testing.assert_close(a4, mu * cos[:, None] + rot * sin[:, None], rtol=1e-5,
                                   atol=1e-6)


def test_relevance_is_bounded_and_scores_scale_without_t_by_t() -> None:
    g = torch.Generator().manual_seed(0)
    k = torch.randn(1, 1, 8, 4, generator=g)
    mu = torch.cat([k[:, :, 5], -k[:, :, 5]], 1)  # two query heads: aligned and opposed to k_5
    w = capkv_relevance(k, mu, tau=5.0, n_sink=0)
    assert bool((w <= 1).all()) and bool((w >= math.exp(-10) * (1 - 1e-6)).all())
    assert float(w[0, 0, 0, 5]) == 1.0  # the max-shifted cosine of k_5 with itself
    # T = 60000 tokens: a T x T intermediate would need 14 GB; the d x d path needs ~10 MB.
    T = 60000
    x = ScoreInputs(torch.randn(1, 1, T, 4, generator=g), torch.randn(1, 1, T, 4, generator=g),
                    None, torch.randn(1, 2, 4, generator=g))
    s = capkv_scores(x)
    assert s.shape == (1, 1, T) and bool(torch.isfinite(s).all())
    assert bool((s[..., 4:] >= 0).all()) and bool((s[..., 4:] < 1).all())


def test_rope_cache_is_shared_between_layers_and_exact(tiny_model) -> None:
    m = tiny_model("llama")
    h = torch.randn(1, 30, 64, generator=torch.Generator().manual_seed(2))
    cache: dict = {}
    with torch.no_grad():
        outs = [query_anchor(la.self_attn, h, m.model.rotary_emb, 64, 4, cache)
                for la in m.model.layers]
        ref = [query_anchor(la.self_attn, h, m.model.rotary_emb, 64, 4) for la in m.model.layers]
    assert len(cache) == 1  # one averaged rotation for both layers of this length
    for a, b in zip(outs, ref):
        torch.testing.assert_close(a, b)
    # Every sink outranks every other token, and T <= n_sink keeps everything.
    x = ScoreInputs(torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8), None, torch.randn(1, 4, 8))
    assert torch.equal(capkv_scores(x, n_sink=4), torch.ones(1, 2, 3))
