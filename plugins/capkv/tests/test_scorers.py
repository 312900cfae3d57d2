"""Scorer invariants: shapes, GQA head mapping, sinks, duplicates, the RoPE anchor, and the
planted-redundancy claim at tensor level."""

import pytest
import torch
from icml_capkv import (
    CapKVPress,
    ScoreInputs,
    capkv_relevance,
    capkv_scores,
    knorm_scores,
    make_press,
    query_anchor,
    ridge_leverage,
    snapkv_scores,
)
from icml_capkv.fidelity import spearman, tensor_benchmark


def _state(seed=0, B=2, Hkv=2, r=2, T=24, d=8):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(B, Hkv, T, d, generator=g, dtype=torch.float64)
    v = torch.randn(B, Hkv, T, d, generator=g, dtype=torch.float64)
    q = torch.randn(B, Hkv * r, 6, d, generator=g, dtype=torch.float64)
    mu = torch.randn(B, Hkv * r, d, generator=g, dtype=torch.float64)
    return ScoreInputs(k, v, q, mu)


def test_capkv_scores_match_per_head_leverage_with_gqa_mapping() -> None:
    x = _state()
    s = capkv_scores(x, tau=3.0, ridge=0.5, n_sink=4)
    assert s.shape == (2, 2, 24)
    for b in range(2):
        for h in range(2):
            per_q = []
            for j in range(2):  # query heads of KV head h are 2h, 2h+1 (h // n_rep layout)
                qh = 2 * h + j
                c = torch.nn.functional.cosine_similarity(x.keys[b, h], x.query_anchor[b, qh]
                                                          .expand(24, 8), dim=-1)
                w = torch.exp(3.0 * (c - c[4:].max()))
                mask = torch.ones(24, dtype=torch.float64)
                mask[:4] = 0
                per_q.append(ridge_leverage(x.values[b, h], w, 0.5, mask))
            ref = torch.stack(per_q).mean(0)
            torch.testing.assert_close(s[b, h, 4:], ref[4:])
            assert bool((s[b, h, :4] > ref[4:].max()).all()), "sinks must outrank every token"


def test_capkv_scores_in_unit_interval_and_deterministic() -> None:
    x = _state(1)
    s = capkv_scores(x, n_sink=0)
    assert bool((s >= 0).all()) and bool((s < 1).all())
    torch.testing.assert_close(s, capkv_scores(x, n_sink=0))


def test_tau_zero_is_pure_value_leverage() -> None:
    x = _state(2)
    s = capkv_scores(x, tau=0.0, n_sink=0)
    torch.testing.assert_close(s, ridge_leverage(x.values))
    assert bool((capkv_relevance(x.keys, x.query_anchor, tau=0.0) == 1).all())


def test_duplicated_token_loses_capkv_score_but_not_knorm() -> None:
    x = _state(3, B=1, Hkv=1, r=1, T=16)
    dup = ScoreInputs(torch.cat([x.keys, x.keys[:, :, 9:10]], 2),
                      torch.cat([x.values, x.values[:, :, 9:10]], 2), None, x.query_anchor)
    s, s2 = capkv_scores(x, n_sink=0), capkv_scores(dup, n_sink=0)
    # Closed form: with a = s / (1 - s) the leverage against the others, each copy scores
    # a / (1 + 2a) < s.
    a = s[0, 0, 9] / (1 - s[0, 0, 9])
    torch.testing.assert_close(s2[0, 0, 9], a / (1 + 2 * a))
    assert float(s2[0, 0, 9]) < float(s[0, 0, 9]) - 0.01
    torch.testing.assert_close(s2[0, 0, 9], s2[0, 0, 16])
    torch.testing.assert_close(knorm_scores(dup)[..., :16], knorm_scores(x))


def test_snapkv_keeps_window_and_is_attention_mass() -> None:
    x = _state(4)
    s = snapkv_scores(x, window=4, kernel=1)
    assert bool((s[..., -4:] > s[..., :-4].amax(-1, keepdim=True)).all())
    # Without pooling the non-window scores are mean attention probabilities: they sum to <= 1.
    assert bool((s[..., :-4].sum(-1) <= 1 + 1e-6).all())


def test_query_anchor_is_average_future_rotation(tiny_model) -> None:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    m = tiny_model("llama")
    attn = m.model.layers[0].self_attn
    h = torch.randn(1, 10, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        anchor = query_anchor(attn, h, m.model.rotary_emb, n_future=3)
        mu = attn.q_proj(h).view(1, 10, 4, 16).transpose(1, 2).mean(2, keepdim=True)
        rots = []
        for p in (10, 11, 12):
            cos, sin = m.model.rotary_emb(h, torch.tensor([[p]]))
            rots.append(apply_rotary_pos_emb(mu, mu, cos, sin)[0][:, :, 0])
    torch.testing.assert_close(anchor, torch.stack(rots).mean(0), rtol=1e-5, atol=1e-6)
    unrot = query_anchor(attn, h, m.model.rotary_emb, n_future=0)
    torch.testing.assert_close(unrot, mu[:, :, 0])


def test_compress_tensors_ratio_zero_is_identity() -> None:
    x = _state(5)
    k, v, idx = CapKVPress(0.0).compress_tensors(x.keys, x.values, query_anchor=x.query_anchor)
    assert torch.equal(k, x.keys) and torch.equal(v, x.values)
    assert idx.shape == (2, 2, 24)


def test_planted_redundancy_what_is_true() -> None:
    """Every policy, both query laws. With retrieval queries (sharp attention on one prototype)
    capacity-aware scoring beats the attention/recency/norm baselines, but pure leverage (tau 0)
    beats CapKV; with diffuse queries (soft attention around one direction, where copy counts
    matter) the capacity scorers are the worst but for key-norm and StreamingLLM wins."""
    pols = ("capkv", "leverage", "snapkv", "h2o", "streaming", "knorm", "random")
    rows, rho = tensor_benchmark(ratios=(0.5,), seeds=(0, 1), T=192, query_mode="retrieval",
                                 policies=pols)
    err = {r["policy"]: r["error"] for r in rows}
    attention_like = min(err[p] for p in ("snapkv", "h2o", "streaming", "knorm", "random"))
    assert err["capkv"] < 0.7 * attention_like, err
    assert err["leverage"] < 0.5 * err["capkv"], err  # the relevance weight hurts here
    assert rho < 0, "higher capacity should mean lower error with retrieval queries"
    rows, _ = tensor_benchmark(ratios=(0.5,), seeds=(0, 1), T=192, query_mode="diffuse",
                               policies=pols)
    err = {r["policy"]: r["error"] for r in rows}
    assert min(err, key=err.get) == "streaming", err
    assert err["capkv"] > 2 * err["streaming"] and err["leverage"] > 2 * err["streaming"], err
    assert err["capkv"] > max(err[p] for p in ("snapkv", "h2o", "random")), err


def test_spearman_and_bad_inputs() -> None:
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    x = _state()
    with pytest.raises(ValueError, match="needs ScoreInputs.query_anchor"):
        capkv_scores(ScoreInputs(x.keys, x.values))
    with pytest.raises(ValueError, match="shape"):
        ScoreInputs(x.keys, x.values[:, :1])
    with pytest.raises(ValueError, match="multiple"):
        ScoreInputs(x.keys, x.values, query_anchor=x.query_anchor[:, :3])
    with pytest.raises(ValueError, match="capacity_vectors"):
        make_press("capkv", 0.5, capacity_vectors="queries")
