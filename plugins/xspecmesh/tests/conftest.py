import pytest
import torch
from icml_xspecmesh.heads import SpeculativeHeads
from icml_xspecmesh.tokenizer import MeshTokenizer


@pytest.fixture(scope="session")
def tok():
    return MeshTokenizer(n_bins=32, n_classes=6)


def _random_heads(model, num_heads=3, seed=0, scale=0.5, cross_attention=False):
    """Heads with random (non-zero) residual weights: their drafts are arbitrary."""
    heads = SpeculativeHeads.from_model(model, num_heads=num_heads,
                                        cross_attention=cross_attention)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return heads.eval()


@pytest.fixture(scope="session", params=["llama", "qwen2"])
def lm(request):
    from icml.models import tiny_causal_lm

    return tiny_causal_lm(request.param, seed=3, num_layers=2, hidden_size=32, num_heads=4,
                          num_kv_heads=2, vocab_size=41, max_positions=128)


@pytest.fixture(scope="session")
def random_heads():
    """Builder of heads with random residual weights: ``random_heads(model, num_heads, ...)``."""
    return _random_heads
