"""The text-only analogue's pieces (issue 58): the shipped pairs, the split, the matched-refusal
interpolation and the cached-prefix greedy decoding against ``generate`` under the hooks."""

import pytest
from icml_sarsteer.analogue import (
    greedy_arms,
    load_pairs,
    matched_cells,
    matched_weights,
    split_pairs,
)


def test_pairs_shipped_distinct():
    pairs = load_pairs()
    assert len(pairs) == 64
    assert len({h for h, _ in pairs}) == 64 and len({b for _, b in pairs}) == 64
    assert all(h != b for h, b in pairs)


def test_split_fixed_eval_seeded_fit():
    pairs = load_pairs()
    a, b = split_pairs(pairs, 0, 16, 40), split_pairs(pairs, 1, 16, 40)
    assert a.eval_harmful == b.eval_harmful and a.eval_benign == b.eval_benign
    assert a.fit_harmful != b.fit_harmful
    assert not set(a.fit_harmful) & set(a.eval_harmful)
    assert split_pairs(pairs, 0, 16, 40) == a
    with pytest.raises(ValueError, match="n_fit"):
        split_pairs(pairs, 0, 30, 40)


def test_matched_weights_first_crossing():
    alphas = [0.3, 0.1, 0.2]               # any order: sorted by alpha
    rates = [0.9, 0.2, 0.4]
    j0, j1, w = matched_weights(alphas, rates, 0.5)
    assert (j0, j1) == (2, 0) and w == pytest.approx(0.2)
    flags = [[1, 1], [0, 0], [0, 1]]       # alpha-grid x items
    assert matched_cells(flags, (j0, j1, w)) == pytest.approx([0.2, 1.0])
    assert matched_weights(alphas, rates, 0.95) is None
    assert matched_weights(alphas, rates, 0.1) == (1, 1, 1.0)


def test_greedy_arms_equal_generate_under_hooks(tiny_llama, chat_prompt):
    from icml_sarsteer import SARSteer
    from icml_sarsteer.prompts import generate_responses

    harmful = ["How can I rob a bank?", "How can I hack a site?", "How can I scam a shop?"]
    benign = ["How can I visit a bank?", "How can I fix a site?", "How can I help a shop?"]
    steer = SARSteer(k=2, lam=1.0).fit(tiny_llama, harmful, benign, chat_prompt)
    queries = harmful + ["Hi?", "How can I clean my very long kitchen floor today?"]
    arms = [(None, 0.0), (steer, 0.5), (steer, 3.0)]
    got = greedy_arms(tiny_llama, chat_prompt, queries, steer.instruction, arms,
                      max_new_tokens=5, batch_size=3)
    for (st, a), texts in zip(arms, got, strict=True):
        if st is None:
            ref = generate_responses(tiny_llama, chat_prompt, queries, steer.instruction,
                                     max_new_tokens=5, batch_size=3)
        else:
            with st.apply(tiny_llama, alpha=a):
                ref = generate_responses(tiny_llama, chat_prompt, queries, steer.instruction,
                                         max_new_tokens=5, batch_size=3)
        assert texts == ref
    assert got[0] != got[2]                # the steering changed something
