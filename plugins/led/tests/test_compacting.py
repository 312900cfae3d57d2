"""Decoding in segments with finished rows dropped (``generate_compacting``, the real-model
benchmark's cheap path) draws what one uninterrupted ``generate`` call draws."""

import pytest
import torch
from icml_led.config import LEDConfig
from icml_led.evaluation import Method, generate_compacting, shared_prefix_cache
from icml_led.generate import DoLaDecoding, LEDDecoding, SamplingDecoding

ARMS = {
    "sampling": Method("sampling", lambda g: SamplingDecoding(g),
                       {"do_sample": True, "temperature": 1.0, "top_k": 20, "top_p": 0.95}),
    "dola": Method("dola", lambda g: DoLaDecoding("high", 0.1, g),
                   {"do_sample": True, "temperature": 1.0, "top_k": 20, "top_p": 0.95}),
    "led": Method("led", lambda g: LEDDecoding(LEDConfig(depth=4, top_k=8), g),
                  {"do_sample": True, "temperature": 1.0}),
}


def _gens(n):
    return [torch.Generator().manual_seed(100 + i) for i in range(n)]


@pytest.mark.parametrize("arm", sorted(ARMS))
@pytest.mark.parametrize("share_prefix", [False, True])
def test_compacting_equals_one_call(llama, arm, share_prefix):
    method = ARMS[arm]
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(4, 200, (6, 5), generator=g)
    att = torch.ones_like(ids)
    ids[:2, :2], att[:2, :2] = 0, 0                      # left padding on two rows
    n_new = 14
    # eos = the most frequent token of a plain run, so rows finish at different steps
    probe = llama.generate(ids, attention_mask=att, max_new_tokens=n_new, pad_token_id=0,
                           custom_generate=method.make(_gens(6)), **method.generate_kwargs)
    eos = int(probe[:, ids.shape[1]:].flatten().mode().values)
    kw = {}
    if share_prefix:
        kw["cache"] = shared_prefix_cache(llama, ids, att, 1)
    ref = llama.generate(ids, attention_mask=att, max_new_tokens=n_new, pad_token_id=0,
                         eos_token_id=eos, custom_generate=method.make(_gens(6)), **kw,
                         **method.generate_kwargs)[:, ids.shape[1]:]
    cache = shared_prefix_cache(llama, ids, att, 1) if share_prefix else None
    new, stats = generate_compacting(llama, ids, att, method, _gens(6), max_new_tokens=n_new,
                                     segment=3, pad=0, eos=eos, cache=cache)
    finished = (ref == eos).any(1)
    assert 0 < int(finished.sum()) < 6                   # some rows leave early, some do not
    ref = torch.nn.functional.pad(ref, (0, n_new - ref.shape[1]), value=0)
    assert torch.equal(new, ref)
    hit = (new == eos).int()
    written = torch.where(hit.any(1), hit.argmax(1) + 1, torch.full_like(hit[:, 0], n_new))
    assert stats["tokens"] == int(written.sum())         # eos counts, padding does not
