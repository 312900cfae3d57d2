"""Split/merge, aggregation weights, SVD re-factorisation: exact identities."""

import pytest
import torch
from icml_het_cpflora import (
    ClientRankSpec,
    LoRAFactors,
    aggregate_shared,
    aggregation_weights,
    merge_lora,
    shared_product,
    split_lora,
    svd_refactor,
)


def _adapter(spec, out_f=12, in_f=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {m: LoRAFactors(torch.randn(spec.rank, in_f, generator=g, dtype=torch.float64),
                           torch.randn(out_f, spec.rank, generator=g, dtype=torch.float64))
            for m in ("l0.q_proj", "l0.v_proj")}


@pytest.mark.parametrize("rs,rp", [(3, 2), (1, 4), (5, 0), (0, 3)])
def test_split_merge_round_trip_and_product_identity(rs, rp):
    spec = ClientRankSpec(rs, rp)
    ad = _adapter(spec)
    sp = split_lora(ad, spec)
    back = merge_lora(sp.shared, sp.personal)
    for m, f in ad.items():
        assert torch.equal(back[m].A, f.A) and torch.equal(back[m].B, f.B)
        assert sp.shared[m].A.shape == (rs, 10) and sp.personal[m].B.shape == (12, rp)
        torch.testing.assert_close(f.product(),
                                   sp.shared[m].product() + sp.personal[m].product())


def test_weights_sum_to_one_and_follow_r_shared():
    w = aggregation_weights([7, 36, 12, 0, 8])
    assert sum(w) == pytest.approx(1.0)
    assert w[3] == 0.0
    assert w[1] / w[0] == pytest.approx(36 / 7)
    w = aggregation_weights([2, 2], [10, 30], by="num_samples")
    assert w == pytest.approx([0.25, 0.75])


def test_identical_shared_parts_survive_aggregation_and_svd():
    specs = [ClientRankSpec(3, 1), ClientRankSpec(3, 4), ClientRankSpec(3, 2)]
    shared = split_lora(_adapter(specs[0], seed=1), specs[0]).shared
    prods = [shared_product(shared) for _ in specs]
    delta = aggregate_shared(prods, aggregation_weights([s.r_shared for s in specs]))
    for m in shared:
        ref = svd_refactor(delta[m], 3)
        torch.testing.assert_close(ref.factors.product(), shared[m].product())
        assert ref.error < 1e-10


def test_eckart_young_error():
    g = torch.Generator().manual_seed(3)
    M = torch.randn(9, 7, generator=g, dtype=torch.float64)
    S = torch.linalg.svdvals(M)
    for r in range(0, 8):
        ref = svd_refactor(M, r)
        err = torch.linalg.norm(M - ref.factors.product())
        assert float(err) == pytest.approx(ref.error, rel=1e-9, abs=1e-12)
        assert ref.error == pytest.approx(float(torch.sqrt((S[r:] ** 2).sum())), abs=1e-12)
        # best rank-r: beats a random rank-r factorisation of the same matrix
        if 0 < r < 7:
            Q = torch.linalg.qr(torch.randn(7, r, generator=g, dtype=torch.float64))[0]
            assert ref.error <= float(torch.linalg.norm(M - M @ Q @ Q.T)) + 1e-12
        # A = V^T has orthonormal rows
        torch.testing.assert_close(ref.factors.A @ ref.factors.A.T,
                                   torch.eye(r, dtype=torch.float64))


def test_alpha_over_r_scaling_is_the_peft_factor():
    spec = ClientRankSpec(2, 2)
    sh = split_lora(_adapter(spec), spec).shared
    raw = shared_product(sh)
    scaled = shared_product(sh, scaling="alpha_over_r", alpha=16, rank=4)
    for m in raw:
        torch.testing.assert_close(scaled[m], raw[m] * 4.0)


@pytest.mark.parametrize("bad", [(-1, 2), (2, -1), (0, 0)])
def test_bad_rank_specs(bad):
    with pytest.raises(ValueError, match="ClientRankSpec"):
        ClientRankSpec(*bad)


def test_rank_exceeding_module_and_mismatched_modules():
    with pytest.raises(ValueError, match="exceeds the target module"):
        ClientRankSpec(6, 6).check_dims(8, 10, "q_proj")
    a = {"q": torch.zeros(2, 2)}
    b = {"v": torch.zeros(2, 2)}
    with pytest.raises(ValueError, match="different target modules"):
        aggregate_shared([a, b], [0.5, 0.5])
    with pytest.raises(ValueError, match="rank"):
        split_lora(_adapter(ClientRankSpec(2, 2)), ClientRankSpec(2, 1))
