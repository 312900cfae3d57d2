import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: starts two processes under accelerate (about 30 s "
                            "on 2 cores); deselect with -m 'not slow'")


@pytest.fixture(scope="session")
def tok():
    from icml.models import byte_tokenizer

    return byte_tokenizer()


@pytest.fixture(scope="session")
def probe_tr():
    from icml_cal_grpo.tabular import enumerate_trajectories, probe_env

    return enumerate_trajectories(probe_env(), 3)


@pytest.fixture
def rand_logits(probe_tr):
    import torch

    g = torch.Generator().manual_seed(3)
    return torch.randn((probe_tr.n_states, probe_tr.n_arms), dtype=torch.float64, generator=g)
