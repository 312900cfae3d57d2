"""The classes' own defaults are the ones the drivers use (no hidden settings), the PINN batch
defaults per dimension (2D: rows per step well above the parameter count), config plumbing,
and the late-run median the benchmark reports."""

import pytest
import torch
from icml_sng import SNG, SPRING, PoissonPINN, mlp
from icml_sng.config import SNGOptions, SPRINGOptions, TrainConfig
from icml_sng.optim import DEFAULTS, SPRING_DEFAULTS, SPRING_VMC
from icml_sng.train import DEFAULT_BATCH, History, make_optimizer

from icml.config import ConfigError, build_config


def _problem(dim):
    return PoissonPINN(mlp(dim, [32], seed=0), dim=dim, n_interior=200 if dim == 1 else 30,
                       n_boundary=30)


def _group(opt):
    return {k: v for k, v in opt.param_groups[0].items() if k != "params"}


@pytest.mark.parametrize("method,cls", [("sng", SNG), ("spring", SPRING)])
def test_the_driver_uses_the_class_defaults(method, cls):
    """Issue 23: the job's driver passes nothing the class does not already default to."""
    prob = _problem(1)
    bare = cls(prob.model.parameters())
    assert _group(make_optimizer(method, prob)) == _group(bare)
    cfg = TrainConfig()
    via_config = make_optimizer(method, prob, sng=cfg.sng, spring=cfg.spring)
    assert _group(via_config) == _group(bare)
    assert via_config.options is getattr(cfg, method)  # the section itself, not a copy
    assert bare.options == getattr(cfg, method)  # one set of defaults: the option classes'


def test_class_defaults_and_the_public_vmc_preset():
    x = torch.zeros(3, requires_grad=True)
    g = _group(SPRING([x]))
    assert g["damping"] == DEFAULTS["damping"] == 1e-9
    assert g["momentum"] == SPRING_DEFAULTS["momentum"] == 0.5
    assert g["norm_constraint"] is None and g["line_search_on"] == "batch"
    assert len(g["line_search"]) == 12 and g["line_search_early_stop"]
    vmc = _group(SPRING([x], **SPRING_VMC))
    assert (vmc["damping"], vmc["momentum"], vmc["norm_constraint"], vmc["line_search"]) == \
        (1e-3, 0.99, 1e-3, None)
    assert _group(SNG([x]))["adaptive_damping"] is DEFAULTS["adaptive_damping"] is True  # 0.4
    assert g["adaptive_damping"] is SPRING_DEFAULTS["adaptive_damping"] is False
    assert vmc["adaptive_damping"] is False
    engd = make_optimizer("engd", _problem(1))
    assert not engd.param_groups[0]["line_search_early_stop"]  # the ENGD paper's full grid
    assert engd.param_groups[0]["adaptive_damping"] is False  # ... and its fixed damping


@pytest.mark.parametrize("cls", [SNG, SPRING])
@pytest.mark.parametrize("grid,factor", [([2.0**-7], 2.0), ([2.0**-4], 1.0), ([0.25], 0.5),
                                         (None, 1.0)])
def test_adaptive_damping_follows_the_line_search(cls, grid, factor):
    """The ADAPTIVE_DAMPING rule on a linear least-squares fit (every step is taken, so the
    chosen step is the one-point grid's): a step of at most 2^-6 doubles lambda, one of at
    least 2^-3 halves it, anything between keeps it; no line search keeps it fixed, and
    ``adaptive_damping=False`` always does."""
    from icml_sng import least_squares_loss

    g = torch.Generator().manual_seed(0)
    A = torch.randn(12, 3, generator=g, dtype=torch.float64)
    b = torch.randn(12, generator=g, dtype=torch.float64)
    for adaptive in (True, False):
        x = torch.zeros(3, dtype=torch.float64, requires_grad=True)
        opt = cls([x], damping=1e-6, line_search=grid, adaptive_damping=adaptive)
        for step in range(1, 4):
            opt.step(lambda x=x: least_squares_loss(A @ x - b))
            want = 1e-6 * (factor**step if adaptive else 1.0)
            assert opt.param_groups[0]["damping"] == pytest.approx(want, rel=1e-12)
            assert opt.last["damping"] == pytest.approx(want / (factor if adaptive else 1))
    with pytest.raises(ValueError, match="adaptive_damping"):
        SNG([x], adaptive_damping="yes")


