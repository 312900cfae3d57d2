"""The hooks set torch's process-wide thread count for the run and must give the caller's
setting back afterwards, also when the run fails."""

import pytest
import torch
from icml_sng import plugin
from icml_sng.config import EvaluateConfig, TrainConfig

import icml
from icml.config import build_config

TINY = {
    "train": (TrainConfig, ["steps=2", "eval_every=1", "n_interior=8", "hidden=[4]",
                            "time_limit=0", "batch_size=4", "line_search=2",
                            "methods=adam,sng", "num_threads=1"]),
    "evaluate": (EvaluateConfig, ["decays=[0.0]", "n=20", "p=4", "batch_size=3", "steps=5",
                                  "sgd_lr_grid=[1.0]", "num_threads=1"]),
}
HOOKS = {"train": plugin.icml_train, "evaluate": plugin.icml_evaluate}
DRIVER = {"train": "fit_pinn", "evaluate": "tuned_sgd"}  # a function each hook calls


@pytest.fixture
def caller_threads():
    """A caller whose thread setting differs from the hooks' num_threads=1."""
    torch.set_num_threads(3)
    yield 3


@pytest.mark.parametrize("cap", ["train", "evaluate"])
def test_hook_restores_the_callers_thread_count(cap, tmp_path, caller_threads):
    cls, overrides = TINY[cap]
    ctx = icml.RunContext(out_dir=tmp_path, device="cpu", show_progress=False)
    result = HOOKS[cap](ctx, build_config(cls, {}, overrides))
    assert result.tables
    assert torch.get_num_threads() == caller_threads


@pytest.mark.parametrize("cap", ["train", "evaluate"])
def test_hook_restores_the_thread_count_when_the_run_fails(cap, tmp_path, caller_threads,
                                                            monkeypatch):
    import icml_sng.train

    seen = []

    def boom(*args, **kwargs):
        seen.append(torch.get_num_threads())
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(icml_sng.train, DRIVER[cap], boom)
    cls, overrides = TINY[cap]
    ctx = icml.RunContext(out_dir=tmp_path, device="cpu", show_progress=False)
    with pytest.raises(RuntimeError, match="simulated failure"):
        HOOKS[cap](ctx, build_config(cls, {}, overrides))
    assert seen == [1]  # the run itself used num_threads
    assert torch.get_num_threads() == caller_threads


def test_num_threads_zero_leaves_the_setting_alone(tmp_path, caller_threads):
    cls, overrides = TINY["evaluate"]
    ctx = icml.RunContext(out_dir=tmp_path, device="cpu", show_progress=False)
    plugin.icml_evaluate(ctx, build_config(cls, {}, [*overrides[:-1], "num_threads=0"]))
    assert torch.get_num_threads() == caller_threads
