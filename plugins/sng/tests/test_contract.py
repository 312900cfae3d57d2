"""Issue 23: torch's optimizer contract (closure returning the loss, residuals through
least_squares_loss, any batch size per step, tensor state that checkpoints and resumes bit for
bit) and the class defaults training the PINNs as the README shows."""

import io
import math

import pytest
import torch
from icml_sng import SNG, SPRING, PoissonPINN, least_squares_loss, mlp

D = torch.float64


def _flat(net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def _net(seed=0):
    g = torch.Generator().manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(1, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
    net = net.double()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=D))
    return net


X = torch.linspace(-1, 1, 40, dtype=D)[:, None]
Y = torch.sin(3 * X).reshape(-1)


@pytest.mark.parametrize("cls", [SNG, SPRING])
def test_closure_returns_the_loss_and_is_reevaluated_by_the_line_search(cls):
    net = _net()
    calls = []

    def closure():
        calls.append(1)
        return least_squares_loss(net(X[:10]).reshape(-1) - Y[:10])

    before = float(0.5 * ((net(X[:10]).reshape(-1) - Y[:10]) ** 2).mean())
    loss = cls(net.parameters()).step(closure)
    assert isinstance(loss, torch.Tensor) and loss.ndim == 0 and not loss.requires_grad
    assert float(loss) == pytest.approx(before, rel=1e-14)  # the loss before the step
    opt = cls(net.parameters(), line_search=None)
    calls.clear()
    opt.step(closure)
    assert len(calls) == 1  # no line search: one evaluation
    opt = cls(net.parameters(), line_search=5, line_search_early_stop=False)
    calls.clear()
    opt.step(closure)
    assert len(calls) == 1 + 5 and opt.last["line_search_evals"] == 5
    after = float(0.5 * ((net(X[:10]).reshape(-1) - Y[:10]) ** 2).mean())
    assert after < before


def test_closure_step_is_the_levenberg_marquardt_step_of_the_batch_loss():
    """Closure mode: rows of the mean loss are grad r_i / sqrt(k); 'sum' takes them as given."""
    net = _net()
    idx = torch.tensor([1, 4, 9, 20, 33])
    x, y = X[idx], Y[idx]
    J = torch.autograd.functional.jacobian(
        lambda *ps: torch.func.functional_call(
            net, dict(zip([n for n, _ in net.named_parameters()], ps)), (x,)).reshape(-1),
        tuple(p.detach() for p in net.parameters()))
    J = torch.cat([j.reshape(5, -1) for j in J], 1)
    r = (net(x).reshape(-1) - y).detach()
    for reduction, s in (("mean", 1 / math.sqrt(5)), ("sum", 1.0)):
        lam = 1e-3
        Js, rs = J * s, r * s
        ref = torch.linalg.solve(Js.T @ Js + lam * torch.eye(Js.shape[1], dtype=D), Js.T @ rs)
        net2 = _net()
        before = _flat(net2)
        SNG(net2.parameters(), damping=lam, line_search=None).step(
            lambda n=net2, red=reduction: least_squares_loss(n(x).reshape(-1) - y, reduction=red))
        torch.testing.assert_close(_flat(net2), before - ref, rtol=1e-9, atol=1e-12)


def test_a_plain_scalar_loss_or_a_missing_closure_is_a_clear_error():
    net = _net()
    opt = SNG(net.parameters())
    with pytest.raises(TypeError, match="least_squares_loss"):
        opt.step(lambda: ((net(X).reshape(-1) - Y) ** 2).mean())
    with pytest.raises(ValueError, match="needs a closure"):
        opt.step()
    with pytest.raises(ValueError, match="num_residuals"):
        opt.step(residual_fn=lambda idx: net(X[idx]).reshape(-1) - Y[idx])
    with pytest.raises(ValueError, match="reduction"):
        least_squares_loss(Y, reduction="max")
    with pytest.raises(ValueError, match="empty"):
        least_squares_loss(Y[:0])


def test_the_same_closure_drives_adam_and_lbfgs():
    """least_squares_loss is an ordinary loss: torch's optimizers can use the same closure."""
    for make in (lambda ps: torch.optim.Adam(ps, lr=1e-2),
                 lambda ps: torch.optim.LBFGS(ps, line_search_fn="strong_wolfe")):
        net = _net()
        opt = make(net.parameters())

        def closure(net=net, opt=opt):
            opt.zero_grad()
            loss = least_squares_loss(net(X).reshape(-1) - Y)
            loss.backward()
            return loss

        first = float(closure())
        for _ in range(5):
            opt.step(closure)
        assert float(closure()) < first


