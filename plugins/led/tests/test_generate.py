"""The layer-wise readout and the generate-compatible decoders on real Llama / Qwen2 models."""

from types import SimpleNamespace

import pytest
import torch
from icml_led import (
    DoLaDecoding,
    LEDConfig,
    LEDDecoding,
    SamplingDecoding,
    dola_contrast,
    layer_indices,
    layerwise_logits,
    think_state,
)
from icml_led.layers import layerwise_from_outputs, num_layers_of


def _ids(seed=0, B=3, T=6):
    return torch.randint(4, 260, (B, T), generator=torch.Generator().manual_seed(seed))


def test_official_and_figure_layer_sets():
    assert layer_indices(36, 8) == [36, 34, 33, 32, 31, 30, 29, 28]
    assert layer_indices(36, 8, skip_penultimate=False) == [36, 35, 34, 33, 32, 31, 30, 29]
    assert layer_indices(36, 1) == [36]
    assert layer_indices(6, 6) == [6, 4, 3, 2, 1, 0]
    assert layer_indices(6, 3, layers=[5, 1]) == [6, 5, 1]


def test_index_zero_is_the_models_own_logits_exactly(model):
    ids = _ids()
    lw = layerwise_logits(model, ids, depth=4)
    assert lw.shape == (3, 4, 260)
    with torch.no_grad():
        ref = model(ids).logits[:, -1].float()
    assert torch.equal(lw[:, 0], ref)


@pytest.mark.parametrize("norm", [False, True])
def test_intermediate_rows_are_logit_lens_of_the_right_states(model, norm):
    ids = _ids(1)
    lw = layerwise_logits(model, ids, depth=3, use_final_norm=norm)
    with torch.no_grad():
        hs = model(ids, output_hidden_states=True).hidden_states
        L = num_layers_of(model)
        for row, i in enumerate([L - 2, L - 3], start=1):
            h = hs[i][:, -1]
            h = model.model.norm(h) if norm else h
            assert torch.allclose(lw[:, row], model.lm_head(h).float(), atol=1e-5)


def test_depth_beyond_model_layers_is_a_clear_error(llama):
    with pytest.raises(ValueError, match="depth 7 is larger than the model allows"):
        layerwise_logits(llama, _ids(), depth=7)
    out = llama.generate(_ids(), max_new_tokens=1, do_sample=False,
                         custom_generate=LEDDecoding(LEDConfig(depth=7, skip_penultimate=False)))
    assert out.shape == (3, 7)   # the figure's set reaches the embeddings: depth 7 allowed
    with pytest.raises(ValueError, match="larger than the model allows"):
        llama.generate(_ids(), max_new_tokens=1,
                       custom_generate=LEDDecoding(LEDConfig(depth=8)))
    with pytest.raises(ValueError, match="outside the model's intermediate"):
        layer_indices(6, 2, layers=[6])


def test_topk_larger_than_vocab_and_bad_think_id_are_errors(llama):
    with pytest.raises(ValueError, match="larger than the vocabulary"):
        llama.generate(_ids(), max_new_tokens=1,
                       custom_generate=LEDDecoding(LEDConfig(depth=2, top_k=500)))
    with pytest.raises(ValueError, match="think_end_id=999 is not a token id"):
        llama.generate(_ids(), max_new_tokens=1,
                       custom_generate=LEDDecoding(LEDConfig(depth=2, think_end_id=999)))


def test_missing_hidden_states_is_a_clear_error(llama):
    out = SimpleNamespace(logits=torch.zeros(1, 1, 260), hidden_states=None)
    with pytest.raises(ValueError, match="no hidden_states"):
        layerwise_from_outputs(llama, out, [6, 4])
    with pytest.raises(ValueError, match="num_hidden_layers"):
        num_layers_of(SimpleNamespace(config=SimpleNamespace()))


def test_led_depth_one_generation_equals_topk_sampling(model):
    ids = _ids(2, B=4)
    kw = dict(do_sample=True, temperature=0.7, max_new_tokens=10)
    a = model.generate(ids, custom_generate=LEDDecoding(LEDConfig(depth=1, top_k=8),
                       torch.Generator().manual_seed(5)), **kw)
    b = model.generate(ids, top_k=8, top_p=1.0, custom_generate=SamplingDecoding(
                       torch.Generator().manual_seed(5)), **kw)
    assert torch.equal(a, b)


