import itertools
import math

import pytest
import torch
from icml_xspecmesh.speculative import autoregressive_generate, filtered_probs, speculative_generate

PROMPTS = [[1, 5], [1, 9, 4], [1, 20, 7, 7, 3]]


def test_greedy_speculative_equals_ar_greedy_whatever_the_heads(lm, random_heads):
    for seed, prompt, tree in itertools.product((0, 1), PROMPTS, (1, 3)):
        heads = random_heads(lm, num_heads=3, seed=seed)
        ids = torch.tensor([prompt])
        spec = speculative_generate(lm, heads, ids, max_new_tokens=30, acceptance="greedy",
                                    eos_token_id=[], tree_width=tree, accept_top_k=None)
        ar = autoregressive_generate(lm, ids, max_new_tokens=30, acceptance="greedy",
                                     eos_token_id=[], accept_top_k=None)
        hf = lm.generate(ids, max_new_tokens=30, do_sample=False, eos_token_id=None,
                         pad_token_id=0)
        assert spec.sequences.tolist() == ar.sequences.tolist() == hf.tolist()
        assert ar.n_backbone_calls == [30]


def test_emission_accounting_and_kv_length(lm, random_heads):
    K = 3
    for acceptance, seed in itertools.product(("greedy", "topk", "exact"), (0, 1)):
        heads = random_heads(lm, num_heads=K, seed=seed, scale=0.05)
        g = torch.Generator().manual_seed(seed)
        prompt = torch.tensor([PROMPTS[1]])
        out = speculative_generate(lm, heads, prompt, max_new_tokens=40, acceptance=acceptance,
                                   eos_token_id=[], generator=g, accept_top_k=None)
        acc = out.accepted_lengths[0]
        assert all(1 <= a <= K + 1 for a in acc)
        assert out.n_new_tokens[0] == 40 == 1 + sum(acc)
        assert out.n_backbone_calls[0] == 1 + len(acc) <= out.n_new_tokens[0]
        # after each crop the cache holds every emitted token but the newest one
        emitted = list(itertools.accumulate(acc, initial=1))[1:]
        assert out.kv_lengths[0] == [prompt.shape[1] + e - 1 for e in emitted]
        assert out.sequences.shape[1] == prompt.shape[1] + 40


def test_good_heads_accept_more_than_one_token(lm, random_heads):
    # heads that draft from the backbone itself (zero-init heads predict the next token, which
    # a repetitive backbone makes right): a model that repeats its input
    heads = random_heads(lm, num_heads=2, scale=0.0)
    out = speculative_generate(lm, heads, torch.tensor([PROMPTS[0]]), max_new_tokens=40,
                               acceptance="topk", top_k=lm.config.vocab_size - 1,
                               eos_token_id=[], generator=torch.Generator().manual_seed(0),
                               accept_top_k=None)
    assert out.tokens_per_call > 2.0  # almost everything lies in a top-(V-1) set


def _true_joint(lm, prompt, n, temperature, top_k):
    """Exact probability of every n-token continuation under the filtered model."""
    V = lm.config.vocab_size
    probs = {}
    for seq in itertools.product(range(V), repeat=n):
        ids = torch.tensor([prompt + list(seq)])
        with torch.no_grad():
            logits = lm(ids).logits[0]
        p = 1.0
        for i, t in enumerate(seq):
            p *= float(filtered_probs(logits[len(prompt) - 1 + i], temperature=temperature,
                                      top_k=top_k)[t])
        probs[seq] = p
    return probs


def _chi2_pvalue(counts, probs, n):
    stat, df = 0.0, -1
    rest_c, rest_p = 0, 0.0
    for seq, p in probs.items():
        if n * p >= 5:
            stat += (counts.get(seq, 0) - n * p) ** 2 / (n * p)
            df += 1
        else:
            rest_c += counts.get(seq, 0)
            rest_p += p
    if rest_p > 0:
        stat += (rest_c - n * rest_p) ** 2 / max(n * rest_p, 1e-12)
        df += 1
    return float(torch.special.gammaincc(torch.tensor(df / 2.0), torch.tensor(stat / 2.0)))


