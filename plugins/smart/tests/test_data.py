import numpy as np
import pytest
import torch
from icml_smart.data import PotentialFlowDataset, collate


@pytest.mark.parametrize("kind", ["ellipse", "sphere", "laplace"])
def test_cases_are_outside_the_body_finite_and_seeded(kind):
    d = PotentialFlowDataset(2, n_boundary=32, n_queries=40, seed=4, kind=kind)
    again = PotentialFlowDataset(2, n_boundary=32, n_queries=40, seed=4, kind=kind)
    for c, c2, body in zip(d.cases, again.cases, d.bodies, strict=True):
        assert torch.isfinite(c["targets"]).all()
        assert torch.equal(c["queries"], c2["queries"])
        assert torch.allclose(c["normals"].norm(dim=-1), torch.ones(32), atol=1e-5)
        if kind != "laplace":
            assert not body.inside(c["queries"].double().numpy()).any()
            assert torch.equal(c["surface_queries"], c["geometry"])
        else:  # outward normals: a step along them leaves the body, a step against enters it
            g, n = c["geometry"].double().numpy(), c["normals"].double().numpy()
            outside = np.isfinite(body.fields(g + 0.15 * n, inside="nan")[:, 0])
            inside = np.isnan(body.fields(g - 0.15 * n, inside="nan")[:, 0])
            assert outside.mean() > 0.9 and inside.mean() > 0.9
    b = d.batch([0, 1])
    assert b["geometry"].shape == (2, 32, d.space_dim)
    assert d.out_dim == d.space_dim + 1


def test_bad_dataset_requests():
    with pytest.raises(ValueError, match="kind"):
        PotentialFlowDataset(1, kind="airfoil")
    with pytest.raises(ValueError, match="at least one case"):
        PotentialFlowDataset(0)
    a = PotentialFlowDataset(1, n_queries=10)[0]
    b = PotentialFlowDataset(1, n_queries=12)[0]
    with pytest.raises(ValueError, match="same n_boundary and n_queries"):
        collate([a, b])
    assert np.isfinite(a["params"].numpy()).all()