def test_led_tokens_in_final_topk_during_generation(model):
    dec = LEDDecoding(LEDConfig(depth=4, top_k=3, exploit_by_confidence=False),
                      torch.Generator().manual_seed(0))
    ids = _ids(3)
    out = model.generate(ids, do_sample=True, temperature=1.5, max_new_tokens=6,
                         custom_generate=dec)
    # re-score every prefix and check each emitted token is in the final layer's top-3
    with torch.no_grad():
        logits = model(out).logits
    T0 = ids.shape[1]
    for t in range(T0, out.shape[1]):
        top = logits[:, t - 1].topk(3, -1).indices
        assert (out[:, t, None] == top).any(-1).all()
    assert dec.stats["explored"] == dec.stats["steps"] * 3


def _left_pad(rows):
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask


@pytest.mark.parametrize("make", [lambda: LEDDecoding(LEDConfig(depth=4, top_k=8, greedy_gate=0.5)),
                                  lambda: DoLaDecoding("low")], ids=["led", "dola"])
def test_greedy_batched_equals_unbatched_and_cached_equals_uncached(model, make):
    rows = [[1, 50, 60, 70, 80, 90], [1, 33, 44], [1, 100, 101, 102, 103]]
    ids, mask = _left_pad(rows)
    kw = dict(do_sample=False, max_new_tokens=8, pad_token_id=0)
    batched = model.generate(ids, attention_mask=mask, custom_generate=make(), **kw)
    for i, r in enumerate(rows):
        single = model.generate(torch.tensor([r]), custom_generate=make(), **kw)
        assert batched[i, -8:].tolist() == single[0, -8:].tolist()
    uncached = model.generate(ids, attention_mask=mask, use_cache=False,
                              custom_generate=make(), **kw)
    assert torch.equal(batched, uncached)


def test_think_state_tracks_the_span():
    ids = torch.tensor([[5, 7, 9], [5, 7, 5], [7, 9, 9], [9, 9, 9]])
    assert think_state(ids, 7, 5).tolist() == [True, False, True, False]
    assert think_state(ids, None, 5).tolist() == [False, False, True, True]


def test_no_exploration_outside_the_think_span(llama):
    """The think-start token is banned, so the span never opens: every token is the base path's
    (zero explorations), while the same run with the span open explores."""
    ids = _ids(4, B=6)
    kw = dict(do_sample=True, temperature=1.5, max_new_tokens=12, bad_words_ids=[[200]])
    closed = LEDDecoding(LEDConfig(depth=4, think_start_id=200, think_end_id=201),
                         torch.Generator().manual_seed(0))
    out = llama.generate(ids, custom_generate=closed, **kw)
    assert closed.stats["explored"] == 0 and closed.stats["think_tokens"] == 0
    assert not (out[:, ids.shape[1]:] == 200).any()
    opened = LEDDecoding(LEDConfig(depth=4, think_start_id=200, think_end_id=201),
                         torch.Generator().manual_seed(0))
    llama.generate(torch.cat([ids, torch.full((6, 1), 200)], 1), custom_generate=opened, **kw)
    assert opened.stats["explored"] > 0