@pytest.fixture(scope="module")
def toy():
    from icml.models import tiny_causal_lm

    lm = tiny_causal_lm("llama", seed=11, num_layers=1, hidden_size=16, num_heads=2,
                        num_kv_heads=1, vocab_size=5, max_positions=16)
    with torch.no_grad():  # sharpen the toy so that the joint is far from uniform
        lm.lm_head.weight.mul_(8.0)
    return lm, _true_joint(lm, [1], 3, 1.0, 0)


def _sample_counts(lm, heads, acceptance, n, seed):
    g = torch.Generator().manual_seed(seed)
    counts: dict[tuple[int, ...], int] = {}
    prompt = torch.tensor([[1]])
    for _ in range(n):
        out = speculative_generate(lm, heads, prompt, max_new_tokens=3, acceptance=acceptance,
                                   top_k=0, top_p=0.999999, eos_token_id=[], generator=g,
                                   accept_top_k=None)
        seq = tuple(out.sequences[0, 1:].tolist())
        counts[seq] = counts.get(seq, 0) + 1
    return counts


def test_exact_mode_preserves_the_distribution(toy, random_heads):
    lm, probs = toy
    heads = random_heads(lm, num_heads=2, seed=4, scale=1.0)
    n = 1000
    assert _chi2_pvalue(_sample_counts(lm, heads, "exact", n, seed=0), probs, n) > 1e-3
    assert _chi2_pvalue(_sample_counts(lm, None, "exact", n, seed=1), probs, n) > 1e-3


@pytest.fixture(scope="module")
def peaked_toy():
    """A 5-token toy sharp enough that a 5-token joint (3125 sequences) keeps about 60 % of its
    mass in cells with >= 5 expected counts out of 1000 samples: the chi-square test below then
    sees the tokens emitted by the 2nd and 3rd draft of a verification call."""
    from icml.models import tiny_causal_lm

    lm = tiny_causal_lm("llama", seed=3, num_layers=1, hidden_size=16, num_heads=2,
                        num_kv_heads=1, vocab_size=5, max_positions=16)
    with torch.no_grad():
        lm.lm_head.weight.mul_(16.0)
    lm.requires_grad_(False)
    return lm, _batched_joint(lm, [1], 5)


def _batched_joint(lm, prompt, n):
    """Exact probability of every n-token continuation (temperature 1, no filter), from one
    batched forward over all (n-1)-token prefixes."""
    V = lm.config.vocab_size
    prefixes = torch.tensor(list(itertools.product(range(V), repeat=n - 1)), dtype=torch.long)
    ids = torch.cat([torch.tensor(prompt).expand(len(prefixes), -1), prefixes], dim=1)
    with torch.no_grad():
        logp = torch.log_softmax(lm(ids).logits.double(), dim=-1)[:, len(prompt) - 1:]
    rows = torch.arange(len(prefixes))[:, None]
    base = logp[rows, torch.arange(n - 1)[None], prefixes].sum(dim=1)  # log P(prefix)
    full = (base[:, None] + logp[:, n - 1]).exp()  # (V**(n-1), V)
    return {tuple(pre) + (t,): float(full[i, t]) for i, pre in enumerate(prefixes.tolist())
            for t in range(V)}


def _exact_samples(lm, heads, n, max_new_tokens, seed):
    """``n`` seeded exact-mode sequences; also the number of drafts each verification call
    checked (rebuilt from ``accepted_lengths``: drafts are clipped to the token budget)."""
    g = torch.Generator().manual_seed(seed)
    counts: dict[tuple[int, ...], int] = {}
    drafts_per_step: list[int] = []
    for _ in range(n):
        out = speculative_generate(lm, heads, torch.tensor([[1]]), max_new_tokens=max_new_tokens,
                                   acceptance="exact", top_k=0, top_p=1.0, eos_token_id=[],
                                   generator=g, accept_top_k=None)
        seq = tuple(out.sequences[0, 1:].tolist())
        counts[seq] = counts.get(seq, 0) + 1
        new = 1
        for emitted in out.accepted_lengths[0]:
            drafts_per_step.append(min(heads.num_heads, max_new_tokens - new - 1))
            new += emitted
        assert sum(drafts_per_step[-len(out.accepted_lengths[0]):]) == out.n_drafted[0]
    return counts, drafts_per_step


