import pytest
import torch
from icml_synsem import recall_at_k


@pytest.fixture()
def qc():
    g = torch.Generator().manual_seed(0)
    c = torch.randn(30, 8, generator=g, dtype=torch.float64)
    q = c + 0.9 * torch.randn(30, 8, generator=g, dtype=torch.float64)
    return q, c


def test_recall_monotone_in_k_and_one_at_n(qc):
    q, c = qc
    vals = [recall_at_k(q, c, k) for k in range(1, 31)]
    assert all(a <= b for a, b in zip(vals, vals[1:], strict=False))
    assert vals[-1] == 1.0
    assert 0.0 < vals[0] < 1.0  # the fixture is neither trivial nor hopeless
    assert recall_at_k(c, c, 1) == 1.0


def test_recall_invariant_to_rotation_and_row_scaling(qc):
    q, c = qc
    rot, _ = torch.linalg.qr(torch.randn(8, 8, generator=torch.Generator().manual_seed(3),
                                         dtype=torch.float64))
    scale_q = torch.rand(30, 1, dtype=torch.float64) + 0.1
    scale_c = torch.rand(30, 1, dtype=torch.float64) + 0.1
    for k in (1, 3, 7):
        assert recall_at_k(scale_q * q @ rot, scale_c * c @ rot, k) == recall_at_k(q, c, k)


def test_template_variant_counts_any_same_label(qc):
    q, c = qc
    # query i's nearest candidate is i + 1 (mod 4): no pair hit at k = 1, but queries 0 and 2
    # find a candidate with their label ([a, a, b, b]) -> template recall 0.5 exactly
    cands = torch.eye(4, dtype=torch.float64)
    queries = cands[[1, 2, 3, 0]] + 0.1 * cands
    labels = ["a", "a", "b", "b"]
    assert recall_at_k(queries, cands, 1) == 0.0
    assert recall_at_k(queries, cands, 1, labels, labels) == 0.5
    assert recall_at_k(queries, cands, 2) == 1.0  # the partner is second
    # one label for everything: every query hits at k = 1
    assert recall_at_k(q, c, 1, ["x"] * 30, ["x"] * 30) == 1.0
    # disjoint labels: never a hit
    assert recall_at_k(q, c, 5, ["a"] * 30, ["b"] * 30) == 0.0


def test_recall_closed_form_two_points():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    c = torch.tensor([[0.0, 1.0], [1.0, 0.1]])  # swapped partners
    assert recall_at_k(q, c, 1) == 0.0
    assert recall_at_k(q, c, 2) == 1.0


def test_recall_bad_input(qc):
    q, c = qc
    with pytest.raises(ValueError, match="k=31"):
        recall_at_k(q, c, 31)
    with pytest.raises(ValueError, match="one candidate per query"):
        recall_at_k(q, c[:10], 1)
    with pytest.raises(ValueError, match="same D"):
        recall_at_k(q, c[:, :4], 1)
    with pytest.raises(ValueError, match="both"):
        recall_at_k(q, c, 1, query_labels=[0] * 30)


def test_ties_are_broken_at_random_in_expectation():
    """A query with no information (a zero vector, e.g. after removing its own direction) ties
    with every candidate and must score chance level k/N, not count as retrieved."""
    c = torch.randn(10, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    q = c.clone()
    q[0] = 0.0
    assert recall_at_k(q[:1], c, 3, ["a"], ["a"] + ["b"] * 9) == pytest.approx(3 / 10)
    # pair variant: 9 exact queries + one zero query at chance
    assert recall_at_k(q, c, 3) == pytest.approx((9 + 3 / 10) / 10)
    # two of ten candidates share the zero query's label: P(one in 3 draws) = 1 - C(8,3)/C(10,3)
    got = recall_at_k(q[:1], c, 3, ["a"], ["a", "a"] + ["b"] * 8)
    assert got == pytest.approx(1 - 56 / 120)
