"""`icml run sng` uses one torch thread (the plugin's default_threads) unless the user passes
--threads, and the caller's process-wide setting comes back afterwards, also when the run fails."""

import pytest
import torch

from icml.runner import RunFailed, run

TINY = {
    "train": ["steps=2", "eval_every=1", "n_interior=8", "hidden=[4]", "time_limit=0",
              "batch_size=4", "sng.line_search=2", "methods=adam,sng"],
    "evaluate": ["decays=[0.0]", "n=20", "p=4", "batch_size=3", "steps=5", "sgd_lr_grid=[1.0]"],
}
DRIVER = {"train": "fit_pinn", "evaluate": "tuned_sgd"}  # a function each hook calls


@pytest.fixture
def caller_threads():
    """A caller whose thread setting differs from the plugin's default of 1."""
    torch.set_num_threads(3)
    yield 3


@pytest.mark.parametrize("cap", ["train", "evaluate"])
def test_runs_use_one_thread_and_restore_the_callers(cap, tmp_path, caller_threads):
    res = run("sng", cap, overrides=TINY[cap], out=tmp_path, device="cpu", show_progress=False)
    assert res.tables and res.threads == 1
    assert torch.get_num_threads() == caller_threads


@pytest.mark.parametrize("cap", ["train", "evaluate"])
def test_thread_count_during_the_run_and_after_a_failure(cap, tmp_path, caller_threads,
                                                         monkeypatch):
    import icml_sng.train

    seen = []

    def boom(*args, **kwargs):
        seen.append(torch.get_num_threads())
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(icml_sng.train, DRIVER[cap], boom)
    for threads in (None, 2):  # the plugin's default, then the user's --threads
        with pytest.raises(RunFailed, match="simulated failure"):
            run("sng", cap, overrides=TINY[cap], out=tmp_path, device="cpu",
                show_progress=False, threads=threads)
        assert torch.get_num_threads() == caller_threads
    assert seen == [1, 2]
