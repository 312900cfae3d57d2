import pytest
import torch
from icml_synsem import (
    derangement,
    explained_sq_norm,
    group_centroids,
    orthogonalize,
    remove_projection,
    semantic_centroids,
    subtract,
    syntactic_centroids,
)


@pytest.fixture()
def xc():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(20, 16, generator=g, dtype=torch.float64),
            torch.randn(20, 16, generator=g, dtype=torch.float64))


def test_remove_projection_is_orthogonal_and_idempotent(xc):
    x, c = xc
    y = remove_projection(x, c)
    assert (y * c).sum(1).abs().max() < 1e-6  # up to the eps guard
    torch.testing.assert_close(remove_projection(y, c), y)
    # the removed part is parallel to c
    d = x - y
    cos = (d * c).sum(1).abs() / (d.norm(dim=1) * c.norm(dim=1))
    torch.testing.assert_close(cos, torch.ones(20, dtype=torch.float64))


def test_remove_projection_scale_invariant_and_zero_noop(xc):
    x, c = xc
    y = remove_projection(x, c)
    torch.testing.assert_close(remove_projection(x, -3.7 * c), y)
    torch.testing.assert_close(remove_projection(x, 1e3 * c), y)
    torch.testing.assert_close(remove_projection(x, torch.zeros_like(c)), x)
    # one vector broadcast to every row
    torch.testing.assert_close(remove_projection(x, c[0]),
                               remove_projection(x, c[0].expand(20, -1)))


def test_subtract_and_orthogonalize(xc):
    x, c = xc
    torch.testing.assert_close(subtract(x, c), x - c)
    o = orthogonalize(c, x)
    assert (o * x).sum(1).abs().max() < 1e-6


def test_explained_sq_norm_bounds(xc):
    x, c = xc
    e = explained_sq_norm(x, c)
    assert ((e >= 0) & (e <= 1 + 1e-12)).all()
    torch.testing.assert_close(explained_sq_norm(x, 2 * x), torch.ones(20, dtype=torch.float64))
    assert explained_sq_norm(x, orthogonalize(c, x)).max() < 1e-12
    # |proj|^2 + |rest|^2 = |x|^2
    rest = remove_projection(x, c)
    torch.testing.assert_close(e + (rest * rest).sum(1) / (x * x).sum(1),
                               torch.ones(20, dtype=torch.float64))


def test_group_centroids_means_and_singletons():
    x = torch.arange(12.0).reshape(4, 3)
    cents, groups = group_centroids(x, ["a", "b", "a", "c"])
    assert groups == ["a", "b", "c"]
    torch.testing.assert_close(cents[0], (x[0] + x[2]) / 2)
    torch.testing.assert_close(cents[1], x[1])  # a singleton's centroid is its member
    torch.testing.assert_close(syntactic_centroids(x, ["a", "b", "a", "c"], False)[3], x[3])


def test_leave_one_out_is_mean_of_the_others():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(9, 5, generator=g, dtype=torch.float64)
    labels = ["a", "b", "a", "a", "b", "c", "c", "b", "a"]
    loo = syntactic_centroids(x, labels, leave_one_out=True)
    for i, lab in enumerate(labels):
        others = [j for j, m in enumerate(labels) if m == lab and j != i]
        torch.testing.assert_close(loo[i], x[others].mean(0))


def test_leave_one_out_rejects_singletons():
    with pytest.raises(ValueError, match="alone in its template group"):
        syntactic_centroids(torch.zeros(3, 2), ["a", "a", "b"], leave_one_out=True)


def test_group_centroids_label_count_error():
    with pytest.raises(ValueError, match="one label per row"):
        group_centroids(torch.zeros(3, 2), ["a", "b"])


def test_semantic_centroids_is_language_mean(xc):
    x, c = xc
    torch.testing.assert_close(semantic_centroids([x, c]), (x + c) / 2)
    with pytest.raises(ValueError, match="at least one language"):
        semantic_centroids(torch.zeros(0, 3, 2))


@pytest.mark.parametrize("n", [2, 3, 5, 50])
def test_derangement_has_no_fixed_point(n):
    for seed in range(20):
        p = derangement(n, seed)
        assert sorted(p.tolist()) == list(range(n))
        assert not (p == torch.arange(n)).any()
    with pytest.raises(ValueError, match="at least 2"):
        derangement(1)
