"""ε-sharpness and Gaussian-perturbation sharpness: zero at zero radius, their Taylor
expansions, data-order invariance, and the awkward models the suite refuses or handles."""

from __future__ import annotations

import pytest
import torch
from icml_modality_pairing.objective import Objective, SharpnessError
from icml_modality_pairing.sharpness import (
    epsilon_sharpness,
    gaussian_perturbation_sharpness,
    perturbation_scales,
    sharpness_report,
)
from icml_modality_pairing.training import cross_entropy_loss
from torch import nn


def test_zero_radius_gives_exactly_zero(tiny_mm):
    model, batches = tiny_mm
    assert epsilon_sharpness(model, cross_entropy_loss, batches, rho=0.0) == 0.0
    assert gaussian_perturbation_sharpness(model, cross_entropy_loss, batches,
                                           sigma=0.0) == (0.0, 0.0)


def test_epsilon_sharpness_follows_its_second_order_expansion(tiny_mm):
    model, batches = tiny_mm
    obj = Objective(model, cross_entropy_loss, batches)
    g = obj.grad()
    u = g / g.norm()
    curv = float(u @ obj.hvp(u))
    for rho in (1e-3, 3e-3):
        expected = rho * float(g.norm()) + 0.5 * rho ** 2 * curv
        assert epsilon_sharpness(obj, rho=rho) == pytest.approx(expected, rel=1e-3)
    assert epsilon_sharpness(obj, rho=0.05) > 0


def test_gaussian_sharpness_matches_half_the_weighted_hessian_diagonal():
    # a smooth (tanh) network: with ReLU, kinks crossed by the noise add curvature that the
    # a.e. Hessian does not see
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(60, 3, generator=g, dtype=torch.float64), torch.arange(60) % 3
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 3)).double()
    obj = Objective(model, nn.CrossEntropyLoss(), (x, y))
    sigma = 1e-3
    s = perturbation_scales(obj, sigma, filter_norm=True)
    expected = 0.5 * float((s ** 2 * obj.hessian().diagonal()).sum())
    mean, se = gaussian_perturbation_sharpness(obj, sigma=sigma, n=400, seed=0)
    assert abs(mean - expected) < 4 * se
    assert se < 0.1 * expected              # antithetic pairs remove the first-order noise
    plain, plain_se = gaussian_perturbation_sharpness(obj, sigma=sigma, n=400, seed=0,
                                                      antithetic=False)
    assert abs(plain - expected) < 4 * plain_se
    assert plain_se > 3 * se
    assert expected > 0


def test_filter_normalised_scales_are_per_tensor(tiny_mm):
    model, batches = tiny_mm
    obj = Objective(model, cross_entropy_loss, batches)
    s = perturbation_scales(obj, 0.1)
    parts = torch.split(s, obj.numels)
    for p, w in zip(parts, obj.unflatten(obj.theta0).values(), strict=True):
        assert torch.allclose(p, torch.full_like(p, 0.1 * float(w.norm()) / w.numel() ** 0.5))
    assert torch.equal(perturbation_scales(obj, 0.1, filter_norm=False),
                       torch.full_like(s, 0.1))


def test_report_is_invariant_to_data_order(tiny_mm):
    model, batches = tiny_mm
    full = {k: torch.cat([b[k] for b in batches]) for k in batches[0]}
    perm = torch.randperm(60, generator=torch.Generator().manual_seed(1))
    shuffled = [{k: v[perm][s:s + 13] for k, v in full.items()} for s in range(0, 60, 13)]
    kw = dict(power_iters=500, tol=1e-10, trace_samples=4, gauss_samples=4)
    a = sharpness_report(model, cross_entropy_loss, batches, **kw).as_dict()
    b = sharpness_report(model, cross_entropy_loss, shuffled, **kw).as_dict()
    for k, v in a.items():
        if isinstance(v, float):
            assert v == pytest.approx(b[k], rel=1e-7, abs=1e-12), k


# --- awkward models and losses ------------------------------------------------------------

def _data(n=16, d=4):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, d, generator=g), torch.arange(n) % 2


def test_dropout_in_training_mode_is_refused_and_eval_works():
    x, y = _data()
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    with pytest.raises(SharpnessError, match=r"model.eval\(\)"):
        Objective(model, nn.CrossEntropyLoss(), (x, y))
    Objective(model.eval(), nn.CrossEntropyLoss(), (x, y))


def test_batchnorm_buffers_are_constants_and_stay_untouched():
    x, y = _data()
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2))
    model.train()
    model(x)  # give the running stats some value
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    obj = Objective(model, nn.CrossEntropyLoss(), (x, y))
    power_iteration_value = sharpness_report(obj, power_iters=20, trace_samples=2,
                                             gauss_samples=2).lambda_max
    assert power_iteration_value == power_iteration_value  # finite, not NaN
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_frozen_parameters_are_excluded_and_listed():
    x, y = _data()
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    model[0].weight.requires_grad_(False)
    obj = Objective(model, nn.CrossEntropyLoss(), (x, y))
    assert obj.frozen == ["0.weight"]
    assert obj.dim == 3 + 3 * 2 + 2


def test_non_differentiable_loss_is_refused():
    x, y = _data()
    model = nn.Linear(4, 2)

    def error_rate(m, batch):
        xb, yb = batch
        return (m(xb).argmax(-1) != yb).float().mean()

    with pytest.raises(SharpnessError, match="no gradient path"):
        Objective(model, error_rate, (x, y))


def test_bad_losses_and_data_are_refused():
    x, y = _data()
    model = nn.Linear(4, 2)
    with pytest.raises(SharpnessError, match="expected a scalar"):
        Objective(model, nn.CrossEntropyLoss(reduction="none"), (x, y))
    with pytest.raises(SharpnessError, match="no NaN"):
        Objective(model, nn.CrossEntropyLoss(), (x * float("nan"), y))
    with pytest.raises(SharpnessError, match="empty"):
        Objective(model, nn.CrossEntropyLoss(), [])
    with pytest.raises(SharpnessError, match="not a torch.nn.Module"):
        Objective(lambda t: t, nn.CrossEntropyLoss(), (x, y))
    with pytest.raises(SharpnessError, match="rho"):
        epsilon_sharpness(model, nn.CrossEntropyLoss(), (x, y), rho=-1)


def test_criteria_are_wrapped_and_agree_with_an_explicit_loss_fn():
    import torch.nn.functional as F
    from icml_modality_pairing.objective import as_batch_loss

    x, y = _data()
    model = nn.Linear(4, 2)
    explicit = Objective(model, lambda m, b: F.cross_entropy(m(b[0]), b[1]), (x, y))
    for crit in (nn.CrossEntropyLoss(), F.cross_entropy, as_batch_loss(F.cross_entropy)):
        assert float(Objective(model, crit, (x, y)).loss()) == float(explicit.loss())
