"""Invariants of the LED step on fixed tensors (no model)."""

import pytest
import torch
from icml_led import LEDConfig, led_step, sample_sorted


def _logits(B=64, d=4, V=50, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, d, V, generator=g) * scale


def test_depth_one_equals_topk_sampling_with_same_stream():
    lg = _logits(d=1)
    k, T = 8, 0.6
    a = led_step(lg, LEDConfig(depth=1, top_k=k), temperature=T,
                 generator=torch.Generator().manual_seed(7))
    # plain top-k sampling: temperature, mask all but the top k, renormalise, same stream
    scaled = lg[:, 0] / T
    kth = scaled.topk(k, -1).values[:, -1:]
    probs = torch.softmax(scaled.masked_fill(scaled < kth, -float("inf")), -1)
    b = sample_sorted(probs, torch.Generator().manual_seed(7))
    assert torch.equal(a.tokens, b)
    assert not a.explore.any()


def test_depth_one_matches_topk_distribution():
    lg = _logits(B=1, d=1, V=12, seed=3, scale=1.0).expand(20000, 1, 12).contiguous()
    info = led_step(lg, LEDConfig(depth=1, top_k=4), temperature=1.0,
                    generator=torch.Generator().manual_seed(0))
    p = torch.softmax(lg[0, 0], -1)
    top_p, top_i = p.topk(4)
    want = top_p / top_p.sum()
    got = torch.stack([(info.tokens == i).float().mean() for i in top_i])
    assert torch.allclose(got, want, atol=0.015)


@pytest.mark.parametrize("greedy", [False, True])
def test_token_always_in_final_topk(greedy):
    lg = _logits(B=256, d=6, V=40, seed=1)
    info = led_step(lg, LEDConfig(depth=6, top_k=5, exploit_by_confidence=False),
                    temperature=1.3, generator=torch.Generator().manual_seed(2), greedy=greedy)
    top = lg[:, 0].topk(5, -1).indices
    assert (info.tokens[:, None] == top).any(-1).all()
    assert info.explore.all()  # exploration on every row without the confidence gate


def test_no_exploration_at_full_confidence():
    lg = _logits(B=128, d=4, V=30, seed=4)
    lg[:, 0] = -30.0
    lg[:, 0, 7] = 200.0   # top-1 confidence exactly 1 in float32
    assert torch.softmax(lg[:, 0] / 0.6, -1)[:, 7].eq(1.0).all()
    for seed in range(5):
        info = led_step(lg, LEDConfig(depth=4, top_k=8), temperature=0.6,
                        generator=torch.Generator().manual_seed(seed))
        assert not info.explore.any()
        assert info.tokens.eq(7).all()


def test_exploration_rate_follows_confidence_gate():
    lg = _logits(B=1, d=3, V=20, seed=5, scale=1.5).expand(20000, 3, 20).contiguous()
    info = led_step(lg, LEDConfig(depth=3, top_k=8), temperature=1.0,
                    generator=torch.Generator().manual_seed(9))
    p1 = torch.softmax(lg[0, 0], -1).max()
    assert abs(info.explore.float().mean() - (1 - p1)) < 0.015


def test_chosen_entropy_at_least_final_layer():
    lg = _logits(B=200, d=8, V=60, seed=6)
    info = led_step(lg, LEDConfig(depth=8, top_k=8), temperature=0.6,
                    generator=torch.Generator().manual_seed(0))
    rows = torch.arange(200)
    chosen = info.entropies[rows, info.chosen_depth]
    assert (chosen >= info.entropies[:, 0]).all()
    assert torch.equal(chosen, info.entropies.max(1).values)


def test_aggregation_is_topdown_cumulative_sum():
    lg = _logits(B=8, d=4, V=25, seed=7)
    info = led_step(lg, LEDConfig(depth=4, top_k=6), temperature=0.8,
                    generator=torch.Generator().manual_seed(0))
    P = torch.softmax(lg / 0.8, -1)
    Q = P.gather(2, info.candidates[:, None, :].expand(8, 4, 6))
    for j in range(4):
        c = Q[:, :j + 1].sum(1)
        assert torch.allclose(info.aggregated[:, j], c / c.sum(-1, keepdim=True), atol=1e-6)


