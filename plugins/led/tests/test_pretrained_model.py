"""On the real instruction-tuned model (SmolLM2-135M-Instruct, offline): the entropy profile
against a direct computation, and LED's invariances with the default configuration."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.pretrained


@pytest.fixture(scope="module")
def smollm():
    from icml.testing import pretrained_or_skip

    model, tok = pretrained_or_skip("smollm2-135m-instruct")
    tok.padding_side = "left"
    return model.eval(), tok


def _reply_ids(tok):
    from icml_led.suite import make_suite

    p = make_suite(1, seed=0)[0]
    prompt = tok(p.prompt(tok), add_special_tokens=False)["input_ids"]
    reply = tok("2 + 3 = 5, and 5 + 1 = 6.\nAnswer: 6", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt + reply])
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[0, len(prompt) - 1:ids.shape[1] - 1] = True
    return ids, mask


@pytest.mark.parametrize("norm", [False, True])
def test_entropy_profile_equals_direct_computation(smollm, norm):
    from icml_led.layers import entropy_profile, entropy_profiles

    model, tok = smollm
    ids, mask = _reply_ids(tok)
    got = entropy_profile(model, ids, mask, use_final_norm=norm, temperature=0.6)
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        W = model.lm_head.weight.double()
        want = []
        for i in range(1, model.config.num_hidden_layers + 1):
            h = out.hidden_states[i][0, mask[0]].double()
            if i == model.config.num_hidden_layers:
                logits = out.logits[0, mask[0]].double()
                # hidden_states[-1] is already normed: lm_head of it is the model's own logits
                assert torch.allclose(h @ W.T, logits, atol=1e-3)
            elif norm:
                var = h.pow(2).mean(-1, keepdim=True)
                hn = h * torch.rsqrt(var + model.config.rms_norm_eps)
                logits = (hn * model.model.norm.weight.double()) @ W.T
            else:
                logits = h @ W.T
            logp = torch.log_softmax(logits / 0.6, -1)
            want.append(float(-(logp.exp() * logp).sum(-1).mean()))
    assert len(got) == 30
    assert got == pytest.approx(want, rel=1e-4, abs=1e-4)
    both = entropy_profiles(model, ids, mask, use_final_norm=norm, temperatures=(1.0, 0.6))
    assert both[0.6] == pytest.approx(got, rel=1e-6)
    assert both[1.0][-1] > both[0.6][-1]


def test_default_led_is_batch_and_cache_invariant_on_the_real_model(smollm):
    from icml_led import LEDConfig, LEDDecoding

    model, tok = smollm
    msgs = [[{"role": "user", "content": q}] for q in
            ("What is 7 + 8?", "Name a colour.", "Tom has 3 pens and gets 4 more. How many?")]
    texts = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False)
             for m in msgs]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    kw = dict(do_sample=True, temperature=0.6, max_new_tokens=5, pad_token_id=tok.pad_token_id)

    def gens(idx):
        return [torch.Generator().manual_seed(100 + i) for i in idx]

    dec = LEDDecoding(LEDConfig(), gens(range(3)))        # every default: d=8, k=8, T=0.6
    batched = model.generate(**enc, custom_generate=dec, **kw)
    assert dec.stats["explored"] > 0     # the random gate fired (3 of 15 tokens with these seeds)
    for i, t in enumerate(texts):
        one = tok([t], return_tensors="pt", add_special_tokens=False)
        single = model.generate(**one, custom_generate=LEDDecoding(LEDConfig(), gens([i])),
                                **kw)
        assert batched[i, -5:].tolist() == single[0, -5:].tolist()
    uncached = model.generate(**enc, use_cache=False, **kw,
                              custom_generate=LEDDecoding(LEDConfig(), gens(range(3)),
                                                          lazy=False))
    assert torch.equal(batched, uncached)


def test_fast_decoders_give_the_same_samples_on_the_real_model(smollm):
    """The speed-ups of 0.2.2 leave every sample unchanged on SmolLM2: DoLa's premature logits
    (one matmul into a reused buffer) are the logit lens bit for bit, and run_chat_method with
    a shared prefill memo (a second decoder and temperature reusing the prompt caches) draws
    the same replies as with a fresh prefill per call."""
    from icml_led import DoLaDecoding, LEDConfig, LEDDecoding, SamplingDecoding
    from icml_led.evaluation import Method, run_chat_method
    from icml_led.layers import intermediate_logits
    from icml_led.suite import make_suite

    model, tok = smollm
    probs = make_suite(4, seed=0)
    enc = tok([p.prompt(tok) for p in probs[:2]], return_tensors="pt", padding=True,
              add_special_tokens=False)
    dec = DoLaDecoding("high")
    dec.setup(model, enc["input_ids"], None)
    with torch.no_grad():
        o = model(**enc, output_hidden_states=True)
        assert torch.equal(dec._premature_logits(model, o.hidden_states),
                           intermediate_logits(model, o.hidden_states,
                                               dec._layers).transpose(0, 1))
    samp = {"do_sample": True, "top_k": 20, "top_p": 0.95}
    arms = [Method("dola", lambda g: DoLaDecoding("high", 0.1, g), {**samp, "temperature": 1.0}),
            Method("sampling", lambda g: SamplingDecoding(g), {**samp, "temperature": 0.6}),
            Method("led", lambda g: LEDDecoding(LEDConfig(), g),
                   {"do_sample": True, "temperature": 1.0})]
    memo: dict = {}
    for m in arms:
        kw = dict(num_samples=3, seed=1, max_new_tokens=6, problems_per_batch=2)
        a = run_chat_method(model, tok, probs, m, prefill_memo=memo, **kw)
        b = run_chat_method(model, tok, probs, m, **kw)
        assert a.texts == b.texts and a.correct == b.correct, m.name
    assert len(memo) == 2
