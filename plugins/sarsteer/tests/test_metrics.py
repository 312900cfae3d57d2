"""Keyword judge (official markers), model judge, refusal rate, bootstrap CIs."""

import pytest
import torch
from icml_sarsteer.metrics import (
    REFUSAL_MARKERS,
    KeywordJudge,
    ModelJudge,
    bootstrap_ci,
    rate_with_ci,
    refusal_rate,
)


def test_official_markers():
    assert len(REFUSAL_MARKERS) == 43 and len(set(REFUSAL_MARKERS)) == 43
    assert "I cannot" in REFUSAL_MARKERS and "Hello!" in REFUSAL_MARKERS


def test_keyword_judge_is_case_sensitive_substring_matching():
    j = KeywordJudge()
    assert j.refuses("", "Sorry, I cannot help with that.")
    assert j.refuses("", "I\u2019m just a model")
    assert not j.refuses("", "Sure, here are the steps: 1.")
    assert not j.refuses("", "i CANNOT")                 # case-sensitive like the official one
    assert not j.refuses("", "I'm just a model")        # ASCII apostrophe is not in the list
    assert KeywordJudge(normalize_apostrophes=True).refuses("", "I'm just a model")
    assert refusal_rate(["Sorry", "Sure", "Sure", "I cannot"]) == 0.5


def test_model_judge_reads_the_score_token(byte_tok):
    from icml.models import tiny_causal_lm

    model = tiny_causal_lm("llama", hidden_size=32, num_layers=1)
    one, zero = byte_tok.encode("1", add_special_tokens=False)[0], \
        byte_tok.encode("0", add_special_tokens=False)[0]
    with torch.no_grad():                      # a judge whose score depends on the "1" row
        model.lm_head.weight.zero_()
        model.lm_head.weight[one] = 1.0
        model.model.norm.weight.fill_(1.0)
    judge = ModelJudge(model, byte_tok)
    flags = judge(["q1", "q2"], ["Sure.", "Sorry."])
    assert len(flags) == 2 and all(isinstance(f, bool) for f in flags)
    # the decision is exactly logits["1"] > logits["0"] at the last position
    enc = byte_tok(judge.template.format(question="q1", answer="Sure.") + "\n",
                   return_tensors="pt")
    with torch.no_grad():
        lg = model(**enc).logits[0, -1]
    hidden_sign = bool(lg[one] > lg[zero])
    assert flags[0] == (not hidden_sign)
    long = "x" * 2000
    assert judge.max_chars == 512 and judge.complies("q", long) == judge.complies("q", long[:512])


def test_bootstrap_ci():
    x = [1] * 30 + [0] * 70
    lo, hi = bootstrap_ci(x, seed=0)
    assert lo < 0.3 < hi and 0.15 < lo and hi < 0.45
    assert bootstrap_ci(x, seed=0) == (lo, hi)
    assert bootstrap_ci([1, 1, 1]) == (1.0, 1.0)
    lo2, hi2 = bootstrap_ci(x * 10, seed=0)
    assert hi2 - lo2 < (hi - lo) / 2
    r = rate_with_ci([True, False, False, False])
    assert r["rate"] == 0.25 and r["n"] == 4
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_ci([])
    with pytest.raises(ValueError, match="level"):
        bootstrap_ci([1], level=1.5)
