import numpy as np
import pytest
from icml_synsem import centroid_imbalance, information_imbalance
from icml_synsem.imbalance import distance_matrix, neighbour_ranks


def test_imbalance_with_itself_is_zero():
    x = np.random.default_rng(0).normal(size=(60, 5))
    assert information_imbalance(x, x) == (0.0, 0.0)
    # invariant to a rescaling (normalised distances) and a rotation
    rot, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(5, 5)))
    assert information_imbalance(x, 3 * x @ rot) == (0.0, 0.0)


def test_independent_spaces_give_about_one_and_bounded():
    rng = np.random.default_rng(0)
    vals = [information_imbalance(rng.normal(size=(300, 4)), rng.normal(size=(300, 4)))
            for _ in range(5)]
    arr = np.array(vals)
    assert abs(arr.mean() - 1.0) < 0.1
    assert arr.std() < 0.15  # N = 300: each estimate is close to its expectation


def test_imbalance_is_asymmetric_for_a_subspace():
    rng = np.random.default_rng(0)
    full = rng.normal(size=(300, 4))
    part = full[:, :1]
    to_part, to_full = information_imbalance(full, part, metric="l2")
    assert to_part < 0.25 < 0.6 < to_full  # the full space predicts its coordinate, not back


def test_ranks_are_min_ranks_with_ties():
    x = np.array([[0.0], [1.0], [1.0], [3.0]])
    r = neighbour_ranks(distance_matrix(x, "l2"))
    assert r[0].tolist() == [0, 1, 1, 3]
    assert r[1].tolist() == [2, 0, 1, 3]


def test_centroid_imbalance_decoupled_groups():
    rng = np.random.default_rng(0)
    groups = [i % 25 for i in range(200)]
    syn = rng.normal(size=(25, 8))[groups]
    sem = rng.normal(size=(200, 8))
    out = centroid_imbalance(syn, sem, groups, n_resamples=20, k=1, estimator="all_pairs")
    assert out["syn_to_sem"] > 0.7 and out["sem_to_syn"] > 0.7
    # a semantic space equal to the syntactic one is fully predicted
    same = centroid_imbalance(syn, syn + 1e-9 * rng.normal(size=syn.shape), groups,
                              n_resamples=5, k=1, estimator="all_pairs")
    assert same["syn_to_sem"] < 0.05


def test_imbalance_bad_input():
    with pytest.raises(ValueError, match="at least 3 points"):
        information_imbalance(np.zeros((2, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="same points"):
        information_imbalance(np.zeros((5, 2)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="metric"):
        information_imbalance(np.ones((5, 2)), np.ones((5, 2)), metric="manhattan")
    with pytest.raises(ValueError, match=">= 3"):
        centroid_imbalance(np.ones((4, 2)), np.ones((4, 2)), [0, 0, 1, 1], 200, 1,
                           estimator="all_pairs")
