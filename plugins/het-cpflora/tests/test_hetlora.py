"""HetLoRA's sparsity-weighted aggregation and rank self-pruning, in closed form and in a run."""

import pytest
import torch
from icml_het_cpflora import (
    ClientDataset,
    ClientRankSpec,
    FederationConfig,
    HetLoRA,
    read_adapter,
    simulate,
)
from icml_het_cpflora.strategies import live_rank
from icml_het_cpflora.subspace import LoRAFactors
from icml_het_cpflora.task import synthetic_clients

from icml.models import byte_tokenizer, tiny_causal_lm


def _adapter(r, seed, out=6, inp=5, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return {"m": LoRAFactors(torch.randn(r, inp, generator=g),
                             scale * torch.randn(out, r, generator=g))}


def test_sparsity_weights_are_normalised_frobenius_norms_of_BA():
    strat = HetLoRA(prune=False)
    ads = {0: _adapter(2, 0), 1: _adapter(4, 1, scale=3.0)}
    specs = {0: ClientRankSpec(2), 1: ClientRankSpec(4)}
    ups = {i: strat.upload(a, specs[i]) for i, a in ads.items()}
    down = strat.aggregate(ups, specs, {0: 10, 1: 10})
    n = [float((a["m"].B @ a["m"].A).norm()) for a in ads.values()]
    w = [x / sum(n) for x in n]
    assert w[1] > w[0] and sum(w) == pytest.approx(1.0)
    padA = [torch.cat([a["m"].A, torch.zeros(4 - a["m"].A.shape[0], 5)]) for a in ads.values()]
    padB = [torch.cat([a["m"].B, torch.zeros(6, 4 - a["m"].B.shape[1])], 1)
            for a in ads.values()]
    A = w[0] * padA[0] + w[1] * padA[1]
    B = w[0] * padB[0] + w[1] * padB[1]
    torch.testing.assert_close(down[1]["m|A"], A)
    torch.testing.assert_close(down[0]["m|A"], A[:2])   # truncated to client 0's rank
    torch.testing.assert_close(down[0]["m|B"], B[:, :2])
    # sample weighting is the other option, and differs here
    other = HetLoRA(weighting="num_samples", prune=False).aggregate(ups, specs, {0: 10, 1: 10})
    torch.testing.assert_close(other[1]["m|A"], 0.5 * padA[0] + 0.5 * padA[1])
    # all-zero products (e.g. before any training, B = 0) fall back to equal weights
    zero = {i: {k: (v * 0 if k.endswith("|B") else v) for k, v in u.items()}
            for i, u in ups.items()}
    out = strat.aggregate(zero, specs, {0: 1, 1: 3})
    torch.testing.assert_close(out[1]["m|A"], 0.5 * padA[0] + 0.5 * padA[1])


def test_pruning_drops_the_last_rank_when_the_tail_norm_shrinks_and_never_below_one():
    strat = HetLoRA(prune=True, gamma=0.5)
    spec = {0: ClientRankSpec(4), 1: ClientRankSpec(1)}
    a0, a1 = _adapter(4, 0), _adapter(1, 1)
    ups = {0: strat.upload(a0, spec[0]), 1: strat.upload(a1, spec[1])}
    strat.aggregate(ups, spec, {0: 1, 1: 1})
    assert strat.live == {0: 4, 1: 1}          # first round: nothing to compare with
    grown = {0: {k: v * 2 for k, v in ups[0].items()}, 1: ups[1]}
    strat.aggregate(grown, spec, {0: 1, 1: 1})
    assert strat.live[0] == 4                  # tail grew: keep the rank
    shrunk = {0: {k: v * 0.5 for k, v in ups[0].items()},
              1: {k: v * 0.5 for k, v in ups[1].items()}}
    down = strat.aggregate(shrunk, spec, {0: 1, 1: 1})
    assert strat.live == {0: 2, 1: 1}          # floor(0.5 * 4) = 2; rank 1 stays
    assert down[0]["m|A"].shape[0] == 2
    new = strat.download(a0, down[0], spec[0])
    assert new["m"].A.shape == a0["m"].A.shape  # peft's adapter keeps its size ...
    assert not new["m"].A[2:].any() and not new["m"].B[:, 2:].any()  # ... pruned part zero
    assert live_rank(new) == 2
    assert strat.upload(new, spec[0])["m|A"].shape[0] == 2   # and it no longer travels


def test_regularizer_acts_on_the_tail_components_only():
    strat = HetLoRA(prune=True, gamma=0.5, reg=1.0)
    ad = _adapter(4, 3)
    A, B = ad["m"].A.clone().requires_grad_(), ad["m"].B.clone().requires_grad_()
    loss = strat.regularizer(ClientRankSpec(4))({"m": (A, B)})
    loss.backward()
    tail = float((ad["m"].B[:, 2:] @ ad["m"].A[2:]).norm())
    assert float(loss.detach()) == pytest.approx(tail)
    assert not A.grad[:2].any() and A.grad[2:].abs().sum() > 0
    assert HetLoRA(prune=False).regularizer(ClientRankSpec(4)) is None
    with pytest.raises(ValueError, match="gamma"):
        HetLoRA(gamma=1.0)
    with pytest.raises(ValueError, match="weighting"):
        HetLoRA(weighting="r_shared")


def test_pruned_components_stay_zero_through_local_training():
    specs = [ClientRankSpec(4, 0), ClientRankSpec(3, 0), ClientRankSpec(2, 0)]
    strat = HetLoRA(prune=True, gamma=0.5, reg=1.0)
    strat.prev_tail = {0: float("inf"), 1: float("inf"), 2: float("inf")}  # prune at once
    train, _ = synthetic_clients(byte_tokenizer(), 3, seed=0, train_size=16, test_size=1)
    data = [ClientDataset(d.input_ids, d.labels) for d in train]
    model = tiny_causal_lm("llama", hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2)
    res = simulate(model, data, specs, strat,
                   FederationConfig(rounds=2, local_steps=3, lr=1e-2, batch_size=8))
    assert res.bytes_up[1][0] < res.bytes_up[0][0]      # fewer components travel
    for i, spec in enumerate(specs):
        ad = read_adapter(res.model, res.adapter(i))
        r = live_rank(ad)
        assert r < spec.rank and r == strat.live[i]
        for f in ad.values():
            assert not f.A[r:].any() and not f.B[:, r:].any()
