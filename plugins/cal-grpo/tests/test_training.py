"""The claim at small scale: CAL (like trajectory GRPO) learns probe-then-exploit, naive
per-attempt weighting stays near the myopic policy."""

import math

import pytest
import torch
from icml_cal_grpo.experiment import train_probe_lm
from icml_cal_grpo.tabular import probe_env, train_tabular
from icml_cal_grpo.tasks import ProbeTask
from icml_cal_grpo.trainer import AttemptGRPOConfig, AttemptGRPOTrainer

from icml.models import byte_tokenizer, tiny_causal_lm

MYOPIC = 1 - 0.7 ** 3


def test_tabular_cal_learns_to_probe_naive_stays_myopic():
    env = probe_env()
    cal = [train_tabular(env, "cal", steps=150, lr=1.0, seed=s)[-1] for s in range(2)]
    naive = [train_tabular(env, "naive", steps=150, lr=1.0, seed=s)[-1] for s in range(2)]
    assert min(cal) > 0.9
    assert max(naive) < MYOPIC + 0.03


def _make(seed, hidden=32):
    return tiny_causal_lm("qwen2", seed=seed, hidden_size=hidden), byte_tokenizer()


def _make64(seed):
    return _make(seed, 64)


def test_tiny_lm_cal_beats_naive():
    cal = train_probe_lm("cal", 0, make_model=_make64, steps=20, num_generations=8,
                         prompts_per_step=2)
    naive = train_probe_lm("naive", 0, make_model=_make64, steps=20, num_generations=8,
                           prompts_per_step=2)
    assert cal.ver[-1] > 0.85 and not math.isnan(cal.steps_to_target)
    assert naive.ver[-1] < MYOPIC + 0.05 and cal.ver[-1] - naive.ver[-1] > 0.2
    assert cal.probe_first > 0.5 > naive.probe_first


def test_training_is_deterministic_under_a_seed():
    a = train_probe_lm("cal", 3, make_model=_make, steps=3)
    b = train_probe_lm("cal", 3, make_model=_make, steps=3)
    assert a.ver == b.ver


def test_user_model_loaded_from_save_pretrained(tmp_path):
    from icml.runner import run

    m, tok = _make(0)
    m.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    res = run("cal-grpo", "train", overrides=[f"model={tmp_path / 'm'}", "steps=2", "seeds=1",
                                              "modes=cal", "estimator_groups=0"],
              out=tmp_path / "out", device="cpu", show_progress=False)
    assert res.status == "ok" and 0 < res.metrics["ver@3_cal"] <= 1
    res = run("cal-grpo", "evaluate", overrides=[f"model={tmp_path / 'm'}",
                                                 "num_generations=8"],
              out=tmp_path / "out2", device="cpu", show_progress=False)
    assert res.status == "ok" and res.metrics["ver@1"] <= res.metrics["ver@3"]


def test_trainer_bad_config():
    with pytest.raises(ValueError, match="mode"):
        AttemptGRPOConfig(mode="vanilla")
    with pytest.raises(ValueError, match="num_generations"):
        AttemptGRPOConfig(num_generations=1)
    m, tok = _make(0)
    task = ProbeTask()
    with pytest.raises(ValueError, match="prompts is empty"):
        AttemptGRPOTrainer(m, tok, task, [], rollout=task.rollout_config(tok))


def test_train_config_rejects_unknown_mode():
    from icml_cal_grpo.config import TrainConfig

    from icml import ConfigError
    from icml.config import build_config

    with pytest.raises(ConfigError, match="modes"):
        build_config(TrainConfig, {}, ["modes=cal,ppo"])
    with pytest.raises(ConfigError, match="max_attempts"):
        build_config(TrainConfig, {}, ["max_attempts=0"])
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("kw", [{"mode": "td", "lam": 0.5, "scale": "position"},
                                {"mode": "trajectory", "baseline": "mean", "scale": "group",
                                 "loss_type": "grpo", "num_iterations": 2}])
def test_estimator_options_train(kw):
    mode = kw.pop("mode")
    c = train_probe_lm(mode, 1, make_model=_make, steps=2, **kw)
    assert len(c.ver) == 2 and all(0 < v < 1 for v in c.ver)
