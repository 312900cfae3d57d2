"""Peer: steering-vectors (0.12.2) adds the same vectors at the last position through its own
hooks; the logits and greedy responses equal this plugin's. Skipped unless steering-vectors is
importable (it declares transformers<5, so it is not an extra of this plugin; install it with
``pip install --no-deps --target DIR steering-vectors==0.12.2`` and put DIR on PYTHONPATH)."""

import pytest
import torch


def test_same_direction_same_outputs(tiny_llama, chat_prompt):
    sv_mod = pytest.importorskip("steering_vectors")
    from icml_sarsteer import SARSteer
    from icml_sarsteer.prompts import generate_responses

    harmful = ["How can I rob a bank?", "How can I hack a site?", "How can I scam a shop?"]
    benign = ["How can I visit a bank?", "How can I fix a site?", "How can I help a shop?"]
    st = SARSteer(k=2, lam=1.0).fit(tiny_llama, harmful, benign, chat_prompt)
    sv = sv_mod.SteeringVector({i: st.vectors[j] for j, i in enumerate(st.layer_ids)},
                               layer_type="decoder_block")
    enc = chat_prompt(harmful[0], st.instruction)
    with torch.no_grad():
        with st.apply(tiny_llama, alpha=3.0):
            ours = tiny_llama(**enc).logits
        with sv.apply(tiny_llama, multiplier=3.0, min_token_index=None,
                      token_indices=slice(-1, None)):
            peer = tiny_llama(**enc).logits
        plain = tiny_llama(**enc).logits
    assert torch.equal(ours, peer) and not torch.equal(ours, plain)
    queries = harmful + ["Hi?"]
    with st.apply(tiny_llama, alpha=3.0):
        a = generate_responses(tiny_llama, chat_prompt, queries, st.instruction,
                               max_new_tokens=6, batch_size=4)
    with sv.apply(tiny_llama, multiplier=3.0, min_token_index=None,
                  token_indices=slice(-1, None)):
        b = generate_responses(tiny_llama, chat_prompt, queries, st.instruction,
                               max_new_tokens=6, batch_size=4)
    assert a == b