def test_equal_posteriors_give_renormalised_topk():
    one = _logits(B=16, d=1, V=30, seed=8)
    lg = one.expand(16, 5, 30).contiguous()
    info = led_step(lg, LEDConfig(depth=5, top_k=6), temperature=0.7,
                    generator=torch.Generator().manual_seed(0))
    p = torch.softmax(one[:, 0] / 0.7, -1).topk(6, -1).values
    want = p / p.sum(-1, keepdim=True)
    for j in range(5):
        assert torch.allclose(info.aggregated[:, j], want, atol=1e-6)


def test_outside_think_span_equals_base_path():
    lg = _logits(B=128, d=4, V=30, seed=9, scale=1.0)
    in_think = torch.arange(128) % 2 == 0
    info = led_step(lg, LEDConfig(depth=4, top_k=8, exploit_by_confidence=False),
                    temperature=1.0, generator=torch.Generator().manual_seed(0),
                    in_think=in_think)
    assert torch.equal(info.tokens[~in_think], info.base_tokens[~in_think])
    assert info.explore[in_think].all() and not info.explore[~in_think].any()
    assert (info.tokens[in_think] != info.base_tokens[in_think]).any()


def test_defaults_are_the_official_codes():
    """led/decoding.py + run_benchmarks.py of AlbertTan404/LED: d=8, k=8, ln=0, do_exploit=1,
    think_only=1, eps=1e-6, layer set {L, L-2..L-d}, random gate also in greedy mode."""
    c = LEDConfig()
    assert (c.depth, c.top_k, c.use_final_norm, c.exploit_by_confidence, c.think_only,
            c.skip_penultimate) == (8, 8, False, True, True, True)
    assert c.eps == 1e-6 and c.greedy_gate is None


def test_greedy_default_gate_is_the_official_bernoulli_draw():
    lg = _logits(B=1, d=3, V=20, seed=5, scale=1.5).expand(20000, 3, 20).contiguous()
    info = led_step(lg, LEDConfig(depth=3, top_k=8), greedy=True,
                    generator=torch.Generator().manual_seed(9))
    p1 = torch.softmax(lg[0, 0], -1).max()          # greedy: T = 1, as in the official code
    assert abs(info.explore.float().mean() - (1 - p1)) < 0.015
    assert info.base_tokens.eq(lg[0, 0].argmax()).all()
    assert info.led_tokens.eq(info.led_tokens[0]).all()   # the LED path is its argmax
    assert torch.equal(info.tokens, torch.where(info.explore, info.led_tokens, info.base_tokens))
    with pytest.raises(ValueError, match="greedy_gate"):
        LEDConfig(greedy_gate=1.5)


def test_greedy_is_deterministic_and_uses_mode_of_gate():
    lg = _logits(B=64, d=4, V=30, seed=10, scale=1.0)
    a = led_step(lg, LEDConfig(depth=4, greedy_gate=0.5), greedy=True)
    b = led_step(lg, LEDConfig(depth=4, greedy_gate=0.5), greedy=True)
    assert torch.equal(a.tokens, b.tokens)
    p1 = torch.softmax(lg[:, 0], -1).max(-1).values
    assert torch.equal(a.explore, (1 - p1) > 0.5)
    assert torch.equal(a.base_tokens, lg[:, 0].argmax(-1))


def test_masked_final_tokens_are_never_emitted():
    lg = _logits(B=64, d=4, V=10, seed=11)
    lg[:, 0, :6] = -float("inf")      # only 4 finite final-layer tokens, k = 8
    info = led_step(lg, LEDConfig(depth=4, top_k=8, exploit_by_confidence=False),
                    temperature=1.0, generator=torch.Generator().manual_seed(0))
    assert (info.tokens >= 6).all()


