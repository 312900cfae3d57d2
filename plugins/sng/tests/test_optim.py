"""SNG / SPRING optimizer identities, the accelerated sketch-and-project view, bad input."""

import io
import math

import pytest
import torch
from icml_sng import (
    SNG,
    SPRING,
    NonFiniteError,
    accelerated_sketch_project,
    kaczmarz,
    momentum_from_rate,
    nesterov_kaczmarz,
    residual_jacobian,
    spring_parameters,
    theoretical_parameters,
)

D = torch.float64


def _flat(net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def _replay(batches):
    it = iter(batches)
    return lambda n, k, g: next(it)


def test_residual_jacobian_matches_autograd_functional(regression):
    net, residual_fn, n = regression
    idx = torch.tensor([0, 3, 7, 39])
    r, J = residual_jacobian(residual_fn, list(net.parameters()), idx)
    params = tuple(p.detach().clone() for p in net.parameters())

    def f(*ps):
        return torch.func.functional_call(net, dict(zip([k for k, _ in
                                                         net.named_parameters()], ps)),
                                          (torch.linspace(-1, 1, 40, dtype=D)[idx, None],)
                                          ).reshape(-1)

    ref = torch.autograd.functional.jacobian(f, params)
    torch.testing.assert_close(J, torch.cat([j.reshape(4, -1) for j in ref], 1))
    torch.testing.assert_close(r, residual_fn(idx).detach())


@pytest.mark.parametrize("lam", [1e-3, 1.0])
def test_full_batch_sng_is_the_levenberg_marquardt_step(regression, lam):
    net, residual_fn, n = regression
    idx = torch.arange(n)
    r, Jr = residual_jacobian(residual_fn, list(net.parameters()), idx)
    J, rs = Jr / math.sqrt(n), r / math.sqrt(n)  # the 1/(2n) sum r^2 scaling
    lm = -torch.linalg.solve(J.T @ J + lam * torch.eye(J.shape[1], dtype=D), J.T @ rs)
    before = _flat(net)
    opt = SNG(net.parameters(), num_residuals=n, batch_size=None, damping=lam, lr=1.0,
              line_search=None)
    opt.step(residual_fn)
    torch.testing.assert_close(_flat(net) - before, lm, rtol=1e-8, atol=1e-12)


def test_linear_full_batch_gauss_newton_converges_in_one_step(ls_problem):
    x = torch.zeros(12, dtype=D, requires_grad=True)
    opt = SNG([x], ls_problem.n, batch_size=None, damping=0.0, line_search=None)
    opt.step(ls_problem.residual_fn(x))
    assert ls_problem.relative_error(x) < 1e-10


def test_undamped_unit_step_zeroes_the_sampled_residual_with_min_norm_step(ls_problem):
    x = torch.randn(12, dtype=D).requires_grad_(True)
    x0 = x.detach().clone()
    idx = torch.tensor([1, 5, 9, 30, 44])
    opt = SNG([x], ls_problem.n, batch_size=5, damping=0.0, sampler=_replay([idx]),
              line_search=None)
    opt.step(ls_problem.residual_fn(x))
    A_S = ls_problem.A[idx]
    assert float((A_S @ x.detach() - ls_problem.b[idx]).abs().max()) < 1e-12
    torch.testing.assert_close(x.detach() - x0, -torch.linalg.pinv(A_S) @
                               (A_S @ x0 - ls_problem.b[idx]))


def test_spring_with_zero_momentum_is_sng(regression):
    net, residual_fn, n = regression
    net2 = torch.nn.Sequential(torch.nn.Linear(1, 6), torch.nn.Tanh(),
                               torch.nn.Linear(6, 1)).double()
    net2.load_state_dict(net.state_dict())
    x = torch.linspace(-1, 1, 40, dtype=D)[:, None]
    y = torch.sin(3 * x).reshape(-1)

    def residual_fn2(idx):
        return net2(x[idx]).reshape(-1) - y[idx]

    a = SNG(net.parameters(), n, batch_size=7, damping=1e-3, line_search=6, seed=4)
    b = SPRING(net2.parameters(), n, batch_size=7, damping=1e-3, momentum=0.0,
               norm_constraint=None, line_search=6, seed=4, adaptive_damping=True)
    for _ in range(5):
        a.step(residual_fn)
        b.step(residual_fn2)
    torch.testing.assert_close(_flat(net), _flat(net2), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("mu,lam", [(0.5, 1e-2), (0.8, 0.1)])
def test_spring_is_nesterov_kaczmarz_and_accelerated_sketch_project(ls_problem, mu, lam):
    g = torch.Generator().manual_seed(1)
    batches = [torch.randperm(ls_problem.n, generator=g)[:4] for _ in range(25)]
    x = torch.zeros(12, dtype=D, requires_grad=True)
    opt = SPRING([x], ls_problem.n, batch_size=4, damping=lam, momentum=mu,
                 norm_constraint=None, sampler=_replay(batches), line_search=None)
    traj = [x.detach().clone()]
    for _ in batches:
        opt.step(ls_problem.residual_fn(x))
        traj.append(x.detach().clone())
    nk = nesterov_kaczmarz(ls_problem.A, ls_problem.b, torch.zeros(12, dtype=D), batches,
                           lam, mu)
    asp = accelerated_sketch_project(ls_problem.A, ls_problem.b, torch.zeros(12, dtype=D),
                                     batches, *spring_parameters(mu), damping=lam)
    for t in range(len(traj)):
        torch.testing.assert_close(traj[t], nk[t], rtol=1e-9, atol=1e-11)
        torch.testing.assert_close(traj[t], asp[t], rtol=1e-9, atol=1e-11)
    # and momentum changes the trajectory (the identity is not trivially met)
    kz = kaczmarz(ls_problem.A, ls_problem.b, torch.zeros(12, dtype=D), batches, lam)
    assert float((kz[-1] - traj[-1]).norm()) > 1e-3


def test_accelerated_parameters_nu_one_give_spring_momentum():
    alpha = 0.04
    a, b, c = theoretical_parameters(alpha, 1.0)
    mu = momentum_from_rate(alpha)
    assert (a, b, c) == pytest.approx(spring_parameters(mu))
    assert a + b - a * b - a * c == pytest.approx(0.0, abs=1e-12)  # two-sequence condition
    a2, b2, c2 = theoretical_parameters(alpha, 4.0)  # nu > 1: not exactly Nesterov form
    assert abs(a2 + b2 - a2 * b2 - a2 * c2) > 1e-3


def test_norm_constraint_bounds_every_step(regression):
    net, residual_fn, n = regression
    C = 1e-4
    opt = SPRING(net.parameters(), n, batch_size=8, damping=1e-3, momentum=0.9,
                 norm_constraint=C, lr=10.0, seed=0)
    for _ in range(8):
        before = _flat(net)
        opt.step(residual_fn)
        assert float((_flat(net) - before).norm()) <= math.sqrt(C) * (1 + 1e-9)
    assert opt.last["step_norm"] == pytest.approx(math.sqrt(C), rel=1e-6)  # constraint active


def test_line_search_with_zero_step_never_increases_the_loss(regression):
    net, residual_fn, n = regression
    opt = SPRING(net.parameters(), n, batch_size=5, damping=1e-6, momentum=0.9,
                 norm_constraint=None, line_search=4, line_search_include_zero=True, lr=4.0,
                 line_search_on="full")
    full = torch.arange(n)
    losses = [float(0.5 * (residual_fn(full).detach() ** 2).mean())]
    for _ in range(15):
        opt.step(residual_fn)
        losses.append(float(0.5 * (residual_fn(full).detach() ** 2).mean()))
    assert all(b <= a + 1e-15 for a, b in zip(losses, losses[1:]))
    assert losses[-1] < 0.5 * losses[0]


def test_sng_beats_tuned_sgd_under_spectral_decay():
    from icml_sng import make_least_squares
    from icml_sng.train import fit_least_squares, tuned_sgd

    prob = make_least_squares(n=200, p=40, decay=1.0, seed=0)
    sgd, _ = tuned_sgd(prob, steps=300, batch_size=10, lr_grid=[1, 2, 4, 8, 16])
    sng = fit_least_squares(prob, "sng", steps=300, batch_size=10)
    assert sng.final < 1e-2 * sgd.final, (sng.final, sgd.final)


def test_float32_is_supported(ls_problem):
    A, b = ls_problem.A.float(), ls_problem.b.float()
    x = torch.zeros(12, requires_grad=True)
    opt = SNG([x], ls_problem.n, batch_size=6, damping=1e-6, seed=0)
    for _ in range(200):
        opt.step(lambda idx: A[idx] @ x - b[idx])
    assert x.dtype == torch.float32
    assert float((A @ x.detach() - b).norm() / b.norm()) < 1e-2


def test_svs_sampler_in_the_optimizer(ls_problem):
    x = torch.zeros(12, dtype=D, requires_grad=True)
    opt = SNG([x], ls_problem.n, batch_size=4, damping=0.0, sampler="svs", seed=0)
    for _ in range(60):
        opt.step(ls_problem.residual_fn(x), ls_problem.jacobian_fn(x))
    assert ls_problem.relative_residual(x) < 1e-2


# -- bad input ----------------------------------------------------------------------------
def test_bad_input_is_rejected_with_clear_errors(regression):
    net, residual_fn, n = regression
    with pytest.raises(ValueError, match="batch_size=41 is larger than num_residuals=40"):
        SNG(net.parameters(), n, batch_size=41)
    with pytest.raises(ValueError, match="damping"):
        SNG(net.parameters(), n, damping=-1.0)
    with pytest.raises(ValueError, match="momentum"):
        SPRING(net.parameters(), n, momentum=1.0)
    with pytest.raises(ValueError, match="sampler"):
        SNG(net.parameters(), n, sampler="volume")
    with pytest.raises(ValueError, match="one parameter group"):
        SNG([{"params": [net[0].weight]}, {"params": [net[2].weight]}], n)
    opt = SNG(net.parameters(), n, batch_size=4)
    with pytest.raises(ValueError, match="one residual per index"):
        opt.step(lambda idx: (net(torch.zeros(len(idx), 1, dtype=D)) ** 2).sum())
    with pytest.raises(TypeError, match="torch.Tensor"):
        opt.step(lambda idx: [0.0] * len(idx))


def test_non_finite_residuals_stop_and_keep_the_last_good_parameters(regression):
    net, residual_fn, n = regression
    opt = SNG(net.parameters(), n, batch_size=4, seed=0)
    opt.step(residual_fn)
    good = _flat(net)
    with pytest.raises(NonFiniteError, match="last good values"):
        opt.step(lambda idx: residual_fn(idx) * float("nan"))
    torch.testing.assert_close(_flat(net), good)

    def bad_jacobian(idx):
        r, J = residual_jacobian(residual_fn, list(net.parameters()), idx)
        return r, J * float("inf")

    with pytest.raises(NonFiniteError, match="Jacobian is not finite"):
        opt.step(residual_fn, bad_jacobian)
    with pytest.raises(ValueError, match="Jacobian has shape"):
        opt.step(residual_fn, lambda idx: (residual_fn(idx).detach(), torch.zeros(len(idx), 3)))
    torch.testing.assert_close(_flat(net), good)


def test_state_dict_round_trip_resumes_exactly(ls_problem):
    def make(x):
        return SPRING([x], ls_problem.n, batch_size=4, damping=1e-3, momentum=0.5,
                      norm_constraint=None, seed=3)

    x = torch.zeros(12, dtype=D, requires_grad=True)
    opt = make(x)
    for _ in range(3):
        opt.step(ls_problem.residual_fn(x))
    buf = io.BytesIO()  # a real checkpoint: state_dict() holds live references, as in torch
    torch.save(opt.state_dict(), buf)
    x_saved = x.detach().clone()
    for _ in range(3):
        opt.step(ls_problem.residual_fn(x))
    x2 = x_saved.clone().requires_grad_(True)
    opt2 = make(x2)
    buf.seek(0)
    opt2.load_state_dict(torch.load(buf, weights_only=True))
    for _ in range(3):
        opt2.step(ls_problem.residual_fn(x2))
    torch.testing.assert_close(x2.detach(), x.detach(), rtol=0, atol=0)


def test_accelerated_sketch_project_with_svs_constants_beats_kaczmarz():
    """Theory-driven acceleration: (alpha, nu) from the SVS closed form and enumeration give an
    accelerated method that beats plain Kaczmarz on the same SVS batches, while the nu = 1
    Nesterov momentum (which ignores nu) diverges here."""
    from icml_sng import make_least_squares, sample_svs_many, svs_nu_exact, svs_rate

    prob = make_least_squares(20, 8, 1.5, seed=0)
    k = 3
    J = prob.A / math.sqrt(k)  # rows scaled as the optimizers scale them
    alpha, nu = svs_rate(J, k), svs_nu_exact(J, k)
    assert 1.0 <= nu and 0 < alpha < 1
    g = torch.Generator().manual_seed(0)
    x0 = torch.zeros(8, dtype=D)
    errs = {"kaczmarz": [], "accelerated": [], "nesterov_nu1": []}
    for _ in range(5):
        batches = sample_svs_many(J, k, 200, 0.0, g)
        errs["kaczmarz"].append(prob.relative_error(kaczmarz(prob.A, prob.b, x0, batches)[-1]))
        errs["accelerated"].append(prob.relative_error(accelerated_sketch_project(
            prob.A, prob.b, x0, batches, *theoretical_parameters(alpha, nu))[-1]))
        errs["nesterov_nu1"].append(prob.relative_error(nesterov_kaczmarz(
            prob.A, prob.b, x0, batches, 0.0, momentum_from_rate(alpha))[-1]))
    med = {m: sorted(v)[2] for m, v in errs.items()}
    assert med["accelerated"] < 0.1 * med["kaczmarz"], med
    assert med["nesterov_nu1"] > med["kaczmarz"], med


@pytest.mark.parametrize("n,lam", [(15, 0.0), (15, 1e-4), (15, 0.5), (2, 1e-4), (2, 0.5)])
def test_sng_step_matches_a_hand_built_levenberg_marquardt_step(n, lam):
    """Independent of the optimizer's Jacobian code: r_i = a exp(b x_i) + c x_i^2 - y_i with its
    Jacobian written out by hand, LM step (J^T J + lam I)^-1 J^T r of 1/(2n) sum r^2 in numpy
    (pinv when lam = 0). n = 2 < p = 3 exercises the k x k (Woodbury) branch."""
    import numpy as np

    rng = np.random.default_rng(n)
    x, y = rng.uniform(-1, 1, n), rng.normal(size=n)
    th0 = np.array([0.7, -0.4, 1.3])
    e = np.exp(th0[1] * x)
    J = np.stack([e, th0[0] * x * e, x**2], 1) / math.sqrt(n)
    r = (th0[0] * e + th0[2] * x**2 - y) / math.sqrt(n)
    d = np.linalg.pinv(J) @ r if lam == 0 else np.linalg.solve(J.T @ J + lam * np.eye(3),
                                                                  J.T @ r)
    xt, yt = torch.tensor(x), torch.tensor(y)
    th = torch.tensor(th0, requires_grad=True)
    opt = SNG([th], n, batch_size=None, damping=lam, lr=1.0, line_search=None)
    opt.step(lambda i: th[0] * torch.exp(th[1] * xt[i]) + th[2] * xt[i] ** 2 - yt[i])
    np.testing.assert_allclose(th.detach().numpy(), th0 - d, rtol=1e-10, atol=1e-12)
    # a sampled batch of k rows is the LM step of the batch loss 1/(2k) sum_S r^2
    idx = torch.tensor([0, 1]) if n == 2 else torch.tensor([2, 5, 11, 13])
    k, s = len(idx), idx.numpy()
    th = torch.tensor(th0, requires_grad=True)
    opt = SNG([th], n, batch_size=k, damping=max(lam, 1e-2), sampler=_replay([idx]),
              line_search=None)
    opt.step(lambda i: th[0] * torch.exp(th[1] * xt[i]) + th[2] * xt[i] ** 2 - yt[i])
    Js, rs = J[s] * math.sqrt(n / k), r[s] * math.sqrt(n / k)
    ds = np.linalg.solve(Js.T @ Js + max(lam, 1e-2) * np.eye(3), Js.T @ rs)
    np.testing.assert_allclose(th.detach().numpy(), th0 - ds, rtol=1e-10, atol=1e-12)


def test_custom_sampler_rows_are_scaled_by_the_number_it_returns(ls_problem):
    """A callable sampler returning fewer rows than ``batch_size`` (here the default 32) gets
    the row scale 1/sqrt(len(idx)): the step is the LM step of the loss on those rows."""
    idx = torch.tensor([1, 5, 9, 30])
    x = torch.randn(12, dtype=D).requires_grad_(True)
    x0 = x.detach().clone()
    opt = SNG([x], ls_problem.n, damping=0.1, sampler=_replay([idx]), line_search=None)
    assert opt.batch_size == 32
    opt.step(ls_problem.residual_fn(x))
    A, r = ls_problem.A[idx] / 2.0, (ls_problem.A[idx] @ x0 - ls_problem.b[idx]) / 2.0
    ref = torch.linalg.solve(A.T @ A + 0.1 * torch.eye(12, dtype=D), A.T @ r)
    torch.testing.assert_close(x.detach(), x0 - ref, rtol=1e-10, atol=1e-12)
