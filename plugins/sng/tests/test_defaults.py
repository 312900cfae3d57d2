"""The PINN batch defaults per dimension (2D: rows per step well above the parameter count),
their config plumbing, and the late-run median the benchmark reports."""

import pytest
from icml_sng import SNG, SPRING, PoissonPINN, mlp
from icml_sng.config import TrainConfig
from icml_sng.train import DEFAULT_BATCH, History, make_optimizer

from icml.config import ConfigError, build_config


def _problem(dim):
    return PoissonPINN(mlp(dim, [32], seed=0), dim=dim, n_interior=200 if dim == 1 else 30,
                       n_boundary=30)


def test_2d_defaults_take_all_boundary_rows_and_about_3p_rows_per_step():
    prob = _problem(2)
    assert prob.num_params == 129 and prob.n_bdy == 120
    sng = make_optimizer("sng", prob)
    assert isinstance(sng, SNG)
    assert sng.batch_size == DEFAULT_BATCH[2] + prob.n_bdy == 376
    assert sng.batch_size > 2.5 * prob.num_params
    spring = make_optimizer("spring", prob)
    assert isinstance(spring, SPRING)
    assert spring.batch_size == 376 and spring.param_groups[0]["momentum"] == 0.5
    # explicit values win over the defaults (the old 2D setting: 64 + 64 rows)
    old = make_optimizer("spring", prob, batch_size=64, boundary_batch_size=64, momentum=0.3)
    assert old.batch_size == 128 and old.param_groups[0]["momentum"] == 0.3


def test_1d_defaults_are_unchanged():
    prob = _problem(1)
    sng = make_optimizer("sng", prob)
    assert sng.batch_size == 32 + 2
    assert make_optimizer("spring", prob).param_groups[0]["momentum"] == 0.5
    assert make_optimizer("sng", prob, sampler="uniform", batch_size=40).batch_size == 40


def test_stratified_batches_have_the_requested_interior_and_boundary_counts():
    import torch

    prob = _problem(2)
    opt = make_optimizer("sng", prob, batch_size=50, boundary_batch_size=7)
    idx, scale = opt.sampler(prob.n, opt.batch_size, torch.Generator().manual_seed(0))
    assert int((idx < prob.n_int).sum()) == 50 and int((idx >= prob.n_int).sum()) == 7
    assert len(set(idx.tolist())) == 57 and opt.batch_size == 57
    with pytest.raises(ValueError, match="boundary_batch_size must be >= 0"):
        make_optimizer("sng", prob, boundary_batch_size=-1)


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
    import icml_sng.train
    from icml_sng import plugin

    import icml

    seen = {}
    real = icml_sng.train.fit_pinn

    def spy(problem, method, **kw):
        opt = make_optimizer(method, problem, **{k: v for k, v in kw.items()
                                                 if k not in ("steps", "time_limit",
                                                              "eval_every", "progress")})
        seen[method] = (problem.n, opt.batch_size)
        return real(problem, method, **kw)

    monkeypatch.setattr(icml_sng.train, "fit_pinn", spy)
    cfg = build_config(TrainConfig, {}, ["dim=2", "methods=sng", "steps=1", "eval_every=1",
                                         "time_limit=0"])
    ctx = icml.RunContext(out_dir=tmp_path, device="cpu", show_progress=False)
    result = plugin.icml_train(ctx, cfg)
    assert seen == {"sng": (1020, 376)}
    assert "256 interior points" in result.notes