def test_dola_decoding_first_step_matches_the_algorithm(llama):
    ids = _ids(5)
    dec = DoLaDecoding("high")
    out = llama.generate(ids, do_sample=False, max_new_tokens=1, custom_generate=dec)
    with torch.no_grad():
        o = llama(ids, output_hidden_states=True)
    L = 6
    cands = list(range(L // 2, L, 2))
    prem = torch.stack([llama.lm_head(o.hidden_states[i][:, -1]) for i in cands])
    scores, chosen = dola_contrast(o.logits[:, -1], prem)
    assert dec.chosen_layers == [cands[chosen]]
    assert torch.equal(out[:, -1], scores.argmax(-1))


def test_stopping_criteria_and_return_dict(llama):
    ids = _ids(6, B=2)
    out = llama.generate(ids, do_sample=False, max_new_tokens=5, return_dict_in_generate=True,
                         output_scores=True,
                         custom_generate=LEDDecoding(LEDConfig(depth=3, greedy_gate=0.5)))
    assert out.sequences.shape == (2, 11) and len(out.scores) == 5
    # eos: force eos (id 2) as soon as possible via a processor-free check on a long run
    eos = int(out.sequences[0, 7])
    short = llama.generate(ids[:1], do_sample=False, max_new_tokens=5, eos_token_id=eos,
                           pad_token_id=0,
                           custom_generate=LEDDecoding(LEDConfig(depth=3, greedy_gate=0.5)))
    assert short.shape[1] <= 8 and int(short[0, -1]) == eos


def test_bfloat16_model_generates(tok):
    from icml.models import tiny_causal_lm

    m = tiny_causal_lm("qwen2", num_layers=4, hidden_size=32, dtype=torch.bfloat16)
    out = m.generate(_ids(7), do_sample=True, temperature=0.6, max_new_tokens=4,
                     custom_generate=LEDDecoding(LEDConfig(depth=3), torch.Generator()))
    assert out.shape == (3, 10) and out.max() < 260


def test_scores_are_the_final_layer(llama):
    ids = _ids(8, B=1)
    out = llama.generate(ids, do_sample=False, max_new_tokens=3,
                         return_dict_in_generate=True, output_scores=True,
                         custom_generate=LEDDecoding(LEDConfig(depth=3, think_only=False)))
    with torch.no_grad():
        ref = llama(ids).logits[:, -1].float()
    assert torch.allclose(out.scores[0], ref, atol=1e-6)   # no processors: own final logits


def _gens(n, base=0):
    return [torch.Generator().manual_seed(base + i) for i in range(n)]


@pytest.mark.parametrize("kind", ["led", "led-full", "dola", "sampling"])
def test_default_sampling_batched_equals_unbatched_and_cached_equals_uncached(model, kind):
    """Default settings (sampling at T=0.6, the official random gate, think_only with no ids):
    with one generator per row, a row's tokens do not depend on its batch or on the cache."""
    makers = {"led": lambda g: LEDDecoding(LEDConfig(depth=4), g),
              "led-full": lambda g: LEDDecoding(LEDConfig(depth=4), g, lazy=False),
              "dola": lambda g: DoLaDecoding("high", 0.1, g),
              "sampling": lambda g: SamplingDecoding(g)}
    make = makers[kind]
    rows = [[1, 50, 60, 70, 80, 90], [1, 33, 44], [1, 100, 101, 102, 103]]
    ids, mask = _left_pad(rows)
    kw = dict(do_sample=True, temperature=0.6, max_new_tokens=8, pad_token_id=0)
    if kind in ("dola", "sampling"):
        kw.update(top_k=20, top_p=0.95)
    dec = make(_gens(3))
    batched = model.generate(ids, attention_mask=mask, custom_generate=dec, **kw)
    if kind.startswith("led"):
        assert dec.stats["explored"] > 0          # the random gate fired: a real test
    for i, r in enumerate(rows):
        single = model.generate(torch.tensor([r]), custom_generate=make(_gens(1, i)), **kw)
        assert batched[i, -8:].tolist() == single[0, -8:].tolist()
    uncached = model.generate(ids, attention_mask=mask, use_cache=False,
                              custom_generate=make(_gens(3)), **kw)
    assert torch.equal(batched, uncached)


def test_lazy_led_equals_full_led_and_reads_fewer_layers(model):
    import copy

    model = copy.deepcopy(model)         # a confident model, so that some tokens do not explore
    with torch.no_grad():
        model.lm_head.weight.mul_(25.0)
    ids = _ids(9, B=8)
    kw = dict(do_sample=True, temperature=0.8, max_new_tokens=10)
    lazy = LEDDecoding(LEDConfig(depth=5), torch.Generator().manual_seed(3))
    full = LEDDecoding(LEDConfig(depth=5), torch.Generator().manual_seed(3), lazy=False)
    a = model.generate(ids, custom_generate=lazy, **kw)
    b = model.generate(ids, custom_generate=full, **kw)
    assert torch.equal(a, b)
    assert lazy.stats["explored"] == full.stats["explored"] > 0
    assert lazy.stats["deep_rows"] == lazy.stats["explored"] < full.stats["deep_rows"] == 80
    assert full.last_info.candidate_probs.shape == (8, 5, 8)


@pytest.mark.parametrize("use_cache", [True, False])
def test_token_loop_matches_transformers_own_greedy(model, use_cache):
    """The loop (prepare_inputs_for_generation + forward + our kwargs update) against
    transformers' native greedy search, left-padded batch, with and without the KV cache."""
    rows = [[1, 50, 60, 70, 80, 90], [1, 33, 44], [1, 100, 101, 102, 103]]
    ids, mask = _left_pad(rows)
    kw = dict(do_sample=False, max_new_tokens=10, pad_token_id=0, use_cache=use_cache)
    ours = model.generate(ids, attention_mask=mask, custom_generate=SamplingDecoding(), **kw)
    native = model.generate(ids, attention_mask=mask, **kw)
    assert torch.equal(ours, native)
    led1 = model.generate(ids, attention_mask=mask,
                          custom_generate=LEDDecoding(LEDConfig(depth=1)), **kw)
    assert torch.equal(led1, native)


def test_transformers_generate_contract(llama):
    """Fails loudly when transformers changes what the loop relies on: the kwargs generate hands
    a custom_generate callable, prepare_inputs_for_generation's parameters, and the kwargs update
    (compared with transformers' private _update_model_kwargs_for_generation)."""
    import inspect

    from icml_led.generate import PREPARE_INPUTS_PARAMS, advance_model_kwargs, check_generate_api

    params = inspect.signature(llama.prepare_inputs_for_generation).parameters
    missing = [p for p in PREPARE_INPUTS_PARAMS if p not in params]
    assert not missing, f"transformers changed prepare_inputs_for_generation: {missing} gone"
    assert check_generate_api(llama) is True
    seen = {}

    def spy(model, input_ids, logits_processor=None, stopping_criteria=None,
            generation_config=None, synced_gpus=False, streamer=None, **kw):
        seen.update(kw)
        return input_ids

    ids, mask = _left_pad([[1, 5, 6, 7], [1, 8]])
    llama.generate(ids, attention_mask=mask, max_new_tokens=2, custom_generate=spy)
    assert {"cache", "attention_mask", "use_cache"} <= set(seen), (
        f"generate now hands custom_generate {sorted(seen)}: re-check the token loop")
    assert hasattr(seen["cache"], "get_seq_length"), "the cache object changed"
    kw = dict(seen)
    inputs = llama.prepare_inputs_for_generation(ids, next_sequence_length=None,
                                                 is_first_iteration=True, **kw)
    out = llama(**inputs, return_dict=True)
    assert "cache" in out, f"the forward's outputs no longer carry 'cache': {list(out)}"
    ours = advance_model_kwargs(out, dict(kw))
    assert hasattr(llama, "_update_model_kwargs_for_generation"), (
        "transformers removed _update_model_kwargs_for_generation: compare "
        "advance_model_kwargs with its replacement")
    theirs = llama._update_model_kwargs_for_generation(out, dict(kw))
    assert set(ours) == set(theirs)
    for key, val in theirs.items():
        if isinstance(val, torch.Tensor):
            assert torch.equal(ours[key], val), key
        else:
            assert ours[key] is val or ours[key] == val, key


def _independent_dola_step(model, ids, layers, relative_top=0.1):
    """DoLa's formula from scratch (Chuang et al. 2024 / transformers): no cache, the batch-mean
    Jensen-Shannon divergence (summed over the vocabulary) picks the premature layer, relative-top
    filter on the final layer, score log p_final - log p_premature."""
    import math

    with torch.no_grad():
        o = model(ids, output_hidden_states=True)
        lf = torch.log_softmax(o.logits[:, -1].double(), -1)
        best, best_js, best_lp = None, -1.0, None
        for layer in layers:
            lp = torch.log_softmax(model.lm_head(o.hidden_states[layer][:, -1]).double(), -1)
            m = 0.5 * (lf.exp() + lp.exp())
            js = 0.5 * ((m * (m.log() - lf)).sum(-1) + (m * (m.log() - lp)).sum(-1))
            if float(js.mean()) > best_js:
                best, best_js, best_lp = layer, float(js.mean()), lp
        keep = lf >= lf.max(-1, keepdim=True).values + math.log(relative_top)
        scores = torch.where(keep, lf - best_lp, torch.full_like(lf, -math.inf))
    return best, scores


@pytest.mark.parametrize("which", ["high", "low"])
def test_dola_decoding_matches_an_independent_implementation(model, which):
    N = 6
    tied = bool(model.config.tie_word_embeddings)
    layers = list(range(N // 2, N, 2)) if which == "high" else list(range(2 if tied else 0,
                                                                          N // 2, 2))
    ids = _ids(11, B=3)
    dec = DoLaDecoding(which)
    out = model.generate(ids, do_sample=False, max_new_tokens=6, custom_generate=dec,
                         return_dict_in_generate=True, output_scores=True)
    seq = ids
    for t in range(6):
        layer, ref = _independent_dola_step(model, seq, layers)
        assert dec.chosen_layers[t] == layer
        got = out.scores[t].double()
        finite = torch.isfinite(ref)
        assert torch.equal(torch.isfinite(got), finite)
        assert torch.allclose(got[finite], ref[finite], atol=1e-4)
        nxt = ref.argmax(-1)
        assert torch.equal(out.sequences[:, ids.shape[1] + t], nxt)
        seq = torch.cat([seq, nxt[:, None]], 1)


def test_dola_premature_logits_are_the_logit_lens_bit_for_bit(model):
    """DoLa's one matmul into a reused buffer (layer-major rows) gives the floats of the plain
    logit lens, step after step; with gradients on it falls back to the module call."""
    from icml_led.layers import intermediate_logits

    dec = DoLaDecoding("low")
    ids = _ids(12, B=4)
    dec.setup(model, ids, None)
    with torch.no_grad():
        for t in range(2):
            o = model(ids[:, :ids.shape[1] - 1 + t], output_hidden_states=True)
            want = intermediate_logits(model, o.hidden_states, dec._layers).transpose(0, 1)
            got = dec._premature_logits(model, o.hidden_states)
            assert torch.equal(got, want)
            buf = dec._buf
            assert buf is not None and got.data_ptr() == buf.data_ptr()
    o = model(ids, output_hidden_states=True)
    got = dec._premature_logits(model, o.hidden_states)        # grad enabled: no out= buffer
    assert got.requires_grad
    assert torch.equal(got.detach(), intermediate_logits(model, o.hidden_states,
                                                         dec._layers).transpose(0, 1).detach())
    dec.finish()
    assert dec._buf is None


def test_dola_premature_logits_bfloat16():
    from icml_led.layers import intermediate_logits

    from icml.models import tiny_causal_lm

    m = tiny_causal_lm("qwen2", num_layers=6, hidden_size=32, dtype=torch.bfloat16)
    ids = _ids(13, B=5)
    dec = DoLaDecoding("low")
    dec.setup(m, ids, None)
    with torch.no_grad():
        o = m(ids, output_hidden_states=True)
        got = dec._premature_logits(m, o.hidden_states)
    assert got.dtype == torch.float32 and dec._buf.dtype == torch.bfloat16
    assert torch.equal(got, intermediate_logits(m, o.hidden_states, dec._layers).transpose(0, 1))


def test_prefill_memo_gives_the_same_cache(llama):
    """A memoised prompt prefill is a copy of the same tensors, repeated per sample."""
    from icml_led.evaluation import shared_prefix_cache

    rows = [[1, 50, 60, 70, 80, 90], [1, 33, 44], [1, 100, 101, 102, 103]]
    ids, mask = _left_pad(rows)
    memo = {}
    fresh = shared_prefix_cache(llama, ids, mask, 3)
    first = shared_prefix_cache(llama, ids, mask, 3, memo)
    again = shared_prefix_cache(llama, ids, mask, 3, memo)
    assert len(memo) == 1
    for a, b, c in zip(fresh.layers, first.layers, again.layers):
        assert a.keys.shape[0] == 9
        assert torch.equal(a.keys, b.keys) and torch.equal(a.keys, c.keys)
        assert torch.equal(a.values, b.values) and torch.equal(a.values, c.values)
        assert b.keys.data_ptr() != c.keys.data_ptr()              # a copy, not shared storage
    kw = dict(do_sample=True, temperature=0.6, max_new_tokens=6, pad_token_id=0, top_k=20,
              top_p=0.95)
    big, att = ids.repeat_interleave(3, 0), mask.repeat_interleave(3, 0)
    outs = [llama.generate(big, attention_mask=att, cache=c, custom_generate=DoLaDecoding(
        "high", 0.1, _gens(9)), **kw) for c in (fresh, shared_prefix_cache(llama, ids, mask, 3,
                                                                           memo))]
    assert torch.equal(outs[0], outs[1])


def test_top_p_on_the_finite_scores_equals_transformers_warper():
    """apply_processors gives transformers' own processor output, tensor for tensor, on
    top-k-filtered rows (ties, rows of different support, several top_p / min_tokens_to_keep),
    and declines where the warper's unstable sort could order tied scores either way (the cut
    inside a group of equal scores)."""
    from icml_led.generate import apply_processors, top_p_small_support
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    g = torch.Generator().manual_seed(0)
    fast = 0
    for trial in range(300):
        B, V = int(torch.randint(1, 9, (1,), generator=g)), int(torch.randint(40, 700, (1,),
                                                                             generator=g))
        lg = torch.randn(B, V, generator=g) * float(torch.rand(1, generator=g) * 8 + 0.1)
        if trial % 4 == 0:
            lg = (lg * 4).round() / 4                                     # ties
        if trial % 7 == 0:
            lg[0, : V // 2] = -float("inf")                               # a row with less
        k = int(torch.randint(1, V // 8, (1,), generator=g))
        top_p = [0.95, 0.5, 1.0, 0.0, float(torch.rand(1, generator=g))][trial % 5]
        keep = 1 + trial % 3
        procs = LogitsProcessorList([TemperatureLogitsWarper(0.6), TopKLogitsWarper(k),
                                     TopPLogitsWarper(top_p, min_tokens_to_keep=keep)])
        assert torch.equal(apply_processors(procs, None, lg.clone()), procs(None, lg.clone()))
        fast += top_p_small_support(procs[1](None, procs[0](None, lg.clone())), top_p,
                                    min_tokens_to_keep=keep) is not None
    assert fast > 150
    tied = torch.tensor([[1.0, 1.0, 0.5, -float("inf")] + [-float("inf")] * 40])
    assert torch.equal(top_p_small_support(tied, 0.5), TopPLogitsWarper(0.5)(None, tied))
    split = torch.tensor([[1.0, 1.0] + [-float("inf")] * 40])     # the cut splits a tie
    assert top_p_small_support(split, 0.5) is None
    nan = torch.full((1, 44), -float("inf"))
    nan[0, :2] = torch.tensor([1.0, float("nan")])
    assert top_p_small_support(nan, 0.5) is None
    assert top_p_small_support(torch.randn(2, 44), 0.5) is None         # dense: the warper


def test_top_p_fast_path_on_bfloat16_logits():
    """After a bfloat16 forward many top-k scores are equal (8-bit mantissa); the fast top-p
    (SmolLM2's sampler: T 0.6-1.0, top-k 20, top-p 0.95) equals the warper on such rows and
    is taken for almost all rows (it used to decline on any tie in the batch); the rows where
    the cut falls inside a tie group go through the warper, on those rows only."""
    from icml_led.generate import apply_processors, top_p_small_support
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    g = torch.Generator().manual_seed(3)
    split = 0
    for trial in range(12):
        lg = (torch.randn(128, 8192, generator=g) * 3).to(torch.bfloat16).float()
        lg[:, :64] += 12 * torch.rand(128, 64, generator=g).to(torch.bfloat16).float()
        procs = LogitsProcessorList([TemperatureLogitsWarper([0.6, 0.8, 1.0][trial % 3]),
                                     TopKLogitsWarper(20), TopPLogitsWarper(0.95)])
        assert torch.equal(apply_processors(procs, None, lg.clone()), procs(None, lg.clone()))
        pre = procs[1](None, procs[0](None, lg.clone()))
        top = pre.topk(20, dim=-1).values
        assert bool((top[:, 1:] == top[:, :-1]).any())                    # there are ties
        warped = []

        def warper(rows, proc=procs[2], warped=warped):
            warped.append(rows.shape[0])
            return proc(None, rows)

        got = top_p_small_support(pre, 0.95, fallback=warper)
        assert torch.equal(got, procs[2](None, pre))
        split += sum(warped)
        if warped:
            assert top_p_small_support(pre, 0.95) is None                # no fallback: decline
    assert split < 0.05 * 12 * 128                 # the cut rarely falls inside a tie group
