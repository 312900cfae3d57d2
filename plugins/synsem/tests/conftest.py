import pytest
from icml_synsem.config import AnalysisOptions, ExtractionOptions


@pytest.fixture(scope="session")
def toy():
    """A small planted setup: (model, tokenizer, data, lexicon)."""
    from icml_synsem.generate import make_toy_data
    from icml_synsem.toy_model import planted_llama, toy_tokenizer

    data, lex = make_toy_data(n_templates=16, per_template=5, seed=0)
    return planted_llama(lex, num_layers=3, seed=0), toy_tokenizer(lex), data, lex


@pytest.fixture(scope="session")
def toy_profile(toy):
    from icml_synsem import centroid_ablation_profile

    model, tok, data, _ = toy
    return centroid_ablation_profile(model, tok, data, ExtractionOptions(layers=[1, 2, 3]),
                                     AnalysisOptions(imbalance_resamples=30))


@pytest.fixture(scope="session")
def byte_lm():
    """A random tiny Llama with the core's byte tokenizer (sentences of different lengths)."""
    from icml.models import byte_tokenizer, tiny_causal_lm

    return tiny_causal_lm("llama", num_layers=2, hidden_size=32, seed=0), byte_tokenizer()


@pytest.fixture(scope="session")
def sentences():
    return ["the cat sat", "a much longer sentence about dogs", "hi there you",
            "colourless green ideas sleep furiously", "xyz", "one two three four five"]
