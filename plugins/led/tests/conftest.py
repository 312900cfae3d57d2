import pytest
import torch

from icml.models import byte_tokenizer, tiny_causal_lm


@pytest.fixture(scope="session")
def tok():
    return byte_tokenizer()


@pytest.fixture(scope="session", params=["llama", "qwen2"])
def model(request):
    return tiny_causal_lm(request.param, seed=3, num_layers=6, hidden_size=32, num_heads=4,
                          num_kv_heads=2)


@pytest.fixture(scope="session")
def llama():
    return tiny_causal_lm("llama", seed=5, num_layers=6, hidden_size=32, num_heads=4,
                          num_kv_heads=2)


@pytest.fixture()
def gen():
    return torch.Generator().manual_seed(1234)
