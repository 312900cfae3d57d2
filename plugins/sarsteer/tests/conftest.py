import pytest


@pytest.fixture(scope="session")
def byte_tok():
    from icml.models import byte_tokenizer

    return byte_tokenizer()


def _lm(arch: str):
    from icml.models import tiny_causal_lm

    return tiny_causal_lm(arch, seed=3, hidden_size=32, num_layers=3, num_heads=4,
                          num_kv_heads=2)


@pytest.fixture(scope="session", params=["llama", "qwen2"])
def tiny_lm(request):
    return _lm(request.param)


@pytest.fixture(scope="session")
def tiny_llama():
    return _lm("llama")


@pytest.fixture(scope="session")
def chat_prompt(byte_tok):
    from icml_sarsteer.prompts import ChatPrompt

    return ChatPrompt(byte_tok)


@pytest.fixture(scope="session")
def small_bench():
    from icml_sarsteer.data import make_benchmark

    return make_benchmark(12, 8, seed=1, backend="tones")


@pytest.fixture(scope="session")
def trained_toy():
    """The toy audio-LM trained as in the default job (smaller data), shared by claim tests."""
    from icml_sarsteer.data import make_benchmark
    from icml_sarsteer.toy_lalm import build_toy_lalm, train_toy_lalm

    from icml.testing import torch_threads

    with torch_threads(1):  # the numbers the claim tests check were trained on one thread
        bench = make_benchmark(40, 40, seed=0, backend="tones")
        model, prompt = build_toy_lalm(seed=0)
        train_toy_lalm(model, prompt, bench, steps=300, seed=0, audio_safety_frac=0.25,
                       audio_refusal_suffix=True)
    return bench, model, prompt
