"""Autograd through the surrogate against central finite differences (float64)."""

import torch
from icml_smart.shape_opt import drag_geometry_gradient, field_query_gradient, surrogate_drag


def test_field_query_gradient_matches_finite_differences(tiny_model, tiny_data):
    b = tiny_data.batch([0])
    g, p, q = b["geometry"].double(), b["params"].double(), b["queries"][:, :6].double()
    J = field_query_gradient(tiny_model, g, p, q)
    eps = 1e-6
    with torch.no_grad():
        for d in range(2):
            e = torch.zeros_like(q)
            e[..., d] = eps
            fd = (tiny_model.predict(g, p, q + e) - tiny_model.predict(g, p, q - e)) / (2 * eps)
            assert torch.allclose(J[..., d], fd, rtol=1e-5, atol=1e-7)
    assert J.abs().max() > 1e-4  # the fields do vary with position


def test_drag_geometry_gradient_matches_finite_differences(tiny_model, tiny_data):
    b = tiny_data.batch([1])
    g, n, p = b["geometry"].double(), b["normals"].double(), b["params"].double()
    drag, grad = drag_geometry_gradient(tiny_model, g, n, p)
    eps = 1e-6
    with torch.no_grad():
        for i in (0, 7, 19, 33):
            for d in range(2):
                e = torch.zeros_like(g)
                e[0, i, d] = eps
                fd = (surrogate_drag(tiny_model, g + e, n, p)
                      - surrogate_drag(tiny_model, g - e, n, p))[0] / (2 * eps)
                assert abs(float(grad[0, i, d]) - float(fd)) < 1e-6 + 1e-4 * abs(float(fd))
    assert grad.abs().max() > 0