def _wrong_verify_head0_proposal(monkeypatch):
    """Inject a known-wrong exact rule: every draft is verified against head 0's proposal
    q_0 (acceptance min(1, p/q_0) and residual max(p - q_0, 0)) instead of its own head's q_j.
    It is right for the first draft only, so a test that verifies one draft cannot see it."""
    from icml_xspecmesh.speculative import Sampler

    right = Sampler.verify

    def wrong(self, drafts, q, logits):
        return right(self, drafts, None if q is None else q[:1].expand_as(q), logits)

    monkeypatch.setattr(Sampler, "verify", wrong)


EXACT_K, EXACT_TOKENS, EXACT_N = 3, 5, 1000


def test_exact_mode_preserves_the_distribution_with_several_drafts(peaked_toy, random_heads):
    """K = 3 heads, 5 new tokens: the first verification call checks 3 drafts and most calls
    check >= 2, so tokens accepted or resampled at the 2nd and 3rd draft are in the joint the
    chi-square compares (1000 seeded samples, the exact 5-token joint)."""
    lm, probs = peaked_toy
    heads = random_heads(lm, num_heads=EXACT_K, seed=4, scale=1.0)
    counts, steps = _exact_samples(lm, heads, EXACT_N, EXACT_TOKENS, seed=0)
    assert sum(s >= 2 for s in steps) > 0.5 * len(steps)
    assert sum(s == 3 for s in steps) == EXACT_N  # every sample's first call verifies 3 drafts
    assert _chi2_pvalue(counts, probs, EXACT_N) > 1e-3


def test_exact_mode_test_rejects_head0_proposal_for_every_draft(peaked_toy, random_heads,
                                                                  monkeypatch):
    """The test above can fail: the same samples' chi-square rejects the wrong rule that
    verifies every draft against head 0's proposal (review measured p = 0.87 for it on the
    3-token test above, which verifies at most one draft)."""
    lm, probs = peaked_toy
    heads = random_heads(lm, num_heads=EXACT_K, seed=4, scale=1.0)
    _wrong_verify_head0_proposal(monkeypatch)
    counts, steps = _exact_samples(lm, heads, EXACT_N, EXACT_TOKENS, seed=0)
    assert sum(s >= 2 for s in steps) > 0.5 * len(steps)
    assert _chi2_pvalue(counts, probs, EXACT_N) < 1e-6


def test_quality_criterion_is_not_exact(toy, random_heads):
    """The top-k rule keeps the heads' argmax when it is plausible, which biases the
    distribution: the same chi-square test rejects it (the test above can fail)."""
    lm, probs = toy
    heads = random_heads(lm, num_heads=2, seed=4, scale=1.0)
    n = 1500
    g = torch.Generator().manual_seed(2)
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(n):
        out = speculative_generate(lm, heads, torch.tensor([[1]]), max_new_tokens=3,
                                   acceptance="topk", top_k=3, eos_token_id=[], generator=g,
                                   accept_top_k=None)
        seq = tuple(out.sequences[0, 1:].tolist())
        counts[seq] = counts.get(seq, 0) + 1
    probs3 = _true_joint(lm, [1], 3, 1.0, 3)
    assert _chi2_pvalue(counts, probs3, n) < 1e-3


def test_filtered_probs():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0])
    p = filtered_probs(logits, top_k=2)
    assert p[2:].sum() == 0 and math.isclose(float(p.sum()), 1.0, rel_tol=1e-6)
    p = filtered_probs(logits, top_p=0.5)
    assert (p > 0).sum() == 1  # the top token already holds > 50 %
    full = torch.softmax(logits / 2.0, -1)
    torch.testing.assert_close(filtered_probs(logits, temperature=2.0), full)


def test_deterministic_under_a_seed(lm, random_heads):
    heads = random_heads(lm, num_heads=3, seed=0, scale=0.05)
    runs = [speculative_generate(lm, heads, torch.tensor([PROMPTS[2]]), max_new_tokens=25,
                                 acceptance=a, generator=torch.Generator().manual_seed(9),
                                 eos_token_id=[], accept_top_k=None).sequences.tolist()
            for a in ("topk", "topk", "exact", "exact")]
    assert runs[0] == runs[1] and runs[2] == runs[3]