def test_adaptive_damping_stays_within_its_bounds():
    from icml_sng import least_squares_loss
    from icml_sng.optim import ADAPTIVE_DAMPING

    x = torch.ones(2, dtype=torch.float64, requires_grad=True)
    for damping, grid, steps, bound in [(0.6 * ADAPTIVE_DAMPING["max"], [2.0**-8], 2, "max"),
                                        (1.5 * ADAPTIVE_DAMPING["min"], [1.0], 2, "min"),
                                        (0.0, [2.0**-8], 1, "min")]:  # 0 is raised to min
        opt = SNG([x], damping=damping, line_search=grid)
        for _ in range(steps):
            opt.step(lambda: least_squares_loss(x - 1.0 + 1e-3))
        assert opt.param_groups[0]["damping"] == ADAPTIVE_DAMPING[bound]


@pytest.mark.parametrize("dim,rows", [(1, 32 + 2), (2, 256 + 120)])
def test_default_batches_take_all_boundary_rows(dim, rows):
    prob = _problem(dim)
    idx = prob.sample_batch(generator=torch.Generator().manual_seed(0))
    assert idx.numel() == rows == DEFAULT_BATCH[dim] + prob.n_bdy
    assert int((idx < prob.n_int).sum()) == DEFAULT_BATCH[dim]
    assert len(set(idx.tolist())) == rows
    if dim == 2:
        assert rows > 2.5 * prob.num_params  # well away from p = 129 (README, 2D study)
    idx = prob.sample_batch(50 if dim == 2 else 20, 1, torch.Generator().manual_seed(1))
    assert int((idx >= prob.n_int).sum()) == 1 and idx.numel() == (51 if dim == 2 else 21)
    with pytest.raises(ValueError, match="k_interior must be in"):
        prob.sample_batch(prob.n_int + 1)


@pytest.mark.parametrize("dim", [1, 2])
def test_batch_loss_is_the_pinn_loss_on_the_batch(dim):
    prob = _problem(dim)
    assert prob.batch_loss().item() == pytest.approx(prob.loss(), rel=1e-12)
    idx = prob.sample_batch(generator=torch.Generator().manual_seed(0))
    full = prob.residual_fn(torch.arange(prob.n)).detach()
    ri = full[idx[idx < prob.n_int]] / prob.w_int
    rb = full[idx[idx >= prob.n_int]] / prob.w_bdy
    want = 0.5 * (ri**2).mean() + 0.5 * (rb**2).mean()
    loss = prob.batch_loss(idx)
    assert float(loss) == pytest.approx(float(want), rel=1e-12)
    assert loss.residuals.shape == (idx.numel(),)


def test_config_auto_values_and_bounds():
    cfg = build_config(TrainConfig, {}, ["dim=2"])
    assert cfg.batch_size == 0 and cfg.boundary_batch_size == 0 and cfg.n_interior == 0
    with pytest.raises(ConfigError, match="n_interior must be >= 2"):
        build_config(TrainConfig, {}, ["n_interior=1"])
    with pytest.raises(ConfigError, match="boundary_batch_size"):
        build_config(TrainConfig, {}, ["boundary_batch_size=-1"])


def test_late_median_is_taken_over_the_last_tenth_of_the_iterations():
    h = History("adam")
    h.steps = list(range(0, 1001, 10))          # 0, 10, ..., 1000
    h.errors = [float(s) for s in h.steps]      # error = step
    # last 10% of 1000 iterations: steps 910..1000 (10 points) -> median of 910..1000
    assert h.late_median() == pytest.approx(955.0)
    assert h.late_median(0.5) == pytest.approx(755.0)  # steps 510..1000, 50 points
    h.errors[-1] = 1e9  # one spike does not move a median
    assert h.late_median() == pytest.approx(955.0)
    short = History("x", steps=[0, 7], errors=[3.0, 2.0])
    assert short.late_median() == 2.0


