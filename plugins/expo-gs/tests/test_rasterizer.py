import math

import pytest
import torch
from icml_expo_gs.rasterizer import (
    Camera,
    gradcheck_rasterizer,
    look_at,
    project,
    rasterize,
    rasterize_dense,
    rasterize_naive,
    render_gaussians,
)


def _cam(size=8, dtype=torch.float64):
    return look_at(torch.tensor([0.0, 0.0, -3.0]), torch.zeros(3), torch.tensor([0.0, -1.0, 0.0]),
                   fov_deg=40, width=size, height=size).to(dtype=dtype)


def _random(n, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, 3, generator=g, dtype=dtype) * 0.4,
            torch.log(0.05 + 0.2 * torch.rand(n, 3, generator=g, dtype=dtype)),
            torch.randn(n, 4, generator=g, dtype=dtype),
            0.2 + 0.7 * torch.rand(n, generator=g, dtype=dtype),
            torch.rand(n, 3, generator=g, dtype=dtype))


def test_weights_plus_transmittance_sum_to_one():
    cam = _cam(12)
    m, s, q, o, _ = _random(40)
    proj = project(m, s, q, o, cam)
    ones = torch.ones(proj.means2d.shape[0], 1, dtype=torch.float64)
    r = rasterize(proj, ones, 12, 12, tile=5)
    total = r["features"][..., 0] + (1 - r["alpha"])
    assert torch.allclose(total, torch.ones_like(total), atol=1e-12)
    assert r["alpha"].max() > 0.5  # the scene really covers pixels


def test_single_gaussian_closed_form():
    # an isotropic Gaussian facing the camera projects to a 2D Gaussian of std f*s/z (+ eps2d)
    cam = _cam(16)
    s, z = 0.2, 3.0
    m = torch.zeros(1, 3, dtype=torch.float64)
    q = torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64)
    op = torch.tensor([0.7], dtype=torch.float64)
    col = torch.tensor([[0.2, 0.5, 0.9]], dtype=torch.float64)
    r = render_gaussians(m, torch.full((1, 3), math.log(s), dtype=torch.float64), q, op, col,
                         cam, eps2d=0.3)
    var = (cam.fx * s / z) ** 2 + 0.3
    v, u = torch.meshgrid(torch.arange(16.0) + 0.5, torch.arange(16.0) + 0.5, indexing="ij")
    g = 0.7 * torch.exp(-((u - cam.cx) ** 2 + (v - cam.cy) ** 2) / (2 * var)).double()
    assert torch.allclose(r["features"], g[..., None] * col[0], atol=1e-10)
    assert torch.allclose(r["depth"], g * z, atol=1e-10)


@pytest.mark.parametrize("mode", ["tiled", "dense"])
def test_gradients_match_finite_differences(mode):
    res = gradcheck_rasterizer(3, 6, seed=1, mode=mode, tile=4)
    assert set(res) == {"means", "log_scales", "quats", "opacity", "colors"}
    assert all(res.values()), res


def test_order_invariance_and_references_agree():
    cam = _cam(8)
    m, s, q, o, c = _random(12, seed=2)
    a = render_gaussians(m, s, q, o, c, cam, tile=3)
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(5))
    b = render_gaussians(m[perm], s[perm], q[perm], o[perm], c[perm], cam, tile=3)
    assert torch.allclose(a["features"], b["features"], atol=1e-12)
    proj = project(m, s, q, o, cam, cull_sigma=8.0)  # culls < exp(-32) of a peak
    f = c[proj.index]
    t = rasterize(proj, f, 8, 8, tile=3)["features"]
    d = rasterize_dense(proj, f, 8, 8)["features"]
    n = rasterize_naive(proj, f, 8, 8)["features"]
    assert torch.allclose(t, d, atol=1e-6) and torch.allclose(d, n, atol=1e-12)


def test_camera_looking_away_renders_background():
    cam = look_at(torch.tensor([0.0, 0.0, -3.0]), torch.tensor([0.0, 0.0, -6.0]),
                  torch.tensor([0.0, -1.0, 0.0]), fov_deg=40, width=6, height=6).to(
        dtype=torch.float64)
    m, s, q, o, c = _random(5)
    bg = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    r = render_gaussians(m, s, q, o, c, cam, background=bg)
    assert r["alpha"].abs().max() == 0
    assert torch.allclose(r["features"], bg.expand(6, 6, 3))


def test_degenerate_covariance_is_a_clear_error():
    cam = _cam(6)
    m, s, q, o, c = _random(3)
    s[0, 0] = -math.inf
    with pytest.raises(ValueError, match="degenerate covariance"):
        render_gaussians(m, s, q, o, c, cam)
    with pytest.raises(ValueError, match="eps2d"):  # a point-like Gaussian without dilation
        s2 = torch.full((1, 3), -400.0, dtype=torch.float64)
        render_gaussians(m[:1], s2, q[:1], o[:1], c[:1], cam, eps2d=0.0)


def test_camera_is_a_dataclass():
    cam = _cam(4)
    assert isinstance(cam, Camera) and torch.allclose(cam.center, torch.tensor(
        [0.0, 0.0, -3.0], dtype=torch.float64))