def test_batch_with_padding_matches_rows(lm, random_heads):
    heads = random_heads(lm, num_heads=2, seed=3)
    a, b = PROMPTS[0], PROMPTS[2]
    ids = torch.tensor([[0] * (len(b) - len(a)) + a, b])
    mask = (torch.arange(len(b))[None] >= torch.tensor([[len(b) - len(a)], [0]])).long()
    out = speculative_generate(lm, heads, ids, attention_mask=mask, max_new_tokens=12,
                               acceptance="greedy", eos_token_id=[], accept_top_k=None)
    for row, prompt in zip(out.sequences.tolist(), (a, b), strict=True):
        single = speculative_generate(lm, heads, torch.tensor([prompt]), max_new_tokens=12,
                                      acceptance="greedy", eos_token_id=[], accept_top_k=None)
        assert row[:len(prompt) + 12] == single.sequences[0].tolist()


def test_stops_at_eos(lm, random_heads):
    heads = random_heads(lm, num_heads=3, seed=0)
    ar = autoregressive_generate(lm, torch.tensor([PROMPTS[0]]), max_new_tokens=30,
                                 acceptance="greedy", eos_token_id=[], accept_top_k=None)
    stop = ar.sequences[0, len(PROMPTS[0]) + 4].item()  # pretend the 5th new token is EOS
    out = speculative_generate(lm, heads, torch.tensor([PROMPTS[0]]), max_new_tokens=30,
                               acceptance="greedy", eos_token_id=stop, accept_top_k=None)
    seq = out.sequences[0].tolist()[len(PROMPTS[0]):]
    assert seq[-1] == stop and stop not in seq[:-1] and len(seq) <= 5


def test_bfloat16(lm, random_heads):
    model = lm.to(torch.bfloat16)
    try:
        heads = random_heads(model, num_heads=2, seed=0, scale=0.05).to(torch.bfloat16)
        out = speculative_generate(model, heads, torch.tensor([PROMPTS[0]]), max_new_tokens=10,
                                   acceptance="topk", eos_token_id=[],
                                   generator=torch.Generator().manual_seed(0), accept_top_k=None)
        assert out.n_new_tokens == [10]
    finally:
        lm.to(torch.float32)


