"""The data generator's physics, in float64."""

import numpy as np
import pytest
from icml_smart.potential_flow import Ellipse, Sphere

BODIES = [Ellipse(0.6, 0.3, 0.4, 1.2, 0.3, 0.0), Ellipse(0.7, 0.35, 2.0, 0.8, -0.4, 0.25),
          Ellipse(0.5, 0.5, 0.0, 1.0, 0.2, -0.2)]


@pytest.mark.parametrize("body", BODIES)
def test_no_flow_through_the_surface(body):
    g, n = body.boundary(200, np.random.default_rng(0))
    f = body.fields(g)
    assert np.abs((f[:, :2] * n).sum(-1)).max() < 1e-6


@pytest.mark.parametrize("body", BODIES)
def test_far_field_is_the_free_stream(body):
    x = 1e4 * np.array([[np.cos(t), np.sin(t)] for t in np.linspace(0, 6, 7)])
    f = body.fields(x)
    assert np.abs(f[:, 0] - np.cos(body.alpha)).max() < 1e-3
    assert np.abs(f[:, 1] - np.sin(body.alpha)).max() < 1e-3
    assert np.abs(f[:, 2]).max() < 1e-3


def test_circle_closed_form():
    body = Ellipse(0.5, 0.5, 0.0, 1.3, 0.35, 0.0)
    g, _ = body.boundary(64)
    th = np.arctan2(g[:, 1], g[:, 0])
    assert np.abs(body.fields(g)[:, 2] - (1 - 4 * np.sin(th - body.alpha) ** 2)).max() < 1e-9


@pytest.mark.parametrize("body", BODIES)
def test_divergence_and_curl_vanish(body):
    rng = np.random.default_rng(1)
    x = rng.uniform(-1.5, 1.5, (400, 2))
    x = x[~body.inside(x / 1.1)]
    h = 1e-5
    ex, ey = np.array([h, 0.0]), np.array([0.0, h])
    d = lambda e: (body.fields(x + e) - body.fields(x - e)) / (2 * h)  # noqa: E731
    fx, fy = d(ex), d(ey)
    div = fx[:, 0] + fy[:, 1]
    curl = fx[:, 1] - fy[:, 0]
    assert np.abs(div).max() < 1e-6 and np.abs(curl).max() < 1e-6


@pytest.mark.parametrize("body", BODIES)
def test_bernoulli_bound_and_stagnation(body):
    rng = np.random.default_rng(2)
    x = rng.uniform(-1.5, 1.5, (4000, 2))
    x = x[~body.inside(x)]
    g, _ = body.boundary(4000)
    cp = np.concatenate([body.fields(x)[:, 2], body.fields(g)[:, 2]])
    assert cp.max() <= 1 + 1e-12
    assert cp.max() > 0.99  # the stagnation points reach C_p = 1


def test_rotation_consistency():
    a = Ellipse(0.6, 0.3, 0.2, 1.1, 0.1, 0.15)
    phi = 0.7
    b = Ellipse(0.6, 0.3, 0.2 + phi, 1.1, 0.1 + phi, 0.15)
    rng = np.random.default_rng(3)
    x = rng.uniform(-1.5, 1.5, (500, 2))
    x = x[~a.inside(x)]
    R = np.array([[np.cos(phi), -np.sin(phi)], [np.sin(phi), np.cos(phi)]])
    fa, fb = a.fields(x), b.fields(x @ R.T)
    assert np.allclose(fb[:, :2], fa[:, :2] @ R.T, atol=1e-10)
    assert np.allclose(fb[:, 2], fa[:, 2], atol=1e-10)


@pytest.mark.parametrize("body", BODIES)
def test_kutta_joukowski_lift_and_zero_drag(body):
    import torch
    from icml_smart.metrics import force_coefficients

    g, n = body.boundary(3000, np.random.default_rng(4))
    cp = body.fields(g)[:, 2]
    flow = np.array([np.cos(body.alpha), np.sin(body.alpha)])
    t = lambda v: torch.tensor(v)  # noqa: E731
    fc = force_coefficients(t(g), t(n), t(cp), t(flow))
    assert abs(float(fc["drag"])) < 1e-3
    assert float(fc["lift"]) == pytest.approx(-2 * body.circulation / body.U, abs=2e-3)


def test_queries_inside_the_body_are_refused_or_nan():
    body = BODIES[0]
    x = np.array([[0.0, 0.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match="inside the body"):
        body.fields(x)
    f = body.fields(x, inside="nan")
    assert np.isnan(f[0]).all() and np.isfinite(f[1]).all()


def test_bad_bodies_are_refused():
    with pytest.raises(ValueError, match="a >= b"):
        Ellipse(0.3, 0.6)
    with pytest.raises(ValueError, match="finite"):
        Ellipse(float("nan"), 0.2)
    with pytest.raises(ValueError, match="NaN"):
        BODIES[0].fields(np.array([[np.nan, 1.0]]))


def test_sphere_surface_closed_form_and_physics():
    s = Sphere(0.5, (0.1, -0.2, 0.05), 1.4, (1.0, 2.0, -0.5))
    g, n = s.boundary(300, np.random.default_rng(5))
    f = s.fields(g)
    assert np.abs((f[:, :3] * n).sum(-1)).max() < 1e-12
    cos = ((g - np.array(s.center)) / s.radius @ s.e)
    assert np.abs(f[:, 3] - (1 - 9 / 4 * (1 - cos ** 2))).max() < 1e-12
    rng = np.random.default_rng(6)
    x = rng.uniform(-1.5, 1.5, (300, 3))
    x = x[~s.inside(x)]
    h = 1e-5
    div = sum((s.fields(x + h * e)[:, i] - s.fields(x - h * e)[:, i]) / (2 * h)
              for i, e in enumerate(np.eye(3)))
    assert np.abs(div).max() < 1e-6
    assert np.allclose(s.fields(np.array([[1e4, 0, 0]]))[0, :3], s.e, atol=1e-6)
    assert f[:, 3].max() <= 1 + 1e-12
