"""Length-bucketed batching, order restoration, padding, the skipped LM head and KV cache, and
the early stop after the deepest requested layer, each against an independent per-sentence
reference (the official-style loop: full model forward, ``torch.quantile`` clipping)."""

from types import SimpleNamespace

import pytest
import torch
from icml_synsem import extract_sentence_reps
from icml_synsem.config import ExtractionOptions
from icml_synsem.representations import decoder_blocks, length_batches

WORDS = ["the", "cat", "sat", "on", "an", "mat", "while", "dogs", "barked", "near", "old"]


def naive_loop(model, tok, sentences, layers, last_n=3, q=(0.05, 0.95)):
    """One sentence at a time through the full model (LM head included), as the official
    extraction script does."""
    out = []
    for s in sentences:
        ids = tok(s, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            hs = model(**ids, output_hidden_states=True).hidden_states
        reps = []
        for layer in layers:
            h = hs[layer][0].float()
            if q is not None:
                lo, hi = torch.quantile(h.flatten(), torch.tensor(q))
                h = h.clamp(lo, hi)
            reps.append(h[-last_n:].mean(0))
        out.append(torch.stack(reps))
    return torch.stack(out, dim=1)


@pytest.fixture(scope="module")
def mixed():
    """Sentences of 3..60 bytes in shuffled length order."""
    g = torch.Generator().manual_seed(3)
    sents = []
    for _ in range(40):
        n = int(torch.randint(2, 11, (1,), generator=g))
        sents.append(" ".join(WORDS[int(i)] for i in torch.randint(len(WORDS), (n,),
                                                                   generator=g)))
    return ["abc", *sents, "x y"]


def _calls_of(block, fn):
    """``fn()``'s result and how many times ``block`` ran during it."""
    calls = []
    handle = block.register_forward_hook(lambda *a: calls.append(1))
    try:
        return fn(), len(calls)
    finally:
        handle.remove()

def test_length_batches_cover_sort_and_respect_limits():
    lengths = [5, 30, 2, 9, 9, 100, 1, 7, 30, 3]
    for bs, bt in [(1, 0), (3, 0), (4, 40), (64, 25), (2, 1)]:
        batches = length_batches(lengths, bs, bt)
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(len(lengths)))  # every sentence exactly once
        assert [lengths[i] for i in flat] == sorted(lengths)  # ascending length
        for b in batches:
            assert len(b) <= bs
            # the token limit holds unless one sentence alone exceeds it
            assert not bt or len(b) * max(lengths[i] for i in b) <= bt or len(b) == 1
    assert length_batches(lengths, 64, 25)[-1] == [5]  # 100 tokens: a batch of its own
    assert length_batches([], 4, 8) == []
    # a batch that holds a quarter of the token limit ends where the length grows
    assert length_batches([3, 3, 3, 4, 4, 9], 64, 24) == [[0, 1, 2], [3, 4], [5]]
    with pytest.raises(ValueError, match="batch_size"):
        length_batches(lengths, 0, 10)
    with pytest.raises(ValueError, match="batch_tokens"):
        length_batches(lengths, 4, -1)


def test_length_batches_keep_padding_small():
    """Many lengths with a few sentences each (as in a small draw of the English data): padded
    tokens stay within 10% of the real ones (sorting alone, cut every 64 sentences or 1,024
    padded tokens, leaves 22% here)."""
    import random

    rng = random.Random(0)
    lengths = [rng.randint(6, 30) for _ in range(128)]
    batches = length_batches(lengths, 64, 1024)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    assert padded <= 1.10 * sum(lengths)


@pytest.mark.parametrize("kw", [{"batch_size": 64, "batch_tokens": 0},
                                {"batch_size": 5, "batch_tokens": 0},
                                {"batch_size": 64, "batch_tokens": 120}])
def test_bucketed_batches_equal_the_naive_loop(byte_lm, mixed, kw):
    """Batches of mixed lengths with right padding, written back in the input order, equal the
    official-style per-sentence loop, with and without clipping, at the first and last layers."""
    model, tok = byte_lm
    for q in [None, (0.05, 0.95)]:
        want = naive_loop(model, tok, mixed, [0, 1, 2], q=q)
        # q is None (no clipping) or the default quantiles
        got = extract_sentence_reps(model, tok, mixed,
                                    ExtractionOptions(layers=[0, 1, 2], clip=q is not None, **kw))
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    # order restoration: permuting the input permutes the output the same way
    perm = torch.randperm(len(mixed), generator=torch.Generator().manual_seed(0)).tolist()
    shuffled = extract_sentence_reps(model, tok, [mixed[i] for i in perm],
                                     ExtractionOptions(layers=[1, 2], **kw))
    torch.testing.assert_close(shuffled, got[1:, perm], atol=2e-5, rtol=1e-4)


