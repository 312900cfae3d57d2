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


def test_sign_flip_at_small_scale(prior, tok):
    """Pretrained prior: the diagnostic puts the noisy rule task at the strong end and the cipher
    at the weak end; -p keeps the prior under label noise better than NLL, and NLL learns the
    cipher where -p cannot (its gradient weight p is ~0 there)."""
    strong = encode(make_examples("rule", 128, noise=0.3, seed=3), tok)
    strong_test = encode(make_examples("rule", 300, seed=4), tok)
    weak = encode(make_examples("weak", 1000, seed=5), tok)
    weak_test = encode(make_examples("weak", 300, seed=6), tok)
    assert prior_strength(prior, [strong]).regime == "model-strong"
    assert prior_strength(prior, [weak]).regime == "model-weak"
    acc = {}
    for key in ("logp", "p"):
        for name, tr, te in (("strong", strong, strong_test), ("weak", weak, weak_test)):
            m = copy.deepcopy(prior).train()
            train_loop(m, batch_iterator(tr, 64, seed=1), key, steps=40, lr=3e-3, cpu=True)
            acc[key, name] = exact_match(m, te)
    assert acc["p", "strong"] >= acc["logp", "strong"]
    assert acc["logp", "weak"] - acc["p", "weak"] > 0.5, acc


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
