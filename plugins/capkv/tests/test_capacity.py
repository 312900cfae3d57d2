"""Identities of the information-capacity objective, the leverage score and the greedy selector."""

import itertools
import math

import pytest
import torch
from icml_capkv import greedy_logdet_select, information_capacity, logdet_drop, ridge_leverage


def _uw(seed: int, T: int = 12, d: int = 4, lead: tuple = ()):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(*lead, T, d, generator=g, dtype=torch.float64)
    w = torch.rand(*lead, T, generator=g, dtype=torch.float64) + 0.1
    return u, w


@pytest.mark.parametrize("ridge", [0.3, 1.0, 4.0])
def test_scores_in_unit_interval_and_trace_identity(ridge: float) -> None:
    u, w = _uw(0, T=20, d=6, lead=(2, 3))
    s = ridge_leverage(u, w, ridge)
    assert s.shape == (2, 3, 20)
    assert bool((s >= 0).all()) and bool((s < 1).all())
    A = ridge * torch.eye(6, dtype=torch.float64) + torch.einsum("...t,...ti,...tj->...ij", w, u, u)
    expected = 6 - ridge * torch.linalg.inv(A).diagonal(dim1=-2, dim2=-1).sum(-1)
    torch.testing.assert_close(s.sum(-1), expected, rtol=1e-10, atol=1e-10)


def test_leverage_by_hand_on_a_three_by_two_matrix() -> None:
    """K = [[1,0],[1,1],[0,2]], lambda = 1: K^T K + I = [[3,1],[1,6]], det 17, inverse
    [[6,-1],[-1,3]] / 17, so h_i = k_i^T (K^T K + I)^-1 k_i = 6/17, 7/17, 12/17."""
    K = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]], dtype=torch.float64)
    expected = torch.tensor([6.0, 7.0, 12.0], dtype=torch.float64) / 17
    torch.testing.assert_close(ridge_leverage(K), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ridge_leverage(K.float()), expected.float())


def test_minus_log_one_minus_score_is_logdet_drop() -> None:
    u, w = _uw(1, T=10, d=4)
    s = ridge_leverage(u, w, 0.7)
    torch.testing.assert_close(-torch.log1p(-s), logdet_drop(u, w, 0.7), rtol=1e-9, atol=1e-12)


def test_rotation_invariance() -> None:
    u, w = _uw(2, T=15, d=5)
    Q, _ = torch.linalg.qr(torch.randn(5, 5, generator=torch.Generator().manual_seed(3),
                                       dtype=torch.float64))
    torch.testing.assert_close(ridge_leverage(u @ Q.T, w), ridge_leverage(u, w))
    keep = torch.tensor([0, 3, 7, 9])
    torch.testing.assert_close(information_capacity(u @ Q.T, w, keep),
                               information_capacity(u, w, keep))


def test_duplicated_token_loses_score() -> None:
    u, w = _uw(4, T=8, d=6)
    s = ridge_leverage(u, w)
    u2 = torch.cat([u, u[2:3]])
    w2 = torch.cat([w, w[2:3]])
    s2 = ridge_leverage(u2, w2)
    assert s2[2] < s[2] - 1e-3 and s2[8] < s[2] - 1e-3
    torch.testing.assert_close(s2[2], s2[8])


def test_tau_zero_is_plain_ridge_leverage() -> None:
    u, _ = _uw(5)
    H = u @ torch.linalg.inv(u.T @ u + torch.eye(4, dtype=torch.float64)) @ u.T
    torch.testing.assert_close(ridge_leverage(u, None), H.diagonal())


def test_information_capacity_closed_form_and_monotone() -> None:
    u, w = _uw(6, T=9, d=3)
    keep = torch.tensor([1, 4, 5])
    M = torch.eye(3, dtype=torch.float64) + (w[keep, None] * u[keep]).T @ u[keep] / 2.0
    torch.testing.assert_close(information_capacity(u, w, keep, ridge=2.0),
                               0.5 * torch.logdet(M))
    assert information_capacity(u, w, torch.tensor([1, 4, 5, 7])) > information_capacity(u, w,
                                                                                         keep)
    assert float(information_capacity(u, w, torch.tensor([], dtype=torch.long))) == 0.0


@pytest.mark.parametrize("seed", range(4))
def test_greedy_within_one_minus_inv_e_of_brute_force(seed: int) -> None:
    u, w = _uw(10 + seed, T=10, d=3)
    for budget in (2, 3, 4):
        best = max(float(information_capacity(u, w, torch.tensor(c)))
                   for c in itertools.combinations(range(10), budget))
        greedy = float(information_capacity(u, w, greedy_logdet_select(u, w, budget)))
        assert greedy >= (1 - 1 / math.e) * best - 1e-12
        assert greedy <= best + 1e-12


def test_greedy_first_pick_is_top_leverage_and_forced_kept() -> None:
    u, w = _uw(20, T=12, d=4)
    # First greedy step on an empty set maximises w u^T u / ridge = the leverage against I.
    first = greedy_logdet_select(u, w, 1)
    assert int(first) == int((w * (u * u).sum(-1)).argmax())
    forced = torch.zeros(12, dtype=torch.bool)
    forced[:3] = True
    idx = greedy_logdet_select(u, w, 6, forced=forced)
    assert idx[:3].tolist() == [0, 1, 2] and idx.shape == (6,)
    assert idx.tolist() == sorted(set(idx.tolist()))


def test_greedy_batched_matches_unbatched() -> None:
    u, w = _uw(21, T=11, d=3, lead=(2, 2))
    idx = greedy_logdet_select(u, w, 5)
    for a in range(2):
        for b in range(2):
            assert idx[a, b].tolist() == greedy_logdet_select(u[a, b], w[a, b], 5).tolist()


def test_bad_inputs_are_refused() -> None:
    u, w = _uw(7)
    with pytest.raises(ValueError, match="ridge must be > 0"):
        ridge_leverage(u, w, 0.0)
    with pytest.raises(ValueError, match="w must have shape"):
        ridge_leverage(u, w[:-1])
    with pytest.raises(ValueError, match="non-negative"):
        ridge_leverage(u, -w)
    with pytest.raises(ValueError, match="budget must be in"):
        greedy_logdet_select(u, w, 13)
    forced = torch.ones(12, dtype=torch.bool)
    with pytest.raises(ValueError, match="sink"):
        greedy_logdet_select(u, w, 3, forced=forced)
    with pytest.raises(ValueError, match="outside"):
        information_capacity(u, w, torch.tensor([0, 12]))