def test_bfloat16_logits_are_accepted():
    lg = _logits(B=8, d=3, V=20).to(torch.bfloat16)
    info = led_step(lg, LEDConfig(depth=3, top_k=4), generator=torch.Generator().manual_seed(0))
    assert info.tokens.shape == (8,) and info.aggregated.dtype == torch.float32


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="larger than the vocabulary"):
        led_step(_logits(V=5), LEDConfig(depth=4, top_k=8))
    with pytest.raises(ValueError, match="4 posteriors .* depth=8: pass LEDConfig\\(depth=4\\)"):
        led_step(_logits(d=4), LEDConfig())
    with pytest.raises(ValueError, match=r"1 \+ len\(layers\) = 3"):
        led_step(_logits(d=4), LEDConfig(layers=(5, 4)))
    with pytest.raises(ValueError, match=r"shape \(64,\)"):
        led_step(_logits(d=4), LEDConfig(depth=4), temperature=torch.ones(3))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        led_step(_logits(d=4), LEDConfig(depth=4), temperature=torch.tensor([1.0, 0.0] * 32))
    with pytest.raises(ValueError, match="generators for a batch of 64"):
        led_step(_logits(d=4), LEDConfig(depth=4), generator=[torch.Generator()])
    with pytest.raises(ValueError, match=r"\(batch, depth, vocab\)"):
        led_step(torch.zeros(3, 5), LEDConfig(depth=4, top_k=2))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        led_step(_logits(), LEDConfig(depth=4, top_k=2), temperature=0.0)
    with pytest.raises(ValueError, match="'LEDConfig.depth': got 0, must be >= 1"):
        LEDConfig(depth=0)
    with pytest.raises(ValueError, match="'LEDConfig.top_k': got 0, must be >= 1"):
        LEDConfig(top_k=0)
    with pytest.raises(ValueError, match="depth must be an integer"):
        LEDConfig(depth=2.5)
    with pytest.raises(ValueError, match="'LEDConfig.eps'"):
        LEDConfig(eps=1.0)


def test_step_reports_per_depth_candidate_probs_and_exploration_probability():
    lg = _logits(B=32, d=5, V=40, seed=12, scale=1.5)
    in_think = torch.arange(32) % 4 != 0
    T = 0.7
    info = led_step(lg, LEDConfig(depth=5, top_k=6), temperature=T,
                    generator=torch.Generator().manual_seed(0), in_think=in_think)
    P = torch.softmax(lg / T, -1)                        # independent recomputation
    top = P[:, 0].topk(6, -1)
    assert torch.equal(info.candidates, top.indices)
    want = torch.stack([P[:, j].gather(1, top.indices) for j in range(5)], 1)
    assert info.candidate_probs.shape == (32, 5, 6)
    assert torch.allclose(info.candidate_probs, want, atol=1e-7)
    p1 = top.values[:, 0]
    assert torch.allclose(info.explore_prob, torch.where(in_think, 1 - p1, 0 * p1))
    ungated = led_step(lg, LEDConfig(depth=5, top_k=6, exploit_by_confidence=False),
                       temperature=T, generator=torch.Generator().manual_seed(0))
    assert ungated.explore_prob.eq(1).all()
    d1 = led_step(lg[:, :1], LEDConfig(depth=1, top_k=6), temperature=T)
    assert d1.explore_prob.eq(0).all() and d1.candidate_probs.shape == (32, 1, 6)


def test_per_row_temperature_tensor_equals_rows_one_by_one():
    lg = _logits(B=6, d=4, V=30, seed=13, scale=1.0)
    temps = torch.tensor([0.3, 0.6, 1.0, 1.4, 2.0, 0.8])
    gens = [torch.Generator().manual_seed(100 + i) for i in range(6)]
    batch = led_step(lg, LEDConfig(depth=4, top_k=8), temperature=temps, generator=gens)
    for i in range(6):
        one = led_step(lg[i:i + 1], LEDConfig(depth=4, top_k=8), temperature=float(temps[i]),
                       generator=torch.Generator().manual_seed(100 + i))
        assert torch.equal(batch.tokens[i:i + 1], one.tokens)
        assert torch.allclose(batch.candidate_probs[i:i + 1], one.candidate_probs)
        assert torch.allclose(batch.explore_prob[i:i + 1], one.explore_prob)
    # (B, 1) is accepted too, and a scalar tensor broadcasts
    col = led_step(lg, LEDConfig(depth=4, top_k=8), temperature=temps[:, None],
                   generator=[torch.Generator().manual_seed(100 + i) for i in range(6)])
    assert torch.equal(col.tokens, batch.tokens)
    s = led_step(lg, LEDConfig(depth=4), temperature=torch.tensor(0.6),
                 generator=torch.Generator().manual_seed(1))
    f = led_step(lg, LEDConfig(depth=4), temperature=0.6,
                 generator=torch.Generator().manual_seed(1))
    assert torch.equal(s.tokens, f.tokens)


