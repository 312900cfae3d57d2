"""Shared fixtures: tiny models, a tokenizer, a pretrained prior (built once per session)."""

from __future__ import annotations

import copy

import pytest


@pytest.fixture(scope="session")
def tok():
    from icml.models import byte_tokenizer

    return byte_tokenizer()


@pytest.fixture
def tiny_llama():
    from icml.models import tiny_causal_lm

    return tiny_causal_lm("llama", hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                          vocab_size=64, seed=0)


@pytest.fixture(scope="session")
def _prior(tok):
    from icml_beyond_nll import batch_iterator, encode, make_examples, train_loop

    from icml.models import tiny_causal_lm

    model = tiny_causal_lm("qwen2", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                           seed=0)
    data = encode(make_examples("rule", 2000, seed=1), tok)
    train_loop(model, batch_iterator(data, 64, seed=0), "logp", steps=80, lr=3e-3, cpu=True)
    return model.eval()


@pytest.fixture
def prior(_prior):
    """A tiny Qwen2 model pretrained with NLL on the rule task (a fresh copy per test)."""
    return copy.deepcopy(_prior)
