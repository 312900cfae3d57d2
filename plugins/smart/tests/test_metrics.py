import math

import pytest
import torch
from icml_smart.metrics import relative_l2, surface_elements


def test_relative_l2_zero_for_perfect_and_scale_invariant():
    g = torch.Generator().manual_seed(0)
    y = torch.randn(3, 50, 4, generator=g, dtype=torch.float64)
    p = y + 0.1 * torch.randn(3, 50, 4, generator=g, dtype=torch.float64)
    assert torch.equal(relative_l2(y, y), torch.zeros(4, dtype=torch.float64))
    e = relative_l2(p, y)
    assert torch.allclose(relative_l2(7.5 * p, 7.5 * y), e)
    assert (e > 0).all()
    assert relative_l2(p, y, reduce=False).shape == (3, 4)
    with pytest.raises(ValueError, match="differ"):
        relative_l2(p[:, :3], y)


def test_surface_elements_integrate_perimeter_and_area():
    import numpy as np
    from icml_smart.potential_flow import Ellipse, Sphere

    e = Ellipse(0.6, 0.3, 0.7)
    g, n = e.boundary(2000, np.random.default_rng(0))
    a, b = e.a, e.b
    h = ((a - b) / (a + b)) ** 2
    ramanujan = math.pi * (a + b) * (1 + 3 * h / (10 + math.sqrt(4 - 3 * h)))
    w = surface_elements(torch.tensor(g), torch.tensor(n))
    assert float(w.sum()) == pytest.approx(ramanujan, rel=1e-4)
    s = Sphere(0.4)
    g, n = s.boundary(500)
    assert float(surface_elements(torch.tensor(g), torch.tensor(n)).sum()) == pytest.approx(
        4 * math.pi * 0.16, rel=1e-6)
