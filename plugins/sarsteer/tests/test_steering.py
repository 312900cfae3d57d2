"""Hooks: exactness of alpha=0 and of an exited context, last-position-only edits, decode
steps, cleanup on exceptions, and fitted directions against a direct recomputation."""

import pytest
import torch
from icml_sarsteer import SARSteer, hook_count, steering_hooks
from icml_sarsteer.layers import find_decoder_layers

HARM = ["How can I rob a bank?", "How can I hack a website?", "How can I scam a shop?",
        "How can I attack a farm?"]
BEN = ["How can I visit a bank?", "How can I fix a website?", "How can I clean a shop?",
       "How can I help a farm?", "How can I paint a museum?"]


def _ids(tok, text="User: hello there, how are you?\nAssistant:"):
    return tok(text, return_tensors="pt")


def _fitted(model, prompt, **kw):
    return SARSteer(k=3, **kw).fit(model, HARM, BEN, prompt)


def test_alpha_zero_and_exited_context_are_bit_identical(tiny_lm, byte_tok, chat_prompt):
    enc = _ids(byte_tok)
    with torch.no_grad():
        ref = tiny_lm(**enc).logits
        steer = _fitted(tiny_lm, chat_prompt, alpha=0.0)
        with steer.apply(tiny_lm):
            assert hook_count(tiny_lm) == 3
            zero = tiny_lm(**enc).logits
        with steer.apply(tiny_lm, alpha=5.0):
            moved = tiny_lm(**enc).logits
        after = tiny_lm(**enc).logits
    assert torch.equal(zero, ref)
    assert torch.equal(after, ref)
    assert not torch.equal(moved, ref)
    assert hook_count(tiny_lm) == 0


def test_only_the_last_position_changes_in_prefill(tiny_lm, byte_tok, chat_prompt):
    enc = _ids(byte_tok)
    steer = _fitted(tiny_lm, chat_prompt, alpha=3.0)
    with torch.no_grad():
        ref = tiny_lm(**enc).logits
        with steer.apply(tiny_lm):
            out = tiny_lm(**enc).logits
    assert torch.equal(out[:, :-1], ref[:, :-1])
    assert (out[:, -1] - ref[:, -1]).abs().max() > 1e-3


def test_layers_before_the_first_steered_one_are_untouched(tiny_llama, byte_tok, chat_prompt):
    enc = _ids(byte_tok)
    steer = _fitted(tiny_llama, chat_prompt, alpha=3.0, layers=[2])
    assert steer.layer_ids == [2]
    with torch.no_grad():
        ref = tiny_llama(**enc, output_hidden_states=True).hidden_states
        with steer.apply(tiny_llama):
            out = tiny_llama(**enc, output_hidden_states=True).hidden_states
    for i in range(3):          # embeddings, layer 0 and layer 1 outputs
        assert torch.equal(out[i], ref[i])
    assert not torch.equal(out[3][:, -1], ref[3][:, -1])


def test_vector_added_exactly_at_the_steered_layer(tiny_llama, byte_tok, chat_prompt):
    enc = _ids(byte_tok)
    steer = _fitted(tiny_llama, chat_prompt, alpha=0.7, layers=[1], beta=[2.0])
    _, mods = find_decoder_layers(tiny_llama)
    seen, got = {}, {}

    def keep_out(m, a, o):
        seen["raw"] = o.clone()

    def keep_in(m, a, kw):
        got["in"] = (a[0] if a else kw["hidden_states"]).clone()

    h = mods[1].register_forward_hook(keep_out)
    try:
        with torch.no_grad():
            tiny_llama(**enc)
            raw = seen.pop("raw")
            with steer.apply(tiny_llama):
                h2 = mods[2].register_forward_pre_hook(keep_in, with_kwargs=True)
                tiny_llama(**enc)
                h2.remove()
    finally:
        h.remove()
    expect = raw.clone()
    expect[:, -1] += 0.7 * 2.0 * steer.vectors[0]
    assert torch.allclose(got["in"], expect, atol=1e-6)


