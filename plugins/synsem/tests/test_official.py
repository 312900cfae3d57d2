"""The official code's choices, offered as options, checked against values computed by hand on
fixed arrays: the permuted control, the split-half Information Imbalance, rectangular ranks,
row-wise cosine, the centering modes and the bootstrap intervals."""

import numpy as np
import pytest
import torch
from icml_synsem import (
    center_sets,
    information_imbalance,
    official_imbalance,
    permuted_ablation,
    rank_matrix,
    rowwise_cosine,
    split_half,
)

X = torch.tensor([[2.0, 0.0], [0.0, 3.0], [1.0, 1.0]], dtype=torch.float64)
C = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
PERM = [1, 2, 0]


def test_official_permuted_control_by_hand():
    # row j minus row perm[j]'s projection on c[perm[j]]:
    # j=0: x1.c1 / |c1|^2 = 3 -> [2, 0] - 3 [0, 1]; j=1: x2.c2 / 2 = 1 -> [0, 3] - [1, 1];
    # j=2: x0.c0 = 2 -> [1, 1] - 2 [1, 0]
    got = permuted_ablation(X, C, PERM, "projection", control="official")
    want = torch.tensor([[2.0, -3.0], [-1.0, 2.0], [-1.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_our_permuted_control_by_hand():
    # row j minus its own projection on c[perm[j]]: j=0: x0.c1 = 0 -> unchanged;
    # j=1: x1.c2 / 2 = 1.5 -> [0, 3] - [1.5, 1.5]; j=2: x2.c0 = 1 -> [1, 1] - [1, 0]
    got = permuted_ablation(X, C, PERM, "projection", control="centroid")
    want = torch.tensor([[2.0, 0.0], [-1.5, 1.5], [0.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_controls_agree_for_subtraction_and_check_input():
    for control in ("centroid", "official"):
        torch.testing.assert_close(permuted_ablation(X, C, PERM, "subtract", control),
                                   X - C[PERM])
    with pytest.raises(ValueError, match="control must be one of"):
        permuted_ablation(X, C, PERM, "projection", control="random")
    with pytest.raises(ValueError, match="one index per row"):
        permuted_ablation(X, C, [0, 1], "projection", "centroid")


def test_official_imbalance_by_hand():
    # 1-D points; rows {0, 1}, columns {2, 3, 4, 5} (M = 4), Euclidean distances.
    a = np.array([[0.0], [1.0], [3.0], [6.0], [10.0], [15.0]])
    b = np.array([[0.0], [4.0], [5.0], [1.0], [30.0], [2.0]])
    # a: row 0 -> [3, 6, 10, 15], row 1 -> [2, 5, 9, 14]: ranks [1, 2, 3, 4] for both rows
    # b: row 0 -> [5, 1, 30, 2]: ranks [3, 1, 4, 2]; row 1 -> [1, 3, 26, 2]: ranks [1, 3, 4, 2]
    # a -> b: nearest in a is column 0 for both rows: b ranks 3, 1 -> mean(rank - 1) = 1
    #         Delta = 2 * 1 / (M - 2) = 1.0
    # b -> a: row 0's nearest in b is column 1 (a rank 2), row 1's is column 0 (a rank 1)
    #         mean(rank - 1) = 0.5 -> Delta = 0.5
    ab, ba = official_imbalance(a, b, rows=[0, 1], cols=[2, 3, 4, 5], k=1, metric="l2")
    assert (ab, ba) == pytest.approx((1.0, 0.5), abs=1e-12)


def test_all_pairs_imbalance_by_hand_with_ties():
    a = np.array([[0.0], [1.0], [3.0], [7.0]])
    b = np.array([[0.0], [5.0], [1.0], [2.0]])
    # a's nearest neighbours: 0->1, 1->0, 2->1, 3->2; their ranks in b: 3, 3, 3, 1
    # Delta(a -> b) = 2 / (N - 2) * mean(rank - 1) = 2 / 2 * 1.5 = 1.5
    # b's nearest: 0->2, 1->3, 2->{0, 3} (tie, both count), 3->2; ranks in a: 2, 3, 2, 3, 1
    # Delta(b -> a) = 1 * mean(1, 2, 1, 2, 0) = 1.2
    ab, ba = information_imbalance(a, b, k=1, metric="l2")
    assert (ab, ba) == pytest.approx((1.5, 1.2), abs=1e-12)


def test_estimators_expectation_for_independent_spaces():
    """Independent spaces: the all-pairs estimator averages 1, the official one
    (M - 1) / (M - 2) with M = N - N // 2 column points (here N = 12: 5/4)."""
    rng = np.random.default_rng(0)
    ours, official = [], []
    for seed in range(300):
        a, b = rng.normal(size=(12, 3)), rng.normal(size=(12, 3))
        ours.append(information_imbalance(a, b)[0])
        official.append(information_imbalance(a, b, estimator="official", seed=seed)[0])
    assert np.mean(ours) == pytest.approx(1.0, abs=0.06)
    assert np.mean(official) == pytest.approx(1.25, abs=0.08)
    with pytest.raises(ValueError, match="estimator"):
        information_imbalance(a, b, estimator="dadapy")


def test_split_half_is_a_disjoint_cover():
    rows, cols = split_half(11, seed=3)
    assert len(rows) == 5 and len(cols) == 6
    assert sorted(np.concatenate([rows, cols]).tolist()) == list(range(11))
    assert (split_half(11, seed=3)[0] == rows).all()


def test_rank_matrix_rectangular_and_square():
    d = np.array([[3.0, 1.0, 1.0], [0.0, 5.0, 2.0]])
    assert rank_matrix(d).tolist() == [[3, 1, 1], [1, 3, 2]]
    sq = np.array([[0.0, 2.0, 1.0], [2.0, 0.0, 5.0], [1.0, 5.0, 0.0]])
    assert rank_matrix(sq).tolist() == [[0, 2, 1], [1, 0, 2], [1, 2, 0]]
    assert rank_matrix(sq, exclude_diagonal=False).tolist() == [[1, 3, 2], [2, 1, 3],
                                                                 [2, 3, 1]]
    with pytest.raises(ValueError, match="square"):
        rank_matrix(d, exclude_diagonal=True)


def test_rowwise_cosine_by_hand():
    a = [[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [3.0, 4.0]]
    b = [[0.0, 1.0], [2.0, 2.0], [1.0, 0.0], [4.0, 3.0]]
    got = rowwise_cosine(a, b)
    torch.testing.assert_close(got, torch.tensor([0.0, 1.0, 0.0, 24 / 25], dtype=torch.float64))
    with pytest.raises(ValueError, match="same shape"):
        rowwise_cosine(a, b[:2])


def test_centering_modes_by_hand():
    x = torch.tensor([[1.0, 0.0], [3.0, 2.0]])  # mean [2, 1]
    tw = torch.tensor([[0.0, 0.0], [0.0, 4.0]])  # mean [0, 2]
    pa = torch.tensor([[5.0, 5.0], [7.0, 5.0]])  # mean [6, 5]
    tr = [torch.tensor([[2.0, 2.0], [4.0, 2.0]])]  # mean [3, 2]
    xo, two, pao, tro = center_sets(x, tw, pa, tr, "official")
    torch.testing.assert_close(xo, x - torch.tensor([2.0, 1.0]))
    torch.testing.assert_close(two, tw - torch.tensor([0.0, 2.0]))
    torch.testing.assert_close(pao, pa - torch.tensor([6.0, 5.0]))
    torch.testing.assert_close(tro[0], tr[0] - torch.tensor([2.0, 1.0]))  # originals' mean
    _, two, _, tro = center_sets(x, tw, pa, tr, "originals")
    torch.testing.assert_close(two, tw - torch.tensor([2.0, 1.0]))
    _, _, _, tro = center_sets(x, tw, pa, tr, "each")
    torch.testing.assert_close(tro[0], tr[0] - torch.tensor([3.0, 2.0]))
    xp, *_ = center_sets(x, tw, pa, tr, "pooled")  # mean of all 8 rows: [2.75, 2.5]
    torch.testing.assert_close(xp, x - torch.tensor([2.75, 2.5]))
    assert center_sets(x, tw, pa, tr, "none")[0] is x
    with pytest.raises(ValueError, match="centering must be one of"):
        center_sets(x, tw, pa, tr, "median")
