import pytest
import torch


@pytest.fixture(scope="session")
def tiny_data():
    from icml_smart.data import PotentialFlowDataset

    return PotentialFlowDataset(4, n_boundary=40, n_queries=50, seed=3)


@pytest.fixture(scope="session")
def tiny_model():
    from icml_smart import SMARTConfig, SMARTModel

    torch.manual_seed(0)
    return SMARTModel(SMARTConfig(max_freq=8.0, dim=32, depth=2, heads=4, num_supernodes=16,
                                  num_neighbors=6, fourier_features=6)).double().eval()
