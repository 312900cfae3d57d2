"""The LM continuation-fidelity benchmark: the grammar corpus, the per-document KL / perplexity
ratio on a compressed vs full cache, and a tiny end-to-end run of the benchmark function."""

import argparse
import math
import random
from collections import Counter
from pathlib import Path

import pytest
import torch
from icml_capkv import continuation_logits, prefill
from icml_capkv.fidelity import summarize, verdict
from icml_capkv.lm import BOS, PERIOD, GrammarCorpus, continuation_fidelity, train_lm_model
from icml_capkv.presses import make_press

from icml.testing import load_script


def test_corpus_is_deterministic_and_structured() -> None:
    c = GrammarCorpus()
    a, b = c.sample(8, 60, seed=3), c.sample(8, 60, seed=3)
    assert torch.equal(a, b) and not torch.equal(a, c.sample(8, 60, seed=4))
    assert torch.equal(GrammarCorpus().sample(8, 60, seed=3), a), "structure is seeded too"
    assert a.shape == (8, 60) and bool((a[:, 0] == BOS).all())
    assert int(a.min()) >= BOS and int(a.max()) < c.vocab_size
    rng = random.Random(0)
    topic_nouns: dict[int, Counter] = {}
    for _ in range(200):
        ids, topic, ents = c.document(80, rng)
        t = torch.tensor(ids)
        names = {i - c.name0 for i in ids if c.name0 <= i < c.noun0}
        assert names <= set(ents), "names in a document are its entities only"
        assert len(set(ents)) == c.n_entities
        # every sentence starts with a name or a determiner
        starts = t[1:][torch.cat([torch.tensor([True]), t[1:-1] == PERIOD])]
        assert bool(((starts >= c.det0) & (starts < c.noun0)).all())
        topic_nouns.setdefault(topic, Counter()).update(int(i) for i in t[c.is_noun(t)])
    # topics skew the nouns: each topic's most frequent noun is its own Zipf head
    for topic, cnt in topic_nouns.items():
        assert cnt.most_common(1)[0][0] == c.noun0 + c._noun_order[topic][0]
    tops = {cnt.most_common(1)[0][0] for cnt in topic_nouns.values()}
    assert len(tops) > 1, "different topics have different frequent nouns"


def test_corpus_bad_input() -> None:
    with pytest.raises(ValueError, match="n_entities"):
        GrammarCorpus(n_entities=40, n_names=8)
    with pytest.raises(ValueError, match="p_name"):
        GrammarCorpus(p_name=1.5)
    with pytest.raises(ValueError, match="length"):
        GrammarCorpus().document(1, random.Random(0))


def test_continuation_kl_is_zero_on_the_full_cache(tiny_model) -> None:
    c = GrammarCorpus(n_names=8, n_nouns=20, n_verbs=10, n_adj=6)  # vocab 58 < 64
    m = tiny_model("llama")
    docs = c.sample(6, 40, seed=0)
    rows = continuation_fidelity(m, docs, 30, ["capkv", "streaming"], [0.0, 0.5],
                                 entity_mask=c.is_name)
    by = {(r["policy"], r["ratio"]): r for r in rows}
    for p in ("capkv", "streaming", "full"):
        r = by[p, 0.0]
        assert r["kept"] == 1.0 and r["entities_kept"] == pytest.approx(1.0)
        assert max(abs(x) for x in r["kl_each"]) < 1e-6
        assert max(abs(x - 1) for x in r["ppl_ratio_each"]) < 1e-5
    # at ratio 0.5 the cache is halved, and the KL is the one computed by hand
    r = by["streaming", 0.5]
    assert r["kept"] == pytest.approx(15 / 30) and r["kl"] > 1e-4
    ctx, inp, tg = docs[:, :30], docs[:, 30:-1], docs[:, 31:]
    p = continuation_logits(m, prefill(m, ctx), inp).log_softmax(-1)
    q = continuation_logits(m, prefill(m, ctx, make_press("streaming", 0.5)), inp)
    q = q.log_softmax(-1)
    kl = (p.exp() * (p - q)).sum(-1).mean(-1)
    assert torch.allclose(kl, torch.tensor(r["kl_each"]), atol=1e-6)
    dn = (-q.gather(-1, tg[..., None]) + p.gather(-1, tg[..., None]))[..., 0].mean(-1)
    assert torch.allclose(dn.exp(), torch.tensor(r["ppl_ratio_each"]), atol=1e-5)
    with pytest.raises(ValueError, match="context_len"):
        continuation_fidelity(m, docs, 39, ["capkv"], [0.5])
    with pytest.raises(ValueError, match="unknown policy"):
        continuation_fidelity(m, docs, 30, ["tova"], [0.5])


def test_lm_training_learns_the_grammar_and_verdict_applies() -> None:
    c = GrammarCorpus()
    m, stats = train_lm_model(c, seq_len=40, steps=60, batch_size=8, seed=0)
    assert stats["train_loss"] < math.log(c.vocab_size) - 1.0, stats
    docs = c.sample(8, 40, seed=1)
    rows = continuation_fidelity(m, docs, 30, ["capkv", "leverage", "h2o"], [0.5])
    s = summarize([rows], "ppl_ratio")
    assert s["full", 0.0] == (1.0, 1.0, 1.0)
    v, best = verdict(s, 0.5)
    # the rule, re-applied by hand to the same summary
    others = {p: s[p, 0.5] for p in ("leverage", "h2o")}
    assert best == min(others, key=lambda p: others[p][0])
    m, lo, hi = s["capkv", 0.5]
    bm, blo, bhi = others[best]
    want = "best" if m <= bm else ("tied" if lo <= bhi and blo <= hi else "worse")
    assert v == want


def test_bench_lm_part_end_to_end(capsys) -> None:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench.py"
    bench = load_script(path, "capkv_bench")
    args = argparse.Namespace(seeds="0", lm_steps=3, lm_docs=4)
    bench.lm_level(args, ["capkv", "streaming", "snapkv"],
                   ["policy"] + [f"r={r}" for r in bench.RATIOS])
    out = capsys.readouterr().out
    assert "LM verdict" in out and "perplexity ratio" in out
    assert out.count("| 0.9 |") == 1  # one verdict row per ratio
    # the tables --out-results writes (results file tables, named for the README blocks)
    assert [t["name"] for t in bench.TABLES] == ["lm-seeds", "lm-kl", "lm-ppl", "lm-entities",
                                                 "lm-verdict"]
