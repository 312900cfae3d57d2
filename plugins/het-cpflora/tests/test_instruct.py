"""The generated instruction task and our ROUGE (checked against rouge-score 0.1.2)."""

import random

import pytest
from icml_het_cpflora.instruct import (
    CATEGORIES,
    encode_train,
    lcs_length,
    make_instructions,
    number_words,
    prompt_text,
    rouge1,
    rougeL,
)

# (reference, prediction, ROUGE-1 F, ROUGE-L F) as rouge_score.rouge_scorer.RougeScorer(
# ["rouge1", "rougeL"]) (default: no stemmer) gives them, computed with rouge-score 0.1.2 in a
# throwaway environment (the package pulls nltk and regex, so it is not a dependency)
ROUGE_SCORE_REFERENCE = [
    ("hot - cold, big - small", "hot - cold, big - large", 0.75, 0.75),
    ("The plurals are boxes, children and cities.", "boxes children cities", 0.6, 0.6),
    ("- go: went\n- eat: ate", "went ate go eat", 1.0, 0.5),
    ("forty-seven, twelve", "Forty seven twelve!", 1.0, 1.0),
    ("", "abc", 0.0, 0.0),
    ("a a a b", "a b b", 0.5714285714285715, 0.5714285714285715),
]


@pytest.mark.parametrize("ref,pred,r1,rl", ROUGE_SCORE_REFERENCE)
def test_rouge_matches_rouge_score(ref, pred, r1, rl):
    assert rouge1(pred, ref) == pytest.approx(r1, abs=1e-12)
    assert rougeL(pred, ref) == pytest.approx(rl, abs=1e-12)


def test_lcs_and_bounds():
    assert lcs_length(list("abcbdab"), list("bdcaba")) == 4
    assert rouge1("x y", "x y") == 1.0 and rougeL("y x", "x y") == 0.5


def test_number_words():
    assert [number_words(n) for n in (0, 13, 20, 47, 99)] == [
        "zero", "thirteen", "twenty", "forty-seven", "ninety-nine"]
    with pytest.raises(ValueError):
        number_words(100)


def test_instructions_distinct_heldout_and_no_client_mark():
    rng = random.Random(0)
    for cat in CATEGORIES:
        test = make_instructions(cat, 6, rng)
        train = make_instructions(cat, 24, rng, exclude={e.instruction for e in test})
        assert len({e.instruction for e in train}) == 24
        assert not {e.instruction for e in train} & {e.instruction for e in test}
        # the answer depends only on the instruction: same instruction -> same output
        again = make_instructions(cat, 24, random.Random(0))
        by_instr = {e.instruction: e.output for e in train + test}
        assert all(by_instr.get(e.instruction, e.output) == e.output for e in again)
    with pytest.raises(ValueError, match="unknown category"):
        make_instructions("poems", 1, rng)


def test_encode_train_masks_the_prompt():
    from icml.models import byte_tokenizer

    tok = byte_tokenizer()
    exs = make_instructions("plurals", 3, random.Random(1))
    enc = encode_train(tok, exs)
    for k, e in enumerate(exs):
        n_p = len(tok(prompt_text(e), add_special_tokens=False)["input_ids"])
        lab = enc["labels"][k]
        assert (lab[:n_p] == -100).all() and (lab[n_p] != -100)
        assert int(enc["prompt_mask"][k].sum()) == n_p
        n = int(enc["attention_mask"][k].sum())
        assert (lab[n:] == -100).all() and int(lab[n - 1]) == tok.eos_token_id


def test_bench_rouge_data_is_instruct_clients():
    """benchmarks/bench_rouge.py builds exactly the task's data (``instruct_clients``), so
    the Flower task and the benchmark train on the same examples."""
    from pathlib import Path

    import torch
    from icml_het_cpflora.instruct import instruct_clients

    from icml.models import byte_tokenizer
    from icml.testing import load_script

    build_data = load_script(Path(__file__).resolve().parents[1] / "benchmarks" / "bench_rouge.py",
                             "het_cpflora_bench_rouge").build_data
    tok = byte_tokenizer()
    train, tests = build_data(tok, 3, 6, 2, 4)
    data, masks, tests2 = instruct_clients(tok, 4, 3, train_size=6, test_size=2)
    assert tests == tests2
    for (d, m), d2, m2 in zip(train, data, masks):
        assert torch.equal(d.input_ids, d2.input_ids) and torch.equal(d.labels, d2.labels)
        assert torch.equal(m, m2) and torch.equal(d.prompt_ids, d2.prompt_ids)