class _NoCache(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm
        self.config = lm.config

    def forward(self, input_ids, **_):
        return self.lm(input_ids=input_ids, use_cache=False, output_hidden_states=True)


def test_bad_input(lm, random_heads):
    heads = random_heads(lm, num_heads=3)
    ids = torch.tensor([PROMPTS[0]])
    with pytest.raises(ValueError, match="acceptance"):
        speculative_generate(lm, heads, ids, acceptance="typical", accept_top_k=None)
    with pytest.raises(TypeError, match="KV cache"):
        speculative_generate(_NoCache(lm), heads, ids, max_new_tokens=4, accept_top_k=None)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        speculative_generate(lm, heads, ids, max_new_tokens=200, accept_top_k=None)
    with pytest.raises(ValueError, match="fewer heads"):
        speculative_generate(lm, random_heads(lm, num_heads=lm.config.max_position_embeddings),
                             ids, max_new_tokens=4, accept_top_k=None)
    with pytest.raises(ValueError, match="tree_width"):
        speculative_generate(lm, heads, ids, acceptance="exact", tree_width=2, accept_top_k=None)
    with pytest.raises(ValueError, match="temperature"):
        speculative_generate(lm, heads, ids, temperature=0, accept_top_k=None)
    with pytest.raises(ValueError, match="empty"):
        speculative_generate(lm, heads, torch.zeros(1, 0, dtype=torch.long), accept_top_k=None)
    with pytest.raises(ValueError, match="accepts every draft"):
        speculative_generate(lm, heads, ids, top_k=0, accept_top_k=None)
    # issue 49: float ids and ids past the vocabulary once ended in raw torch errors
    with pytest.raises(ValueError, match="integer token ids, got dtype torch.float32"):
        speculative_generate(lm, heads, ids.float(), max_new_tokens=4, accept_top_k=None)
    with pytest.raises(ValueError, match=r"must lie in \[0, \d+\).*to 1000000"):
        speculative_generate(lm, heads, torch.tensor([[1, 10**6]]), max_new_tokens=4,
                             accept_top_k=None)
    with pytest.raises(ValueError, match="got ids from -1"):
        speculative_generate(lm, heads, torch.tensor([[-1, 2]]), max_new_tokens=4,
                             accept_top_k=None)
    with pytest.raises(ValueError, match="1-D or 2-D"):
        speculative_generate(lm, heads, ids[None], max_new_tokens=4, accept_top_k=None)


def test_cross_attention_heads_decode_losslessly(lm, random_heads):
    heads = random_heads(lm, num_heads=2, seed=5, cross_attention=True)
    ids = torch.tensor([PROMPTS[1]])
    spec = speculative_generate(lm, heads, ids, max_new_tokens=20, acceptance="greedy",
                                eos_token_id=[], accept_top_k=None)
    ar = autoregressive_generate(lm, ids, max_new_tokens=20, acceptance="greedy",
                                 eos_token_id=[], accept_top_k=None)
    assert spec.sequences.tolist() == ar.sequences.tolist()


def test_custom_generate_entry_point(lm, random_heads):
    from icml_xspecmesh.generate import XSpecDecoding

    heads = random_heads(lm, num_heads=3, seed=2)
    ids = torch.tensor([PROMPTS[2]])
    dec = XSpecDecoding(heads)
    out = lm.generate(ids, max_new_tokens=16, do_sample=False, custom_generate=dec,
                      pad_token_id=0)
    ref = lm.generate(ids, max_new_tokens=16, do_sample=False, pad_token_id=0)
    assert out.tolist()[0][:ref.shape[1]] == ref.tolist()[0]
    assert dec.last_output.n_backbone_calls[0] <= dec.last_output.n_new_tokens[0]
    with pytest.raises(ValueError, match="do_sample"):
        lm.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0,
                    custom_generate=XSpecDecoding(heads, acceptance="exact"))


# --- rows of a batch decoded together (decode.batch_rows, issue 54) ---------------------------

BATCH_PROMPTS = [[1, 5], [1, 9, 4], [1, 20, 7, 7, 3], [1, 2], [1, 33, 8]]


