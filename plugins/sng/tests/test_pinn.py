"""PINN residuals (torch.func vs batched autograd vs finite differences) and the claim at
small scale: natural-gradient methods reach errors Adam does not."""

import pytest
import torch
from icml_sng import PoissonPINN, mlp, residual_jacobian
from icml_sng.train import fit_pinn

D = torch.float64


@pytest.mark.parametrize("dim", [1, 2])
def test_residuals_and_jacobians_agree_across_backends(dim):
    prob = PoissonPINN(mlp(dim, [8], seed=1), dim=dim, n_interior=6, n_boundary=3)
    idx = torch.tensor([0, 3, prob.n_int, prob.n - 1, 5])
    r_auto = prob.residual_fn(idx).detach()
    torch.testing.assert_close(r_auto, prob.residual_fn_func(idx).detach())
    r_f, J_f = prob.jacobian_fn_func(idx)  # torch.func vmap(jacrev)
    r_a, J_a = residual_jacobian(prob.residual_fn, list(prob.model.parameters()), idx)
    torch.testing.assert_close(r_f, r_a)
    torch.testing.assert_close(J_f, J_a)


@pytest.mark.parametrize("dim", [1, 2])
def test_laplacian_matches_finite_differences(dim):
    prob = PoissonPINN(mlp(dim, [8], seed=2), dim=dim, n_interior=5, n_boundary=2)
    idx = torch.arange(3)
    lap = -(prob.residual_fn(idx).detach() / prob.w_int) - prob.f_int[idx]
    h = 1e-4
    x = prob.x_int[idx]
    u0 = prob.model(x).reshape(-1)
    fd = torch.zeros_like(u0)
    for j in range(dim):
        e = torch.zeros(dim, dtype=D)
        e[j] = h
        fd += (prob.model(x + e).reshape(-1) - 2 * u0 + prob.model(x - e).reshape(-1)) / h**2
    torch.testing.assert_close(lap, fd.detach(), rtol=1e-5, atol=1e-6)


def test_pinn_loss_is_the_split_interior_boundary_loss():
    prob = PoissonPINN(mlp(1, [8]), dim=1, n_interior=10)
    r = prob.residual_fn(torch.arange(prob.n)).detach()
    ri, rb = r[:10] / prob.w_int, r[10:] / prob.w_bdy
    assert prob.loss() == pytest.approx(float(0.5 * (ri**2).mean() + 0.5 * (rb**2).mean()),
                                        rel=1e-12)


def test_claim_small_scale_natural_gradient_beats_adam():
    """1D Poisson, 40 interior points: SPRING / ENGD get far below Adam at 15x fewer steps."""
    base = mlp(1, [16], seed=0)
    errs = {}
    for method, steps in (("adam", 600), ("engd", 40), ("spring", 40)):
        model = mlp(1, [16], seed=0)
        model.load_state_dict(base.state_dict())
        prob = PoissonPINN(model, dim=1, n_interior=40)
        errs[method] = fit_pinn(prob, method, steps=steps, eval_every=steps,
                                batch_size=24, line_search=10).final
    assert errs["engd"] < 1e-4, errs
    assert errs["spring"] < 1e-4, errs
    assert errs["adam"] > 10 * max(errs["engd"], errs["spring"]), errs


def test_pinn_bad_input():
    with pytest.raises(ValueError, match="dim must be 1 or 2"):
        PoissonPINN(mlp(3), dim=3)
    prob = PoissonPINN(mlp(1, [4]), dim=1, n_interior=5)
    with pytest.raises(IndexError, match="residual indices"):
        prob.residual_fn(torch.tensor([prob.n]))
    with pytest.raises(ValueError, match="hidden"):
        mlp(1, [])


def test_config_errors_name_the_key():
    from icml_sng.config import EvaluateConfig, TrainConfig

    from icml.config import ConfigError, build_config

    with pytest.raises(ConfigError, match="methods: unknown \\['bfgs'\\]"):
        build_config(TrainConfig, {}, ["methods=adam,bfgs"])
    with pytest.raises(ConfigError, match="spring.momentum"):
        build_config(TrainConfig, {}, ["spring.momentum=1.0"])
    with pytest.raises(ConfigError, match="batch_size=50 is larger than n=40"):
        build_config(EvaluateConfig, {}, ["n=40", "batch_size=50"])
    cfg = build_config(TrainConfig, {}, ["methods=sng,spring", "dim=2"])
    assert cfg.methods == ["sng", "spring"] and cfg.dim == 2


@pytest.mark.parametrize("sampler", ["uniform", "svs", "stratified"])
def test_every_sampler_trains_the_pinn(sampler):
    prob = PoissonPINN(mlp(1, [8], seed=0), dim=1, n_interior=20)
    hist = fit_pinn(prob, "sng", steps=15, eval_every=15, batch_size=10, sampler=sampler,
                    line_search=8, damping=1e-8)
    assert hist.losses[-1] < 0.5 * hist.losses[0], hist.losses
