"""The capability diagnostic and the paper's sign flip at small scale."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from icml_beyond_nll import (
    batch_iterator,
    classify,
    encode,
    exact_match,
    make_examples,
    prior_strength,
    train_loop,
)


def test_classify_cutoffs_and_bad_input():
    assert classify(0.8)[:2] == ("model-strong", "p")
    assert classify(0.1)[:2] == ("model-weak", "logp")
    assert classify(0.45)[0] == "intermediate"
    with pytest.raises(ValueError, match="weak_at <= strong_at"):
        classify(0.5, strong_at=0.2, weak_at=0.4)


def test_prior_strength_matches_a_direct_computation(tiny_llama):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 64, (3, 9), generator=g)
    labels = ids.clone()
    labels[:, :4] = -100
    rep = prior_strength(tiny_llama, [{"input_ids": ids, "labels": labels}])
    with torch.no_grad():
        logp = torch.log_softmax(tiny_llama(input_ids=ids).logits[:, :-1].double(), -1)
    p = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)[:, 3:].exp()
    assert rep.n_tokens == p.numel() == 15
    assert rep.mean_p == pytest.approx(float(p.mean()), rel=1e-5)
    # a random model sits near the uniform 1/V: the model-weak end
    assert rep.regime == "model-weak" and rep.mean_p < 5 * rep.uniform_p
    with pytest.raises(ValueError, match="no response tokens"):
        prior_strength(tiny_llama, [{"input_ids": ids, "labels": torch.full_like(ids, -100)}])


def test_sign_flip_at_small_scale(tok):
    """The claim with margins that can fail. The prior is pretrained only part of the way (50
    NLL steps), so before fine-tuning it is right on about half of the clean test set: a
    prior-leaning objective cannot pass by standing still. Model-strong (the prior's task, SFT
    data with 30% label noise): -p must beat NLL by >= 0.1 exact match; model-weak (a new cipher):
    NLL must beat -p by >= 0.5 (-p's gradient weight p is ~1/V there)."""
    from icml.models import tiny_causal_lm

    prior = tiny_causal_lm("qwen2", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                           seed=0)
    train_loop(prior, batch_iterator(encode(make_examples("rule", 2000, seed=1), tok), 64,
                                     seed=0), "logp", steps=50, lr=3e-3, cpu=True)
    prior.eval()
    strong = encode(make_examples("rule", 128, noise=0.3, seed=3), tok)
    strong_test = encode(make_examples("rule", 300, seed=4), tok)
    weak = encode(make_examples("weak", 1000, seed=5), tok)
    weak_test = encode(make_examples("weak", 300, seed=6), tok)
    before = exact_match(prior, strong_test)
    assert 0.3 <= before <= 0.8, before  # imperfect prior: the strong-end check can fail
    assert exact_match(prior, weak_test) == 0.0
    # the diagnostic orders the two ends (the half-trained prior is below its strong cut-off)
    rs, rw = prior_strength(prior, [strong]), prior_strength(prior, [weak])
    assert rs.mean_p > 2 * rw.mean_p and rs.median_p > 100 * rw.median_p
    acc = {}
    for key in ("logp", "p"):
        for name, tr, te in (("strong", strong, strong_test), ("weak", weak, weak_test)):
            m = copy.deepcopy(prior).train()
            train_loop(m, batch_iterator(tr, 64, seed=1), key, steps=40, lr=3e-3, cpu=True)
            acc[key, name] = exact_match(m, te)
    assert acc["p", "strong"] - acc["logp", "strong"] >= 0.1, acc
    assert acc["p", "strong"] > before, acc  # -p improved on the prior, not just kept it
    assert acc["logp", "weak"] - acc["p", "weak"] >= 0.5, acc


def test_exact_match_is_teacher_forced_greedy(prior, tok):
    data = encode(make_examples("rule", 20, seed=9), tok)
    acc = exact_match(prior, data)
    # greedy decoding from the prompt reproduces the answer on the same share of examples
    hits = 0
    for ex in make_examples("rule", 20, seed=9):
        ids = torch.tensor([tok(ex.prompt, add_special_tokens=False)["input_ids"]])
        out = prior.generate(ids, max_new_tokens=len(ex.answer), do_sample=False,
                             pad_token_id=tok.pad_token_id)
        hits += tok.decode(out[0, ids.shape[1]:]) == ex.answer
    assert acc == hits / 20


def test_evaluate_hook_reads_a_jsonl_file(tmp_path):
    from icml.runner import run

    path = tmp_path / "sft.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": f"A{i}=", "response": "xyz"})
                              for i in range(5)))
    res = run("beyond-nll", "evaluate", overrides=[f"data={path}", "pretrain_steps=0"],
              out=tmp_path / "runs", device="cpu", show_progress=False)
    assert res.status == "ok" and res.metrics["mean_p_sft.jsonl"] < 0.05
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\n')
    from icml import ConfigError
    from icml.runner import RunFailed

    with pytest.raises((RunFailed, ConfigError), match="line 1"):
        run("beyond-nll", "evaluate", overrides=[f"data={bad}", "pretrain_steps=0"],
            out=tmp_path / "runs2", device="cpu", show_progress=False)
