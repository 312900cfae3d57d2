"""Stochastic modality pairing: same-class partners, identity at p=0, uniform partners,
determinism, more than two modalities, and clear errors on bad input."""

from __future__ import annotations

import warnings

import pytest
import torch
from icml_modality_pairing.pairing import (
    PairingError,
    PairingIndex,
    SingletonClassWarning,
    StochasticPairingCollator,
    StochasticPairingDataset,
    all_pair_weights,
    pair_indices,
)


def _labels(n=60, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, k, (n,), generator=g)


def chi2_pvalue(counts: torch.Tensor) -> float:
    """Upper tail of Pearson's chi-square statistic against a uniform distribution."""
    counts = counts.double()
    expected = counts.sum() / counts.numel()
    stat = ((counts - expected) ** 2 / expected).sum()
    dof = counts.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0), stat / 2))


def test_partners_share_the_class():
    y = _labels()
    idx = PairingIndex(y)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        j = pair_indices(idx, y, torch.arange(60), p_stochastic=0.7, generator=g)
        assert torch.equal(y[j], y)


def test_p_zero_is_the_identity_pairing():
    y = _labels()
    fixed = torch.arange(60)
    j = pair_indices(PairingIndex(y), y, fixed, p_stochastic=0.0,
                     generator=torch.Generator().manual_seed(3))
    assert torch.equal(j, fixed)
    xa, xb = torch.randn(60, 2), torch.randn(60, 5)
    ds = StochasticPairingDataset({"a": xa, "b": xb}, y, p_stochastic=0.0)
    for i in range(60):
        assert torch.equal(ds[i]["b"], xb[i])


def test_partner_counts_are_uniform_within_each_class():
    y = _labels(n=40, k=3)
    idx = PairingIndex(y)
    g = torch.Generator().manual_seed(5)
    draws = torch.stack([pair_indices(idx, y, p_stochastic=1.0, generator=g)
                         for _ in range(3000)])
    for cls in range(3):
        members = idx.members(cls)
        anchor = int(members[0])
        counts = torch.bincount(draws[:, anchor], minlength=40)[members]
        assert counts.sum() == 3000
        assert chi2_pvalue(counts) > 1e-3, counts


def test_a_sampler_that_always_keeps_the_first_member_fails_the_chi_square():
    # the check above can fail: a biased draw is caught
    counts = torch.tensor([3000 // 10 * 2] + [3000 // 10 * 8 // 9] * 9)
    assert chi2_pvalue(counts) < 1e-6


def test_mixing_probability_controls_the_fixed_fraction():
    y = torch.arange(400) % 4          # 100 per class
    g = torch.Generator().manual_seed(0)
    p = 0.3
    j = torch.stack([pair_indices(PairingIndex(y), y, torch.arange(400), p_stochastic=p,
                                  generator=g) for _ in range(50)])
    kept = float((j == torch.arange(400)).double().mean())
    expected = (1 - p) + p / 100
    assert abs(kept - expected) < 0.02


def test_dataset_is_deterministic_under_a_seed_and_resamples_every_access():
    y = _labels()
    mods = {"a": torch.randn(60, 2), "b": torch.arange(60).float()[:, None]}
    ds1 = StochasticPairingDataset(mods, y, seed=7)
    ds2 = StochasticPairingDataset(mods, y, seed=7)
    seq1 = [int(ds1[i % 60]["b"]) for i in range(300)]
    seq2 = [int(ds2[i % 60]["b"]) for i in range(300)]
    assert seq1 == seq2
    other = StochasticPairingDataset(mods, y, seed=8)
    assert [int(other[i % 60]["b"]) for i in range(300)] != seq1
    assert len({seq1[k] for k in range(0, 300, 60)}) > 1      # sample 0 gets new partners
    ds1.set_epoch(0)
    assert [int(ds1[i % 60]["b"]) for i in range(300)] == seq1


def test_three_modalities_draw_independent_same_class_partners():
    y = torch.arange(90) % 3
    ids = torch.arange(90).float()[:, None]
    ds = StochasticPairingDataset({"v": ids, "a": ids.clone(), "t": ids.clone()}, y, seed=1)
    same_partner = 0
    for i in range(90):
        item = ds[i]
        assert torch.equal(item["v"], ids[i])
        for m in ("a", "t"):
            assert int(y[int(item[m])]) == int(y[i])
        same_partner += int(item["a"]) == int(item["t"])
    assert same_partner < 15    # independent draws: ~1/30 coincide


def test_dataloader_and_collator_batches():
    y = _labels(n=40, k=2)
    xa, xb = torch.randn(40, 3), torch.arange(40).float()[:, None]
    ds = StochasticPairingDataset({"a": xa, "b": xb}, y, seed=0)
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=8)))
    assert batch["a"].shape == (8, 3) and batch["b"].shape == (8, 1)
    coll = StochasticPairingCollator({"b": xb}, y, seed=0)
    feats = [{"a": xa[i], "labels": y[i]} for i in range(10)]
    out1, out2 = coll(feats), coll(feats)
    assert out1["a"].shape == (10, 3)
    assert torch.equal(y[out1["b"].long().squeeze(1)], y[:10])
    assert not torch.equal(out1["b"], out2["b"])        # resampled every call
    again = StochasticPairingCollator({"b": xb}, y, seed=0)
    assert torch.equal(again(feats)["b"], out1["b"])   # reproducible under the seed