def test_lm_head_and_cache_are_skipped(byte_lm, mixed):
    model, tok = byte_lm
    head_calls, kwargs = [], []
    h1 = model.lm_head.register_forward_hook(lambda *a: head_calls.append(1))
    h2 = model.model.register_forward_pre_hook(lambda m, a, k: kwargs.append(k),
                                               with_kwargs=True)
    try:
        extract_sentence_reps(model, tok, mixed, ExtractionOptions(layers=[-1], batch_tokens=0))
    finally:
        h1.remove()
        h2.remove()
    assert head_calls == [] and kwargs and all(k.get("use_cache") is False for k in kwargs)


def test_early_stop_skips_later_blocks(mixed):
    """Layers [1, 2] of a 4-block model: apart from the one-sentence check, blocks 3 and 4 never
    run, and the result equals the full forward's."""
    from icml.models import byte_tokenizer, tiny_causal_lm

    model, tok = tiny_causal_lm("llama", num_layers=4, hidden_size=32, seed=2), byte_tokenizer()
    blocks = decoder_blocks(model.model, 4)
    assert blocks is model.model.layers
    fast, calls = _calls_of(blocks[2], lambda: extract_sentence_reps(
        model, tok, mixed, ExtractionOptions(layers=[1, 2], batch_size=8)))
    n_batches = len(length_batches([len(tok(s)["input_ids"]) for s in mixed], 8, 1024))
    assert n_batches > 2 and calls == 1  # only the check forward of one sentence
    full = extract_sentence_reps(model, tok, mixed, ExtractionOptions(layers=[1, 2], batch_size=8,
                                                                      stop_early=False))
    torch.testing.assert_close(fast, full, atol=0, rtol=0)
    torch.testing.assert_close(fast, naive_loop(model, tok, mixed, [1, 2]), atol=2e-5,
                               rtol=1e-4)


class _Odd(torch.nn.Module):
    """A model whose reported hidden states are not its blocks' inputs (scaled by 2)."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.config = SimpleNamespace(num_hidden_layers=3)
        self.emb = torch.nn.Embedding(260, 8)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))
        self.scale = scale

    def forward(self, input_ids, attention_mask=None, output_hidden_states=True):
        h = self.emb(input_ids)
        hs = [h * self.scale]
        for block in self.layers:
            h = torch.tanh(block(h))
            hs.append(h * self.scale)
        return SimpleNamespace(hidden_states=tuple(hs))


@pytest.mark.parametrize("scale", [1.0, 2.0])
def test_early_stop_falls_back_when_the_check_fails(byte_lm, mixed, scale):
    """When a model's hidden states are not its blocks' inputs, the one-sentence check rejects
    the truncated forward and every batch runs in full: the results stay the model's own."""
    _, tok = byte_lm
    model = _Odd(scale).eval()
    calls = []
    handle = model.layers[2].register_forward_hook(lambda *a: calls.append(1))
    try:
        got = extract_sentence_reps(model, tok, mixed, ExtractionOptions(layers=[0, 2],
                                                                         batch_size=8))
    finally:
        handle.remove()
    want = extract_sentence_reps(model, tok, mixed, ExtractionOptions(layers=[0, 2], batch_size=8,
                                                                      stop_early=False))
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    n_batches = len(length_batches([len(tok(s)["input_ids"]) for s in mixed], 8, 1024))
    # the check forward of one sentence, then (check failed) every batch in full
    assert len(calls) == (1 if scale == 1.0 else 1 + n_batches)


@pytest.mark.parametrize("arch", ["bert", "gpt2", "qwen2"])
def test_early_stop_on_other_architectures(byte_lm, mixed, arch):
    """An encoder (BERT, attention mask kept), GPT-2 (blocks in ``h``) and Qwen2: the truncated
    forward passes the one-sentence check, later batches skip the last block, and the result is
    the full forward's."""
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

    from icml.models import tiny_causal_lm

    _, tok = byte_lm
    torch.manual_seed(0)
    model = {
        "bert": lambda: BertModel(BertConfig(vocab_size=260, hidden_size=32, num_hidden_layers=3,
                                             num_attention_heads=4, intermediate_size=64,
                                             pad_token_id=0)),
        "gpt2": lambda: GPT2Model(GPT2Config(vocab_size=260, n_embd=32, n_layer=3, n_head=4,
                                             bos_token_id=1, eos_token_id=2)),
        "qwen2": lambda: tiny_causal_lm("qwen2", num_layers=3, hidden_size=32, seed=1),
    }[arch]().eval()
    blocks = decoder_blocks(model.base_model, 3)
    assert blocks is not None
    fast, calls = _calls_of(blocks[2], lambda: extract_sentence_reps(
        model, tok, mixed, ExtractionOptions(layers=[0, 1], batch_size=8)))
    assert calls == 1
    full = extract_sentence_reps(model, tok, mixed, ExtractionOptions(layers=[0, 1], batch_size=8,
                                                                      stop_early=False))
    torch.testing.assert_close(fast, full, atol=0, rtol=0)
