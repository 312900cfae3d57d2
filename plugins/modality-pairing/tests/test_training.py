"""Training arms: the sampler's expected loss is the exact all-pairs objective, determinism
under a seed, and the claims at small scale (multimodal beats unimodal; stochastic pairing is
flatter than fixed pairing with moderate data and short training)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from icml_modality_pairing.data import MultimodalData, Standardizer, make_synthetic
from icml_modality_pairing.experiment import Settings, parse_regime, run_arm
from icml_modality_pairing.models import LateFusion, load_model, save_model
from icml_modality_pairing.pairing import PairingIndex, StochasticPairingDataset, pair_indices
from icml_modality_pairing.training import (
    accuracy,
    build_arm_model,
    exact_pairing_loss,
    train_model,
)


def _tiny():
    g = torch.Generator().manual_seed(0)
    y = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    data = MultimodalData({"a": torch.randn(9, 2, generator=g, dtype=torch.float64),
                           "b": torch.randn(9, 3, generator=g, dtype=torch.float64)}, y, 3)
    torch.manual_seed(0)
    model = LateFusion({"a": 2, "b": 3}, 3, width=4, hidden=4).double().eval()
    return data, model


@pytest.mark.parametrize("p", [1.0, 0.5, 0.0])
def test_sampler_expected_loss_equals_the_all_pairs_average(p):
    data, model = _tiny()
    with torch.no_grad():
        exact = float(exact_pairing_loss(model, data, p_stochastic=p))
    # exact expectation of the sampler: enumerate each sample's partner distribution
    idx = PairingIndex(data.labels)
    n = len(data)
    expected = 0.0
    for i in range(n):
        members = idx.members(int(data.labels[i]))
        for j in members.tolist():
            w = p / len(members) + (1 - p) * (j == i)
            out = model(a=data.modalities["a"][i:i + 1], b=data.modalities["b"][j:j + 1])
            expected += w * float(F.cross_entropy(out, data.labels[i:i + 1])) / n
    assert exact == pytest.approx(expected, rel=1e-12)
    # and the real sampler's Monte Carlo mean converges to it
    g = torch.Generator().manual_seed(1)
    vals = []
    for _ in range(400):
        j = pair_indices(idx, data.labels, torch.arange(n), p_stochastic=p, generator=g)
        out = model(a=data.modalities["a"], b=data.modalities["b"][j])
        vals.append(float(F.cross_entropy(out, data.labels)))
    v = torch.tensor(vals, dtype=torch.float64)
    se = float(v.std() / len(vals) ** 0.5)
    assert abs(float(v.mean()) - exact) < 4 * se + 1e-12
    ds = StochasticPairingDataset(data.modalities, data.labels, p_stochastic=p, seed=2)
    dvals = []
    for _ in range(300):
        items = [ds[i] for i in range(n)]
        out = model(a=torch.stack([t["a"] for t in items]), b=torch.stack([t["b"] for t in items]))
        dvals.append(float(F.cross_entropy(out, data.labels)))
    dv = torch.tensor(dvals, dtype=torch.float64)
    assert abs(float(dv.mean()) - exact) < 4 * float(dv.std() / 300 ** 0.5) + 1e-12


def test_training_is_deterministic_under_a_seed():
    train, _ = make_synthetic(200, 10, seed=0)
    states = []
    for _ in range(2):
        torch.manual_seed(0)
        m = build_arm_model("stochastic", train, width=8, hidden=8)
        train_model(m, train, epochs=2, seed=3)
        states.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    assert torch.equal(states[0], states[1])


def test_synthetic_data_and_standardizer():
    a1, t1 = make_synthetic(100, 50, seed=4, dims=(3, 5, 2))
    a2, _ = make_synthetic(100, 50, seed=4, dims=(3, 5, 2))
    assert torch.equal(a1.modalities["b"], a2.modalities["b"])
    assert a1.dims == {"a": 3, "b": 5, "c": 2}
    assert torch.bincount(torch.cat([a1.labels, t1.labels])).tolist() == [38, 38, 37, 37]
    st = Standardizer.fit(a1)
    z = st(a1).modalities["a"]
    assert torch.allclose(z.mean(0), torch.zeros(3), atol=1e-5)
    with pytest.raises(ValueError, match="n_classes"):
        make_synthetic(10, 10, n_classes=1)


def test_save_and_load_round_trip(tmp_path):
    train, test = make_synthetic(100, 20, seed=0)
    m = build_arm_model("fixed", train, width=4, hidden=4, fusion="concat")
    save_model(m, tmp_path / "m.pt", data={"seed": 0})
    m2, extra = load_model(tmp_path / "m.pt")
    assert extra["data"] == {"seed": 0}
    assert accuracy(m, test) == accuracy(m2, test)
    (tmp_path / "bad.pt").write_bytes(b"not a model")
    with pytest.raises(Exception):  # noqa: B017 - torch's own unpickling error
        load_model(tmp_path / "bad.pt")


def test_bad_training_arguments():
    train, _ = make_synthetic(50, 10, seed=0)
    m = build_arm_model("fixed", train, width=4, hidden=4)
    with pytest.raises(ValueError, match="p_stochastic"):
        train_model(m, train, p_stochastic=2.0)
    with pytest.raises(ValueError, match="schedule"):
        train_model(m, train, schedule="step")
    with pytest.raises(ValueError, match="arm"):
        build_arm_model("late", train)
    with pytest.raises(ValueError, match="n_train"):
        parse_regime("2000-15")


def test_claims_at_small_scale():
    """Moderate data, short training (2 seeds): both multimodal arms beat the unimodal
    baseline by a wide margin, and stochastic pairing has a lower held-out λ_max than fixed
    pairing on the same architecture. (The small-data, long-training regime where stochastic
    pairing loses is in the benchmark.)"""
    s = Settings(n_test=600, trace_samples=0, gauss_samples=1, power_iters=60, tol=1e-3)
    res = {arm: [run_arm(arm, 1500, 12, seed, s).metrics for seed in (0, 1)]
           for arm in ("unimodal", "fixed", "stochastic")}
    mean = lambda arm, k: sum(r[k] for r in res[arm]) / 2   # noqa: E731
    assert mean("fixed", "accuracy") > mean("unimodal", "accuracy") + 0.05
    assert mean("stochastic", "accuracy") > mean("unimodal", "accuracy") + 0.05
    assert mean("stochastic", "lambda_max") < 0.9 * mean("fixed", "lambda_max")


def test_three_modalities_train_with_both_fusions_and_unimodal_ignores_extras():
    """Both fusions learn the 4-class task well above chance (0.25) on held-out data: seeded,
    separated class means (measured 0.79 add, 0.89 concat). The bar is checked against what a
    broken model gives: the untrained model (~0.30) and the trained model scored against
    shuffled labels (~0.23) both stay below it."""
    train, test = make_synthetic(300, 400, dims=(4, 5, 6), mean_scale=1.5, seed=0)
    bar = 0.25 + 0.30
    shuffled = MultimodalData(test.modalities, test.labels[torch.randperm(
        len(test), generator=torch.Generator().manual_seed(1))], test.n_classes)
    for fusion in ("add", "concat"):
        torch.manual_seed(0)
        m = build_arm_model("stochastic", train, width=8, hidden=8, fusion=fusion)
        assert accuracy(m, test) < bar                 # untrained: the bar can fail
        hist = train_model(m, train, epochs=10, seed=0)
        assert hist.losses[-1] < hist.losses[0]
        assert accuracy(m, test) > bar
        assert accuracy(m, shuffled) < bar             # a model that ignores the labels fails
    uni = build_arm_model("unimodal", train, width=8, hidden=8)
    assert uni(**test.modalities).shape == (400, 4)
    uni_b = build_arm_model("unimodal_b", train, width=8, hidden=8)
    assert uni_b.modalities == ["b"] and uni_b(**test.modalities).shape == (400, 4)


def test_collator_with_two_banks_and_per_bank_labels():
    from icml_modality_pairing.pairing import PairingError, StochasticPairingCollator

    ya, yb = torch.tensor([0, 0, 1, 1]), torch.tensor([1, 0, 1, 0, 0])
    coll = StochasticPairingCollator({"b": torch.arange(4.0)[:, None],
                                      "c": torch.arange(5.0)[:, None]},
                                     {"b": ya, "c": yb}, seed=0)
    feats = [{"a": torch.zeros(2), "labels": torch.tensor(c)} for c in (0, 1, 1, 0)]
    out = coll(feats)
    assert torch.equal(ya[out["b"].long().squeeze(1)], out["labels"])
    assert torch.equal(yb[out["c"].long().squeeze(1)], out["labels"])
    with pytest.raises(PairingError, match="no labels for banks"):
        StochasticPairingCollator({"b": torch.zeros(4, 1)}, {"c": ya})