def test_explicit_layers_set_the_expected_depth():
    lg = _logits(B=4, d=3, V=20)
    info = led_step(lg, LEDConfig(layers=(5, 2), top_k=4), generator=torch.Generator())
    assert info.aggregated.shape == (4, 3, 4)


def _full_sort_draw(probs, u):
    """sample_sorted's protocol on the whole vocabulary: stable descending sort, inverse CDF."""
    sp, si = torch.sort(probs, dim=-1, descending=True, stable=True)
    cdf = sp.cumsum(-1)
    idx = (cdf <= (u * cdf[:, -1])[:, None]).sum(-1)
    idx = torch.minimum(idx, (sp > 0).long().cumsum(-1).argmax(-1))
    return si.gather(1, idx[:, None]).squeeze(1)


def test_sample_sorted_on_a_small_support_equals_the_full_sort():
    """After top-k / top-p a row has few positive entries; sorting only those (with ties,
    duplicated probabilities and rows of different supports) draws the token the stable sort of
    the whole row draws from the same uniforms."""
    from icml_led.led import _sorted_support

    g = torch.Generator().manual_seed(0)
    used_fast = 0
    for trial in range(400):
        B, V = int(torch.randint(1, 9, (1,), generator=g)), int(torch.randint(40, 600, (1,),
                                                                             generator=g))
        lg = torch.randn(B, V, generator=g) * 3
        if trial % 2:
            lg = (lg * 2).round() / 2                              # tied logits
        k = int(torch.randint(1, V // 10, (1,), generator=g))
        lg = lg.masked_fill(lg < lg.topk(k, -1).values[:, -1:], -float("inf"))
        probs = torch.softmax(lg, -1)
        if trial % 3 == 0:                                         # tied probabilities
            probs = torch.where(probs > 0, probs.mul(8).round().div(8).clamp_min(1 / 64), probs)
        used_fast += _sorted_support(probs) is not None
        seeds = torch.randint(0, 2 ** 31, (B,), generator=g).tolist()
        got = sample_sorted(probs, [torch.Generator().manual_seed(s) for s in seeds])
        u = torch.cat([torch.rand(1, generator=torch.Generator().manual_seed(s))
                       for s in seeds])
        assert torch.equal(got, _full_sort_draw(probs, u)), trial
    assert used_fast > 300


def test_sorted_support_falls_back_to_the_full_sort():
    from icml_led.led import _sorted_support

    dense = torch.softmax(torch.randn(3, 50), -1)
    assert _sorted_support(dense) is None                           # support above 1/8 of V
    sparse = torch.zeros(2, 100)
    sparse[0, 5] = 1.0
    assert _sorted_support(sparse) is None                          # a row with no support
    sparse[1, [9, 3, 40]] = torch.tensor([0.25, 0.5, 0.25])
    vals, idx = _sorted_support(sparse)
    assert idx[1].tolist() == [3, 9, 40] and vals[1].tolist() == [0.5, 0.25, 0.25]
    assert vals[0].tolist() == [1.0, 0.0, 0.0] and idx[0, 0] == 5
    assert torch.equal(sample_sorted(sparse, None, greedy=True), torch.tensor([5, 3]))
    torch.manual_seed(0)
    a = sample_sorted(sparse)
    torch.manual_seed(0)
    assert torch.equal(a, _full_sort_draw(sparse, torch.rand(2)))
