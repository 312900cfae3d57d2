import pytest


@pytest.fixture(scope="session")
def bench():
    from icml_lalm_judge import make_dialogues

    return make_dialogues(n_base=6, seed=0)


@pytest.fixture(scope="session")
def audio(bench):
    from icml_lalm_judge import SpeechConfig, synthesize_benchmark

    sp = SpeechConfig(backend="tones", prosody=True, noise=0.05)
    return synthesize_benchmark(bench, sp, seed=0)
