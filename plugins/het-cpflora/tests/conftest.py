import pytest
import torch


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a test that starts Flower processes (tens of "
                            "seconds); deselect with -m 'not slow'")


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    yield
