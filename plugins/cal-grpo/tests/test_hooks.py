"""Hooks with a user verifier given as 'module:function', and the README example."""

import pytest

from icml import ConfigError
from icml.models import byte_tokenizer, tiny_causal_lm
from icml.runner import RunFailed, run

VERIFIER_SRC = '''
def check(prompt, attempt, earlier):
    return len(earlier) == 1   # the second attempt always passes


def not_bool(prompt, attempt, earlier):
    return 1
'''


@pytest.mark.parametrize("backend", ["cache", "generate"])
def test_infer_with_user_verifier(tmp_path, monkeypatch, backend):
    (tmp_path / "calgrpo_user_checks.py").write_text(VERIFIER_SRC)
    monkeypatch.syspath_prepend(str(tmp_path))
    res = run("cal-grpo", "infer", overrides=["verifier=calgrpo_user_checks:check",
                                              'prompts=["ab", "cd"]', "max_attempt_tokens=3",
                                              "on_length=verify", "num_generations=2",
                                              f"backend={backend}"],
              out=tmp_path / "o", device="cpu", show_progress=False)
    assert res.metrics["ver@1"] == 0.0 and res.metrics["ver@2"] == 1.0
    assert res.metrics["mean_attempts"] == 2.0
    with pytest.raises(RunFailed, match="must return True or False"):
        run("cal-grpo", "infer", overrides=["verifier=calgrpo_user_checks:not_bool",
                                            'prompts=["ab"]', "on_length=verify"],
            out=tmp_path / "o2", device="cpu", show_progress=False)


@pytest.mark.parametrize("spec, match", [("nomodule_xyz:f", "cannot import"),
                                         ("justaname", "module:function")])
def test_bad_verifier_spec_is_named(tmp_path, spec, match):
    # a ConfigError raised inside a hook reaches the caller as a ConfigError (exit code 2)
    with pytest.raises(ConfigError, match=f"config key 'verifier'.*{match}"):
        run("cal-grpo", "evaluate", overrides=[f"verifier={spec}", 'prompts=["x"]'],
            out=tmp_path / "o", device="cpu", show_progress=False)


def test_runs_use_one_thread_unless_told_and_restore_it(tmp_path):
    """default_threads=1 holds only during the run (also a failing one); --threads wins."""
    import torch

    torch.set_num_threads(2)                 # conftest restores its own value afterwards
    res = run("cal-grpo", "infer", overrides=["num_generations=2"], out=tmp_path / "a",
              device="cpu", show_progress=False)
    assert res.status == "ok" and res.threads == 1 and torch.get_num_threads() == 2
    res = run("cal-grpo", "infer", overrides=["num_generations=2"], out=tmp_path / "c",
              device="cpu", show_progress=False, threads=2)
    assert res.threads == 2
    with pytest.raises(ConfigError):
        run("cal-grpo", "evaluate", overrides=["verifier=nomodule_xyz:f", 'prompts=["x"]'],
            out=tmp_path / "b", device="cpu", show_progress=False)
    assert torch.get_num_threads() == 2


def test_readme_example_runs():
    from icml_cal_grpo import MultiAttemptConfig, attempt_advantages, multi_attempt_rollout

    model, tokenizer = tiny_causal_lm("llama", seed=0, hidden_size=32), byte_tokenizer()
    batch = multi_attempt_rollout(model, tokenizer, ["2+2="],
                                  lambda p, a, earlier: a.strip() == "4",
                                  MultiAttemptConfig(max_attempts=3, max_attempt_tokens=4),
                                  num_generations=8)
    adv = attempt_advantages(batch.rewards, batch.reached, group_size=8, mode="cal")
    assert adv.shape == (8, 3) and bool(batch.reached[:, 0].all())


def test_missing_trl_gives_install_hint(monkeypatch):
    import sys

    import icml_cal_grpo

    monkeypatch.setitem(sys.modules, "trl", None)        # "import trl" now fails
    monkeypatch.delitem(sys.modules, "icml_cal_grpo.trl_adapter", raising=False)
    with pytest.raises(ImportError, match=r"icml-cal-grpo\[trl\]"):
        _ = icml_cal_grpo.CALGRPOTrainer
