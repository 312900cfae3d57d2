import pytest
import torch


def _tiny(arch: str, attn: str = "sdpa"):
    from icml.models import tiny_causal_lm

    m = tiny_causal_lm(arch, seed=0, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                       vocab_size=64)
    m.set_attn_implementation(attn)
    return m


@pytest.fixture(scope="session")
def tiny_model():
    """A factory for tiny seeded Llama/Qwen2 models (vocab 64, GQA 4/2), cached per session."""
    cache: dict = {}

    def get(arch: str = "llama", attn: str = "sdpa"):
        if (arch, attn) not in cache:
            cache[arch, attn] = _tiny(arch, attn)
        return cache[arch, attn]

    return get


@pytest.fixture
def ids():
    g = torch.Generator().manual_seed(0)
    return torch.randint(4, 64, (2, 40), generator=g), torch.randint(4, 64, (2, 3), generator=g)


@pytest.fixture(scope="session")
def smol():
    """SmolLM2-135M-Instruct ``(model, tokenizer)``, loaded once; skipped where the packaged
    weights are not installed, unless ``ICML_REQUIRE_PRETRAINED=1`` (CI)."""
    from icml.testing import pretrained_or_skip

    model, tok = pretrained_or_skip("smollm2-135m-instruct")
    return model.eval(), tok