def test_collator_p_zero_keeps_the_features_own_partner():
    y = _labels(n=20, k=2)
    xb = torch.arange(20).float()[:, None]
    coll = StochasticPairingCollator({"b": xb}, y, p_stochastic=0.0)
    feats = [{"a": torch.zeros(2), "b": torch.tensor([-float(i)]), "labels": y[i]}
             for i in range(5)]
    assert torch.equal(coll(feats)["b"].squeeze(1), -torch.arange(5).float())
    coll_idx = StochasticPairingCollator({"b": xb}, y, p_stochastic=0.0, bank_index_key="index")
    feats = [{"a": torch.zeros(2), "index": i, "labels": y[i]} for i in range(5)]
    assert torch.equal(coll_idx(feats)["b"].squeeze(1), torch.arange(5).float())


def test_all_pair_weights_rows_are_class_uniform():
    y = torch.tensor([0, 0, 1, 1, 1, 2, 2])
    W = all_pair_weights(y, PairingIndex(y))
    assert torch.allclose(W.sum(1), torch.ones(7, dtype=W.dtype))
    assert W[2, 3] == pytest.approx(1 / 3) and W[0, 2] == 0


def test_hf_trainer_runs_with_the_dataset():
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 2)

        def forward(self, a, b, labels=None):
            logits = self.lin(torch.cat([a, b], -1))
            loss = torch.nn.functional.cross_entropy(logits, labels)
            return {"loss": loss, "logits": logits}

    y = torch.arange(32) % 2
    ds = StochasticPairingDataset({"a": torch.randn(32, 2), "b": torch.randn(32, 2)}, y)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        args = transformers.TrainingArguments(output_dir=d, per_device_train_batch_size=8,
                                              max_steps=3, report_to=[], use_cpu=True,
                                              save_strategy="no", logging_strategy="no",
                                              dataloader_num_workers=0)
        trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=ds)
        out = trainer.train()
        assert out.global_step == 3
        # the collator route: an anchor-only dataset, partners from a bank at every step
        seen = []
        coll = StochasticPairingCollator({"b": torch.randn(32, 2)}, y, seed=0)

        def spy(features):
            batch = coll(features)
            seen.append(batch)
            return batch

        anchors = [{"a": torch.randn(2), "labels": y[i]} for i in range(32)]
        trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=anchors,
                                       data_collator=spy)
        assert trainer.train().global_step == 3
    assert len(seen) >= 3 and all(b["b"].shape == (8, 2) for b in seen)


# --- bad input ----------------------------------------------------------------------------

@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan"), "x"])
def test_probability_outside_unit_interval_is_rejected(p):
    y = _labels()
    with pytest.raises(PairingError, match=r"p_stochastic"):
        StochasticPairingDataset({"a": torch.randn(60, 1), "b": torch.randn(60, 1)}, y,
                                 p_stochastic=p)
    with pytest.raises(PairingError, match=r"p_stochastic"):
        StochasticPairingCollator({"b": torch.randn(60, 1)}, y, p_stochastic=p)


def test_class_missing_from_the_other_modality_is_named():
    bank_y = torch.tensor([0, 0, 1, 1])
    coll = StochasticPairingCollator({"b": torch.randn(4, 2)}, bank_y)
    feats = [{"a": torch.zeros(1), "labels": torch.tensor(c)} for c in (0, 2, 5)]
    with pytest.raises(PairingError, match=r"classes \[2, 5\] occur in batch labels but not"):
        coll(feats)


def test_singleton_classes_warn_or_raise():
    y = torch.tensor([0, 0, 1, 2, 2])
    with pytest.warns(SingletonClassWarning, match=r"classes \[1\] have a single sample"):
        PairingIndex(y)
    with pytest.raises(PairingError, match="single sample"):
        PairingIndex(y, singleton="error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        idx = PairingIndex(y, singleton="ignore")
    assert idx.singletons == [1]
    j = pair_indices(idx, y, p_stochastic=1.0, generator=torch.Generator().manual_seed(0))
    assert int(j[2]) == 2    # documented: a singleton's partner is itself


def test_shape_and_dtype_errors():
    with pytest.raises(PairingError, match="one row per sample"):
        StochasticPairingDataset({"a": torch.randn(5, 1), "b": torch.randn(4, 1)},
                                 torch.zeros(5, dtype=torch.long))
    with pytest.raises(PairingError, match="integer class ids"):
        PairingIndex(torch.tensor([0.0, 1.0]))
    with pytest.raises(PairingError, match="empty"):
        PairingIndex(torch.tensor([], dtype=torch.long))
    with pytest.raises(PairingError, match="anchor"):
        StochasticPairingDataset({"a": torch.randn(2, 1)}, torch.tensor([0, 0]), anchor="z")
    with pytest.raises(PairingError, match="fixed partner"):
        coll = StochasticPairingCollator({"b": torch.randn(4, 1)}, torch.tensor([0, 0, 1, 1]),
                                         p_stochastic=0.5)
        coll([{"a": torch.zeros(1), "labels": torch.tensor(0)}])
