"""Group GRPO and the structural-proximity advantage: closed forms and limits."""

import math

import pytest
import torch
from icml_dr_mmsearch.advantages import (
    Structure,
    group_advantages,
    levenshtein,
    proximity_baseline,
    structural_proximity_advantages,
    structure_distances,
)


def _batch(seed=0, n=12):
    g = torch.Generator().manual_seed(seed)
    r = torch.rand(n, generator=g, dtype=torch.float64)
    tools = ["A", "IA", "ITA", "ITTA", "TA", "TTA"]
    s = [Structure(len(tools[i % 6]), tools[i % 6], 3 + (i * 7) % 11) for i in range(n)]
    return r, s


def test_levenshtein():
    assert levenshtein("ITTA", "ITTA") == 0
    assert levenshtein("A", "ITTA") == 3
    assert levenshtein("ITA", "TTA") == 1
    assert levenshtein("", "IT") == 2


def test_group_advantages_are_centred_and_scaled():
    r = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.2, 0.2, 0.9, 0.1])
    a = group_advantages(r, group_size=4)
    for k in (0, 4):
        assert abs(float(a[k:k + 4].sum())) < 1e-12
        assert float(a[k:k + 4].std()) == pytest.approx(1.0, abs=1e-5)
    assert torch.equal(group_advantages([0.3, 0.3, 0.3], group_size=3),
                       torch.zeros(3, dtype=torch.float64))


def test_all_equal_rewards_give_zero():
    _, s = _batch()
    a = structural_proximity_advantages([0.7] * 12, s, group_size=4, kappa=0.0)
    assert float(a.abs().max()) < 1e-8


def test_identical_structures_give_leave_one_out_mean():
    r, _ = _batch()
    s = [Structure(3, "ITA", 5)] * 12
    b, _ = proximity_baseline(r, s, tau=0.5)
    loo = (r.sum() - r) / (len(r) - 1)
    assert torch.allclose(b, loo, atol=1e-12)


def test_tau_limits():
    r, s = _batch()
    loo = (r.sum() - r) / (len(r) - 1)
    b_inf, _ = proximity_baseline(r, s, tau=math.inf)
    assert torch.allclose(b_inf, loo, atol=1e-12)
    assert torch.allclose(proximity_baseline(r, s, tau=1e6)[0], loo, atol=1e-5)
    d = structure_distances(s)
    nearest = torch.empty_like(r)
    for i in range(len(r)):
        di = d[i].clone()
        di[i] = float("inf")
        idx = (di <= di.min() + 1e-12).nonzero().flatten()
        nearest[i] = r[idx].mean()
    assert torch.allclose(proximity_baseline(r, s, tau=0.0)[0], nearest, atol=1e-12)
    assert torch.allclose(proximity_baseline(r, s, tau=1e-4)[0], nearest, atol=1e-6)


def test_permutation_equivariant():
    r, s = _batch(seed=3)
    groups = [i // 4 for i in range(12)]
    a = structural_proximity_advantages(r, s, group_ids=groups, kappa=0.2, length_weight=0.5)
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(1)).tolist()
    ap = structural_proximity_advantages(r[perm], [s[i] for i in perm],
                                         group_ids=[groups[i] for i in perm], kappa=0.2,
                                         length_weight=0.5)
    assert torch.allclose(ap, a[perm], atol=1e-12)


def test_eta_zero_is_group_grpo_and_proximity_separates_equal_rewards():
    r, s = _batch()
    assert torch.allclose(structural_proximity_advantages(r, s, group_size=4, eta=0.0),
                          group_advantages(r, group_size=4))
    # two correct answers of different depth in one group get the same group advantage but
    # different proximity advantages, because their structural neighbourhoods differ
    rew = [1.0, 1.0, 0.1, 0.1, 1.0, 0.1, 1.0, 0.1]
    st = [Structure(1, "A"), Structure(4, "ITTA"), Structure(1, "A"), Structure(1, "A"),
          Structure(4, "ITTA"), Structure(4, "ITTA"), Structure(1, "A"), Structure(1, "A")]
    g = group_advantages(rew, group_size=4)
    p = structural_proximity_advantages(rew, st, group_size=4)
    assert float(g[0]) == pytest.approx(float(g[1]))
    assert abs(float(p[0] - p[1])) > 0.1


def test_bad_input():
    with pytest.raises(ValueError, match="structures"):
        proximity_baseline([1.0, 0.0], [Structure(1, "A")])
    with pytest.raises(ValueError, match="tau"):
        proximity_baseline([1.0, 0.0], [Structure(1, "A")] * 2, tau=-1)
    with pytest.raises(ValueError, match="nan"):
        group_advantages([1.0, float("nan")])
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages([1.0, 0.0], group_size=3)