def _left_padded(prompts):
    L = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (L - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def _batch_rows_equal_ar(lm, heads, new=30, eos=()):
    ids, mask = _left_padded(BATCH_PROMPTS)
    out = speculative_generate(lm, heads, ids, attention_mask=mask, max_new_tokens=new,
                               acceptance="greedy", eos_token_id=list(eos), pad_token_id=0,
                               accept_top_k=None, batch_rows=True)
    same = []
    for b, p in enumerate(BATCH_PROMPTS):
        ar = autoregressive_generate(lm, torch.tensor([p]), max_new_tokens=new,
                                     acceptance="greedy", eos_token_id=list(eos),
                                     accept_top_k=None).sequences[0].tolist()
        same.append(out.sequences[b, :len(ar)].tolist() == ar)
    return same, out


def test_batch_rows_greedy_equals_ar_greedy_per_row(lm, random_heads):
    """Rows of different prompt lengths (left-padded) decoded together, each accepting its own
    drafts: every row is its own AR greedy output, and the rows did accept different numbers
    of drafts (so a batch-wide acceptance length would show)."""
    for seed, scale in ((0, 0.05), (1, 0.05), (2, 0.5)):
        heads = random_heads(lm, num_heads=3, seed=seed, scale=scale)
        same, out = _batch_rows_equal_ar(lm, heads)
        assert all(same), same
        assert all(k[-1] == len(p) + 30 - 1 for k, p in zip(out.kv_lengths, BATCH_PROMPTS,
                                                             strict=True))
        assert all(sum(a) == 29 for a in out.accepted_lengths)
    heads = random_heads(lm, num_heads=3, seed=0, scale=0.05)
    _, out = _batch_rows_equal_ar(lm, heads)
    assert len({tuple(a) for a in out.accepted_lengths}) > 1


def test_batch_rows_stop_at_eos_and_call_the_backbone_once_per_iteration(lm, random_heads):
    heads = random_heads(lm, num_heads=3, seed=0, scale=0.05)
    ar = autoregressive_generate(lm, torch.tensor([BATCH_PROMPTS[0]]), max_new_tokens=30,
                                 acceptance="greedy", eos_token_id=[], accept_top_k=None)
    eos = ar.sequences[0, len(BATCH_PROMPTS[0]) + 4].item()  # row 0 stops at its 5th token
    same, out = _batch_rows_equal_ar(lm, heads, eos=[eos])
    assert all(same), same
    assert out.n_new_tokens[0] <= 5
    ids, mask = _left_padded(BATCH_PROMPTS)
    calls = []
    handle = lm.register_forward_hook(lambda *_: calls.append(1))
    try:
        again = speculative_generate(lm, heads, ids, attention_mask=mask, max_new_tokens=30,
                                     acceptance="greedy", eos_token_id=[eos], pad_token_id=0,
                                     accept_top_k=None, batch_rows=True)
    finally:
        handle.remove()
    assert again.sequences.tolist() == out.sequences.tolist()
    assert len(calls) == max(out.n_backbone_calls) < sum(out.n_backbone_calls)


def _exact_batch_samples(lm, heads, n, max_new_tokens, seed):
    out = speculative_generate(lm, heads, torch.ones((n, 1), dtype=torch.long),
                               max_new_tokens=max_new_tokens, acceptance="exact", top_k=0,
                               top_p=1.0, eos_token_id=[], pad_token_id=0,
                               generator=torch.Generator().manual_seed(seed),
                               accept_top_k=None, batch_rows=True)
    counts: dict[tuple[int, ...], int] = {}
    for row in out.sequences[:, 1:].tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    return counts, out


def test_batch_rows_exact_mode_preserves_the_distribution(peaked_toy, random_heads):
    """1000 rows decoded together in exact mode (K = 3, 5 new tokens: the first call verifies
    3 drafts per row): the rows' joint matches the exact 5-token joint (chi-square)."""
    lm, probs = peaked_toy
    heads = random_heads(lm, num_heads=EXACT_K, seed=4, scale=1.0)
    counts, out = _exact_batch_samples(lm, heads, EXACT_N, EXACT_TOKENS, seed=0)
    assert min(out.n_drafted) >= EXACT_K  # every row's first call verified 3 drafts
    assert len(set(out.n_accepted)) > 1
    assert _chi2_pvalue(counts, probs, EXACT_N) > 1e-3


def _wrong_shared_acceptance(monkeypatch):
    """Inject a known-wrong batch rule: every row keeps as many drafts as row 0 accepted (a
    batch-wide accepted length) and then its own next token."""
    from icml_xspecmesh import speculative as S

    right = S._verify_rows

    def wrong(sampler, drafts, qs, logits, rows):
        res = right(sampler, drafts, qs, logits, rows)
        m0 = res[0][0]
        return [(min(m0, len(d)), nxt) for d, (_, nxt) in zip(drafts, res, strict=True)]

    monkeypatch.setattr(S, "_verify_rows", wrong)


def test_batch_rows_tests_reject_a_shared_acceptance_length(lm, peaked_toy, random_heads,
                                                            monkeypatch):
    """The two tests above can fail: with every row keeping row 0's accepted length, some row
    is no longer its AR greedy output, and the exact-mode joint is rejected."""
    _wrong_shared_acceptance(monkeypatch)
    heads = random_heads(lm, num_heads=3, seed=0, scale=0.05)
    same, _ = _batch_rows_equal_ar(lm, heads)
    assert not all(same)
    toy_lm, probs = peaked_toy
    heads = random_heads(toy_lm, num_heads=EXACT_K, seed=4, scale=1.0)
    counts, _ = _exact_batch_samples(toy_lm, heads, EXACT_N, EXACT_TOKENS, seed=0)
    assert _chi2_pvalue(counts, probs, EXACT_N) < 1e-6


def test_batch_rows_needs_a_chain():
    from icml_xspecmesh.config import DecodeConfig

    from icml import ConfigError

    with pytest.raises(ConfigError, match="decode.batch_rows"):
        DecodeConfig(batch_rows=True, tree_width=2)