@pytest.mark.parametrize("cls", [SNG, SPRING])
def test_batch_size_may_change_every_step(cls):
    """No num_residuals at construction: closure batches of any size; indexed mode takes n per
    step."""
    net = _net()
    opt = cls(net.parameters())
    g = torch.Generator().manual_seed(0)
    for k in (3, 17, 40, 8):
        idx = torch.randperm(40, generator=g)[:k]
        opt.step(lambda idx=idx: least_squares_loss(net(X[idx]).reshape(-1) - Y[idx]))
        assert opt.last["rows"] == k
    opt = cls(net.parameters(), batch_size=6)
    for n in (10, 25, 40):
        opt.step(residual_fn=lambda idx: net(X[idx]).reshape(-1) - Y[idx], num_residuals=n)
        assert opt.last["rows"] == 6
    with pytest.raises(ValueError, match="batch_size=6 is larger than num_residuals=4"):
        opt.step(residual_fn=lambda idx: net(X[idx]).reshape(-1) - Y[idx], num_residuals=4)


def _checkpoint(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


@pytest.mark.parametrize("cls", [SNG, SPRING])
def test_checkpoint_resume_equals_uninterrupted_training(cls):
    """PINN, closure mode, the class defaults: 6 steps in one go vs 3 steps, a checkpoint
    (model, optimizer, batch generator) through torch.save/torch.load, a fresh model and
    optimizer, 3 more steps: bit-identical parameters and state."""
    def run(steps, start=None):
        pinn = PoissonPINN(mlp(1, [16], seed=0), dim=1, n_interior=60)
        opt = cls(pinn.model.parameters())
        g = torch.Generator().manual_seed(5)
        if start is not None:
            pinn.model.load_state_dict(start["model"])
            opt.load_state_dict(start["opt"])
            g.set_state(start["gen"])
        for _ in range(steps):
            idx = pinn.sample_batch(16, generator=g)
            opt.step(lambda idx=idx: pinn.batch_loss(idx))
        return pinn, opt, g

    pinn, opt, _ = run(6)
    half, opt_h, g_h = run(3)
    ck = _checkpoint({"model": half.model.state_dict(), "opt": opt_h.state_dict(),
                      "gen": g_h.get_state()})
    resumed, opt_r, _ = run(3, ck)
    assert torch.equal(_flat(resumed.model), _flat(pinn.model))
    # the adaptive damping lives in the param group and resumes with it
    assert opt.param_groups[0]["damping"] == opt_r.param_groups[0]["damping"]
    for p, q in zip(pinn.model.parameters(), resumed.model.parameters()):
        assert opt.state[p].keys() == opt_r.state[q].keys()
        for key, v in opt.state[p].items():
            assert isinstance(v, torch.Tensor), key
            assert torch.equal(v, opt_r.state[q][key]), key
    assert float(opt.state[next(pinn.model.parameters())]["step"]) == 6
    if cls is SPRING:
        assert "momentum_buffer" in opt.state[next(pinn.model.parameters())]


def test_indexed_mode_checkpoint_carries_the_sampler_generator():
    net = _net()
    opt = SPRING(net.parameters(), batch_size=5, seed=3)
    step = dict(residual_fn=lambda idx: net(X[idx]).reshape(-1) - Y[idx], num_residuals=40)
    for _ in range(3):
        opt.step(**step)
    ck = _checkpoint({"model": net.state_dict(), "opt": opt.state_dict()})
    for _ in range(3):
        opt.step(**step)
    net2 = _net(seed=9)
    net2.load_state_dict(ck["model"])
    opt2 = SPRING(net2.parameters(), batch_size=5, seed=123)  # another seed: the state wins
    opt2.load_state_dict(ck["opt"])
    for _ in range(3):
        opt2.step(residual_fn=lambda idx: net2(X[idx]).reshape(-1) - Y[idx], num_residuals=40)
    assert torch.equal(_flat(net2), _flat(net))


@pytest.mark.parametrize("cls,steps", [(SPRING, 120), (SNG, 400)])
def test_class_defaults_reach_1e_6_on_the_1d_pinn(cls, steps):
    """The README's example as written (class defaults, the PINN's default batch of 32
    interior + 2 boundary points), seed 0, one thread: relative L2 <= 1e-6. Measured (0.3.0,
    damping 1e-9, error checked every step): SPRING after 26 steps, SNG after 101."""
    torch.manual_seed(0)
    pinn = PoissonPINN(mlp(1, [32], seed=0), dim=1, n_interior=200)
    opt = cls(pinn.model.parameters())
    g = torch.Generator().manual_seed(0)
    for step in range(1, steps + 1):
        idx = pinn.sample_batch(generator=g)
        opt.step(lambda idx=idx: pinn.batch_loss(idx))
        if step % 10 == 0 and pinn.relative_l2() <= 1e-6:
            break
    assert pinn.relative_l2() <= 1e-6, (step, pinn.relative_l2())


def _pinn_2d_error(steps: int, seed: int, **kw) -> float:
    pinn = PoissonPINN(mlp(2, [32], seed=seed), dim=2, n_interior=30, n_boundary=30)
    opt = SNG(pinn.model.parameters(), **kw)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = pinn.sample_batch(generator=g)
        opt.step(lambda idx=idx: pinn.batch_loss(idx))
    return pinn.relative_l2()


def test_2d_fixed_damping_1e_9_does_not_stall_where_0_2_damping_did():
    """Issue 23's 2D stall (0.3): with 0.2's fixed ``damping=1e-10`` the line search has to
    shrink every step to ~2^-8 (the direction is dominated by singular values near 1e-5) and
    the error creeps (2.3e-5 after 200 steps, 2.6e-6 after 4000 for seed 0); fixed 1e-9 lets
    it take longer steps (README, "Why 2D stalled"). 200 steps, network and sampler seed 1:
    1e-9 must reach 1e-5, 1e-10 must not (else this test shows nothing)."""
    new = _pinn_2d_error(200, 1, adaptive_damping=False)
    old = _pinn_2d_error(200, 1, damping=1e-10, adaptive_damping=False)
    assert new <= 1e-5 < old, (new, old)


def test_2d_adaptive_damping_reaches_1e_6_where_fixed_damping_crawls():
    """Issue 23, 0.4: with any fixed damping the default 2D SNG run crawls once the fixed
    ``lambda`` is too small for the iterate (seed 2 of the 0.3 table ended at 1.9e-6 after
    60 CPU s; at its stalled iterate a full-batch step lowers the loss by 0.5 % with 1e-9 and
    by 60 % with 1e-6). The 0.4 default steers ``lambda`` by the line search's outcome.
    Network and sampler seed 1, 225 steps of the class defaults: <= 1e-6 (measured 3.5e-7;
    the 0.4 table's run first gets there at step 195); the same run with
    ``adaptive_damping=False`` (0.3) must stay above 2e-6 (measured 2.7e-6), else this test
    shows nothing."""
    new = _pinn_2d_error(225, 1)
    fixed = _pinn_2d_error(225, 1, adaptive_damping=False)
    assert new <= 1e-6 < 2e-6 < fixed, (new, fixed)


def test_short_2d_run_with_the_class_defaults():
    """2D Poisson (the ENGD paper's 30 x 30 grid + 120 boundary points, [2, 32, 1] tanh MLP),
    SNG with its class defaults on the PINN's default batch (256 interior + 120 boundary rows),
    60 steps: relative L2 <= 1e-2 (measured 4.7e-3; the adaptive damping of 0.4 is slower than
    0.3's fixed 1e-9 in the first ~100 steps, 1.7e-4 after 50 steps there, and faster to 1e-6:
    see the next test and the README). The same 60 steps of Adam (lr 1e-3, full batch) stay
    above 1e-2 (and fixed damping would be below 5e-4): the 2D problem is not trivial."""
    pinn = PoissonPINN(mlp(2, [32], seed=0), dim=2, n_interior=30, n_boundary=30)
    start = pinn.relative_l2()
    opt = SNG(pinn.model.parameters())
    g = torch.Generator().manual_seed(0)
    for _ in range(60):
        idx = pinn.sample_batch(generator=g)
        opt.step(lambda idx=idx: pinn.batch_loss(idx))
    assert pinn.relative_l2() <= 1e-2, pinn.relative_l2()
    ref = PoissonPINN(mlp(2, [32], seed=0), dim=2, n_interior=30, n_boundary=30)
    adam = torch.optim.Adam(ref.model.parameters(), lr=1e-3)
    for _ in range(60):
        adam.zero_grad()
        loss = ref.batch_loss()
        loss.backward()
        adam.step()
    assert ref.relative_l2() > 1e-2 and start > 0.1
