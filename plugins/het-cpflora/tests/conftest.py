import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    yield


def tiny_model(seed: int = 0):
    from icml.models import tiny_causal_lm

    return tiny_causal_lm("llama", seed=seed, hidden_size=32, num_layers=2, num_heads=4,
                          num_kv_heads=2)