def test_cli_2d_run_is_the_engd_paper_grid_with_376_rows(tmp_path, monkeypatch):
    """`icml run sng --set dim=2` trains on the 30 x 30 grid + 4 x 30 boundary points (1020
    residuals, not 200 x 200) with 256 + 120 rows per SNG step."""
    from icml_sng import plugin

    import icml

    seen = []
    real = PoissonPINN.sample_batch

    def spy(self, *a, **kw):
        idx = real(self, *a, **kw)
        seen.append((self.n, idx.numel()))
        return idx

    monkeypatch.setattr(PoissonPINN, "sample_batch", spy)
    cfg = build_config(TrainConfig, {}, ["dim=2", "methods=sng", "steps=1", "eval_every=1",
                                         "time_limit=0"])
    ctx = icml.RunContext(out_dir=tmp_path, device="cpu", show_progress=False)
    result = plugin.icml_train(ctx, cfg)
    assert seen == [(1020, 376)]
    assert "256 interior points" in result.notes


def test_spring_and_sng_share_one_keyword_signature():
    """The shared keywords are declared once (the base class); SPRING adds momentum and C.
    Both are keyword-only after ``num_residuals`` and SPRING's signature lists them all."""
    import inspect

    sng, spring = inspect.signature(SNG), inspect.signature(SPRING)
    shared = {k: v.default for k, v in sng.parameters.items()}
    own = {k: v.default for k, v in spring.parameters.items() if k in shared}
    assert own == {**shared, "adaptive_damping": False}  # SPRING's one different default
    assert set(spring.parameters) - set(shared) == {"momentum", "norm_constraint"}
    assert all(v.kind is v.KEYWORD_ONLY for k, v in spring.parameters.items()
               if k not in ("params", "num_residuals"))
    x = torch.zeros(3, requires_grad=True)
    with pytest.raises(TypeError):
        SNG([x], momentum=0.5)  # SNG has no momentum: not silently accepted
    with pytest.raises(TypeError):
        SPRING([x], None, 1.0)  # lr is keyword-only
    with pytest.raises(TypeError, match="options"):
        SPRING([x], momentum=0.2, options=SPRINGOptions())  # one place per setting
    with pytest.raises(TypeError, match="SPRINGOptions"):
        SPRING([x], options=SNGOptions())
    with pytest.raises(TypeError, match="SNGOptions"):
        SNG([x], options=SPRINGOptions())  # SNG would drop the momentum silently
    opt = SPRING([x], lr=0.5, damping=1e-3, momentum=0.2, batch_size=4)
    g = _group(opt)
    assert (g["lr"], g["damping"], g["momentum"], opt.batch_size) == (0.5, 1e-3, 0.2, 4)


def test_clock_and_init_seed_reach_the_driver(tmp_path, monkeypatch):
    """``clock=cpu`` times training with ``time.process_time``; ``init_seed`` fixes the
    network's initialisation while ``--seed`` still seeds the batches (bench.py's 2D table)."""
    import time

    import icml_sng.pinn as pinn
    import icml_sng.train as train
    from icml_sng import plugin

    import icml

    seen = []
    real_mlp, real_fit = pinn.mlp, train.fit_pinn

    def spy_mlp(*a, **kw):
        seen.append(("init", kw["seed"]))
        return real_mlp(*a, **kw)

    def spy_fit(*a, **kw):
        seen.append(("fit", kw["seed"], kw["clock"]))
        return real_fit(*a, **kw)

    monkeypatch.setattr(pinn, "mlp", spy_mlp)
    monkeypatch.setattr(train, "fit_pinn", spy_fit)
    for seed, init_seed, clock in ((3, 0, "cpu"), (3, -1, "wall")):
        cfg = build_config(TrainConfig, {}, ["methods=sng", "steps=1", "eval_every=1",
                                             "n_interior=8", "hidden=[4]", f"clock={clock}",
                                             f"init_seed={init_seed}"])
        ctx = icml.RunContext(out_dir=tmp_path / f"{init_seed}", device="cpu", seed=seed,
                              show_progress=False)
        plugin.icml_train(ctx, cfg)
    assert seen == [("init", 0), ("fit", 3, time.process_time),
                    ("init", 3), ("fit", 3, time.perf_counter)]
