"""The generic convolutional smooth() against closed forms, and filter-normalised slices."""

from __future__ import annotations

import math

import pytest
import torch
from icml_modality_pairing.landscape import (
    filter_normalized_direction,
    loss_landscape_1d,
    loss_landscape_2d,
    plot_landscape_1d,
    plot_landscape_2d,
)
from icml_modality_pairing.objective import Objective, SharpnessError
from icml_modality_pairing.smoothing import smooth, smoothed_abs, smoothed_abs_curvature
from icml_modality_pairing.training import cross_entropy_loss


@pytest.mark.parametrize("sigma", [0.3, 1.0, 2.5])
@pytest.mark.parametrize("x", [0.0, 0.4, -1.2])
def test_smoothed_abs_matches_the_closed_form(sigma, x):
    xt = torch.tensor(x, dtype=torch.float64)
    sm = smooth(torch.abs, sigma)                     # 1-D: Gauss–Hermite quadrature
    assert float(sm(xt)) == pytest.approx(float(smoothed_abs(xt, sigma)), rel=3e-3)
    assert float(sm.hessian(xt)) == pytest.approx(float(smoothed_abs_curvature(xt, sigma)),
                                                  rel=2e-2, abs=1e-3)
    exact_grad = 1 - 2 * 0.5 * math.erfc(x / sigma / math.sqrt(2))     # 1 − 2Φ(−x/σ)
    assert float(sm.grad(xt)) == pytest.approx(exact_grad, abs=5e-3)


def test_monte_carlo_smoothing_in_several_dimensions():
    x = torch.tensor([0.3, -0.5], dtype=torch.float64)
    f = lambda v: v.abs().sum(-1)                             # noqa: E731
    vals, hess = [], []
    for seed in range(8):                                     # independent estimates
        sm = smooth(f, 0.5, method="mc", n_samples=20000, seed=seed, vectorized=True)
        vals.append(float(sm(x)))
        hess.append(sm.hessian(x))
    v, H = torch.tensor(vals), torch.stack(hess)
    exact_v = float(smoothed_abs(x, 0.5).sum())
    exact_H = torch.diag(smoothed_abs_curvature(x, 0.5))     # separable: no cross term
    assert abs(float(v.mean()) - exact_v) < 4 * float(v.std() / 8 ** 0.5) + 1e-12
    se = H.std(0) / 8 ** 0.5
    assert ((H.mean(0) - exact_H).abs() < 4 * se + 1e-12).all(), (H.mean(0), exact_H)
    assert float(H.mean(0)[0, 0]) > float(H.mean(0)[1, 1])   # the kink is closer to x_0


def test_peak_curvature_falls_as_one_over_sigma():
    zero = torch.tensor(0.0, dtype=torch.float64)
    peaks = [float(smooth(torch.abs, s).hessian(zero)) for s in (0.25, 0.5, 1.0, 2.0)]
    for p, s in zip(peaks, (0.25, 0.5, 1.0, 2.0), strict=True):
        assert p * s == pytest.approx(math.sqrt(2 / math.pi), rel=2e-2)
    assert peaks == sorted(peaks, reverse=True)


def test_quadratic_smoothing_is_exact():
    sm = smooth(lambda v: v ** 2, 0.7)
    xt = torch.tensor(0.9, dtype=torch.float64)
    assert float(sm(xt)) == pytest.approx(0.81 + 0.49, rel=1e-12)
    assert float(sm.hessian(xt)) == pytest.approx(2.0, rel=1e-10)


def test_smooth_rejects_a_zero_width():
    with pytest.raises(ValueError, match="sigma"):
        smooth(torch.abs, 0.0)


def test_filter_normalised_direction_matches_filter_norms(tiny_mm):
    model, batches = tiny_mm
    obj = Objective(model, cross_entropy_loss, batches)
    d = obj.unflatten(filter_normalized_direction(obj, seed=0))
    for name, p in obj.unflatten(obj.theta0).items():
        if p.ndim >= 2:
            assert torch.allclose(d[name].norm(dim=1), p.norm(dim=1), rtol=1e-10)
        else:
            assert torch.count_nonzero(d[name]) == 0


def test_slices_pass_through_the_loss_at_zero(tiny_mm, tmp_path):
    model, batches = tiny_mm
    base = float(Objective(model, cross_entropy_loss, batches).loss())
    xs, ys = loss_landscape_1d(model, cross_entropy_loss, batches, steps=5, span=0.5)
    assert xs[2] == 0.0 and ys[2] == pytest.approx(base, rel=1e-12)
    a, b, Z = loss_landscape_2d(model, cross_entropy_loss, batches, steps=3, span=0.5)
    assert Z[1][1] == pytest.approx(base, rel=1e-12)
    pytest.importorskip("matplotlib")
    assert plot_landscape_1d(tmp_path / "a.png", {"m": (xs, ys)}).stat().st_size > 0
    assert plot_landscape_2d(tmp_path / "b.png", {"m": (a, b, Z)}).stat().st_size > 0
    with pytest.raises(SharpnessError, match="steps"):
        loss_landscape_1d(model, cross_entropy_loss, batches, steps=1)
