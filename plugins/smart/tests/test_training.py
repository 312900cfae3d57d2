"""Training: determinism under a seed, and the claim at small scale against trivial baselines."""

import torch
from icml_smart import SMARTConfig, SMARTModel
from icml_smart.data import ChannelNormalizer, PotentialFlowDataset
from icml_smart.job import free_stream_predictor
from icml_smart.training import evaluate_surrogate, train_surrogate


def _model(seed=0):
    torch.manual_seed(seed)
    return SMARTModel(SMARTConfig(dim=32, depth=2, num_supernodes=16, num_neighbors=6,
                                  fourier_features=8, max_freq=4.0))


def test_training_is_deterministic_under_a_seed():
    data = PotentialFlowDataset(16, n_boundary=32, n_queries=40, seed=1)
    a = train_surrogate(_model(), data, steps=4, batch_size=4, seed=5).losses
    b = train_surrogate(_model(), data, steps=4, batch_size=4, seed=5).losses
    c = train_surrogate(_model(), data, steps=4, batch_size=4, seed=6).losses
    assert a == b and a != c


def test_normaliser_round_trip_and_stats_saved_in_config():
    data = PotentialFlowDataset(8, n_boundary=32, n_queries=40, seed=2)
    y = torch.cat([c["targets"] for c in data.cases])
    norm = ChannelNormalizer.fit(y)
    z = norm.encode(y)
    assert torch.allclose(z.mean(0), torch.zeros(3), atol=1e-5)
    assert torch.allclose(z.std(0), torch.ones(3), atol=1e-4)
    assert torch.allclose(norm.decode(z), y, atol=1e-5)
    m = _model()
    train_surrogate(m, data, steps=1, batch_size=2)
    assert m.config.target_mean == norm.mean


def test_trained_smart_beats_the_free_stream_and_the_mean_field():
    """A short training on exact ellipse flows must beat the undisturbed free stream (which is
    exact far away, so it is not a strawman near the far field) and the training mean field."""
    train = PotentialFlowDataset(128, n_boundary=48, n_queries=128, seed=0)
    test = PotentialFlowDataset(32, n_boundary=48, n_queries=128, seed=1)
    m = _model()
    train_surrogate(m, train, steps=120, batch_size=8, lr=3e-3, query_subsample=64, seed=0)
    ours = evaluate_surrogate(m, test)
    free = evaluate_surrogate(free_stream_predictor(2), test)
    assert ours["rel_l2"] < 0.9 * free["rel_l2"]
    assert ours["rel_l2_per_channel"][0] < 0.8 * free["rel_l2_per_channel"][0]  # u/U
    assert ours["rel_l2_per_channel"][2] < 0.95 * free["rel_l2_per_channel"][2]  # C_p
    mean_pred = torch.cat([c["targets"] for c in train.cases]).mean(0)
    tgt = torch.stack([c["targets"] for c in test.cases])
    mean_err = (torch.linalg.vector_norm(tgt - mean_pred, dim=1)
                / torch.linalg.vector_norm(tgt, dim=1)).mean()
    assert ours["rel_l2"] < float(mean_err)
