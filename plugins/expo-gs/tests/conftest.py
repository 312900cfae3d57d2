import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from torch seed 0 (the core's pytest plugin sets one thread)."""
    torch.manual_seed(0)
