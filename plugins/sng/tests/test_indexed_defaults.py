"""Issue 69: indexed mode trains the PINNs with the class defaults when the problem supplies its
own sampling (``SNG(params, pinn)``, then ``opt.step()``), and a parameter group added after
construction is refused instead of silently never moving."""

from __future__ import annotations

import pytest
import torch
from icml_sng import SNG, SPRING
from icml_sng.pinn import PoissonPINN, mlp

SEEDS = range(5)


def _best_error(cls: type, seed: int, steps: int = 300) -> float:
    model = mlp(1, seed=seed)
    pinn = PoissonPINN(model, dim=1)
    opt = cls(model.parameters(), pinn, seed=seed)
    best = pinn.relative_l2()
    for step in range(1, steps + 1):
        opt.step()
        if step % 10 == 0:
            best = min(best, pinn.relative_l2())
            if best <= 1e-6:
                break
    return best


@pytest.mark.parametrize("cls", [SNG, SPRING], ids=["sng", "spring"])
def test_indexed_mode_with_the_problem_reaches_1e6_on_five_seeds(cls: type) -> None:
    best = [_best_error(cls, seed) for seed in SEEDS]
    assert max(best) <= 1e-6, best


def test_the_problem_supplies_the_stratified_sampler() -> None:
    model = mlp(1, seed=0)
    pinn = PoissonPINN(model, dim=1)
    opt = SNG(model.parameters(), pinn)
    assert opt.problem is pinn and opt.num_residuals == pinn.n
    assert opt.batch_size == PoissonPINN.DEFAULT_BATCH[1] + pinn.n_bdy
    opt.step()
    assert opt.last["rows"] == PoissonPINN.DEFAULT_BATCH[1] + pinn.n_bdy
    # an explicit sampler still wins over the problem's
    opt2 = SNG(model.parameters(), pinn, sampler="uniform", batch_size=8)
    opt2.step()
    assert opt2.last["rows"] == 8


def test_indexed_mode_with_n_alone_is_unchanged() -> None:
    model = mlp(1, seed=0)
    pinn = PoissonPINN(model, dim=1)
    opt = SNG(model.parameters(), pinn.n)
    assert opt.sampler == "uniform" and opt.problem is None and opt.batch_size == 32


def test_a_non_problem_in_place_of_n_is_refused() -> None:
    with pytest.raises(TypeError, match="num_residuals must be an int or a residual problem"):
        SNG([torch.zeros(2, requires_grad=True)], object())


@pytest.mark.parametrize("cls", [SNG, SPRING], ids=["sng", "spring"])
def test_add_param_group_is_refused(cls: type) -> None:
    a, b = torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)
    opt = cls([a])
    with pytest.raises(ValueError, match="does not support add_param_group"):
        opt.add_param_group({"params": [b]})
    assert len(opt.param_groups) == 1 and opt.param_groups[0]["params"] == [a]