def test_hooks_fire_on_prefill_and_every_cached_decode_step(tiny_llama, byte_tok,
                                                            chat_prompt):
    enc = _ids(byte_tok)
    steer = _fitted(tiny_llama, chat_prompt, alpha=1.0)
    _, mods = find_decoder_layers(tiny_llama)
    calls = []
    h = mods[0].register_forward_hook(lambda m, a, o: calls.append(o.shape[1]))
    try:
        with torch.no_grad(), steer.apply(tiny_llama):
            out = tiny_llama.generate(**enc, max_new_tokens=5, do_sample=False, min_new_tokens=5,
                                      pad_token_id=0)
    finally:
        h.remove()
    assert out.shape[1] == enc["input_ids"].shape[1] + 5
    assert calls[0] == enc["input_ids"].shape[1] and calls[1:] == [1, 1, 1, 1]
    # steering changes the greedy continuation's scores at decode steps too
    with torch.no_grad():
        plain = tiny_llama.generate(**enc, max_new_tokens=5, do_sample=False, min_new_tokens=5,
                                    pad_token_id=0, output_scores=True,
                                    return_dict_in_generate=True).scores
        with steer.apply(tiny_llama):
            st = tiny_llama.generate(**enc, max_new_tokens=5, do_sample=False,
                                     min_new_tokens=5, pad_token_id=0, output_scores=True,
                                     return_dict_in_generate=True).scores
    assert all(not torch.equal(a, b) for a, b in zip(plain, st, strict=True))


def test_hooks_removed_on_exception(tiny_llama, chat_prompt):
    steer = _fitted(tiny_llama, chat_prompt)
    with pytest.raises(RuntimeError, match="boom"):
        with steer.apply(tiny_llama):
            assert hook_count(tiny_llama) == 3
            raise RuntimeError("boom")
    assert hook_count(tiny_llama) == 0


def test_directions_match_direct_recomputation(tiny_lm, chat_prompt):
    """d_l and U_k from output_hidden_states (an independent path) for layers 0..L-2; the
    last layer's hidden_states entry carries the final norm, so it is checked by a hook."""
    steer = _fitted(tiny_lm, chat_prompt, lam=1.0)
    t0, r = steer.instruction, steer.refusal_instruction

    def hs(q, text):
        with torch.no_grad():
            return tiny_lm(**chat_prompt(q, text), output_hidden_states=True).hidden_states

    diffs = [torch.stack([h[:, -1] for h in hs(q, r)[1:3]]) -
             torch.stack([h[:, -1] for h in hs(q, t0)[1:3]]) for q in HARM]
    d = torch.stack(diffs).mean(0)[:, 0]                     # [2, D]
    assert torch.allclose(steer.directions[:2], d, atol=1e-5)
    ben = torch.stack([torch.stack([h[0, -1] for h in hs(q, t0)[1:3]]) for q in BEN])
    for j in range(2):
        x = ben[:, j].double()
        x = x - x.mean(0)
        w, vecs = torch.linalg.eigh(x.T @ x)
        top = vecs[:, torch.argsort(w, descending=True)[:3]]
        u = steer.bases[j].double()
        assert torch.allclose(u @ u.T, top @ top.T, atol=1e-4)
        v = d[j].double() - top @ (top.T @ d[j].double())
        assert torch.allclose(steer.vectors[j].double(), v, atol=1e-4)


def test_save_load_round_trip_is_exact(tmp_path, tiny_llama, byte_tok, chat_prompt):
    steer = _fitted(tiny_llama, chat_prompt, alpha=0.4, lam=0.5)
    path = steer.save(tmp_path / "v.pt")
    back = SARSteer.load(path, model=tiny_llama)
    for key in ("directions", "vectors", "bases", "benign_means"):
        assert torch.equal(getattr(back, key), getattr(steer, key))
    assert back.settings() == steer.settings()
    assert back.layer_ids == steer.layer_ids
    enc = _ids(byte_tok)
    with torch.no_grad():
        with steer.apply(tiny_llama):
            a = tiny_llama(**enc).logits
        with back.apply(tiny_llama):
            b = tiny_llama(**enc).logits
    assert torch.equal(a, b)


def test_bfloat16_model(byte_tok, chat_prompt):
    from icml.models import tiny_causal_lm

    m = tiny_causal_lm("qwen2", seed=1, hidden_size=32, num_layers=2, dtype=torch.bfloat16)
    steer = SARSteer(k=2).fit(m, HARM, BEN, chat_prompt)
    assert steer.vectors.dtype == torch.float32
    enc = _ids(byte_tok)
    with torch.no_grad():
        ref = m(**enc).logits
        with steer.apply(m, alpha=2.0):
            out = m(**enc).logits
    assert out.dtype == torch.bfloat16
    assert torch.equal(out[:, :-1], ref[:, :-1]) and not torch.equal(out[:, -1], ref[:, -1])


def test_steering_hooks_function_directly(tiny_llama, byte_tok):
    enc = _ids(byte_tok)
    v = {0: torch.ones(32), 2: -torch.ones(32)}
    with torch.no_grad():
        ref = tiny_llama(**enc).logits
        with steering_hooks(tiny_llama, v, alpha=0.5, position="all") as handles:
            assert len(handles) == 2
            out = tiny_llama(**enc).logits
    assert not torch.equal(out[:, 0], ref[:, 0])      # every position edited
    assert hook_count(tiny_llama) == 0
