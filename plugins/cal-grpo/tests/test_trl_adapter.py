"""CAL advantages inside TRL's GRPOTrainer (trl is in the plugin's test extra, so CI runs these)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("datasets")

from datasets import Dataset  # noqa: E402
from icml_cal_grpo import attempt_advantages  # noqa: E402
from icml_cal_grpo.tasks import ProbeTask  # noqa: E402
from icml_cal_grpo.trl_adapter import CALGRPOTrainer, verification_reward_func  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from icml.models import byte_tokenizer, tiny_causal_lm  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _trainer(tmp_path, steps, mode="cal", feedback="!?", scale_rewards="none", **cal):
    tok = byte_tokenizer()
    model = tiny_causal_lm("qwen2", seed=0, hidden_size=64).train()
    task = ProbeTask(seed=0, feedback=feedback)
    args = GRPOConfig(output_dir=str(tmp_path), num_generations=8,
                      per_device_train_batch_size=16, max_steps=steps, learning_rate=3e-3,
                      use_cpu=True, report_to="none", logging_steps=100, save_strategy="no",
                      beta=0.0, loss_type="dapo", scale_rewards=scale_rewards, seed=0,
                      max_completion_length=16, disable_tqdm=True)
    ds = Dataset.from_dict({"prompt": [task.prompt] * 64})
    tr = CALGRPOTrainer(model, args=args, train_dataset=ds, processing_class=tok, verifier=task,
                        rollout_config=task.rollout_config(tok), cal_mode=mode, **cal)
    return tr, task, tok


@pytest.mark.parametrize("scale_rewards", ["group", "none"])
def test_per_token_advantages_follow_attempt_spans(tmp_path, scale_rewards):
    # TRL's default scale_rewards="group" must not leak in: CAL's defaults are no scaling, LOO
    tr, task, tok = _trainer(tmp_path, 1, scale_rewards=scale_rewards)
    assert tr.cal_scale == "none" and tr.cal_baseline == "loo"
    inputs = [{"prompt": task.prompt} for _ in range(16)]
    out = tr._generate_and_score_completions(inputs)
    adv, ids = out["advantages"], out["completion_ids"]
    assert adv.shape == ids.shape
    mask = out["completion_mask"] * out["tool_mask"]
    assert float(adv[mask == 0].abs().max()) == 0.0           # feedback and padding
    k = task.max_attempts
    r = torch.zeros(16, k, dtype=torch.float64)
    reached = torch.zeros(16, k, dtype=torch.bool)
    for i, inp in enumerate(inputs):
        r[i, :len(inp["attempt_rewards"])] = torch.tensor(inp["attempt_rewards"])
        reached[i, :len(inp["attempt_rewards"])] = True
    expect = attempt_advantages(r, reached, group_size=8, mode="cal")
    arm_ids = set(task.arm_token_ids(tok))
    for i, inp in enumerate(inputs):
        assert len(inp["attempt_spans"]) == len(inp["attempt_rewards"])
        for kk, (s, e) in enumerate(inp["attempt_spans"]):
            assert ids[i, s].item() in arm_ids and e == s + 1
            assert float(adv[i, s]) == pytest.approx(float(expect[i, kk]))
    assert verification_reward_func(None, None, attempt_rewards=[[0.0, 1.0], [0.0]]) == [1.0, 0.0]


def test_trl_training_with_cal_learns_to_probe(tmp_path):
    tr, task, tok = _trainer(tmp_path, 20, feedback="!")
    before = task.exact_verification(tr.accelerator.unwrap_model(tr.model), tok)
    tr.train()
    after = task.exact_verification(tr.accelerator.unwrap_model(tr.model), tok)
    assert before < 0.5 and after > 0.8
    assert task.probe_first_prob(tr.accelerator.unwrap_model(tr.model), tok) > 0.5


def test_cal_options_reach_the_advantages(tmp_path):
    tr, task, tok = _trainer(tmp_path, 1, mode="trajectory", cal_scale="group",
                             cal_baseline="mean")
    inputs = [{"prompt": task.prompt} for _ in range(16)]
    out = tr._generate_and_score_completions(inputs)
    r = torch.zeros(16, 3, dtype=torch.float64)
    reached = torch.zeros(16, 3, dtype=torch.bool)
    for i, inp in enumerate(inputs):
        r[i, :len(inp["attempt_rewards"])] = torch.tensor(inp["attempt_rewards"])
        reached[i, :len(inp["attempt_rewards"])] = True
    expect = attempt_advantages(r, reached, group_size=8, mode="trajectory", scale="group",
                                baseline="mean")
    for i, inp in enumerate(inputs):
        for kk, (s, _) in enumerate(inp["attempt_spans"]):
            assert float(out["advantages"][i, s]) == pytest.approx(float(expect[i, kk]), abs=1e-5)


def test_bad_cal_options(tmp_path):
    with pytest.raises(ValueError, match="cal_scale"):
        _trainer(tmp_path, 1, cal_scale="std")
    with pytest.raises(ValueError, match="rollout_func"):
        _trainer(tmp_path, 1, rollout_func=lambda p, t: {})


@pytest.mark.slow
def test_two_processes_split_a_group(tmp_path):
    """accelerate launch, 2 CPU processes, one group of 8 split 4 + 4: each process's
    advantages are CAL's over the whole group, and the weights stay identical."""
    script = Path(__file__).with_name("trl_two_process.py")
    env = dict(os.environ, OMP_NUM_THREADS="1", TRL_EXPERIMENTAL_SILENCE="1",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
           "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
           "--dynamo_backend", "no", "--main_process_port", "0", str(script), str(tmp_path)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    a, b = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    assert (a["rank"], b["rank"], a["world"]) == (0, 1, 2)
    assert torch.equal(a["weights"], b["weights"])
    for sa, sb in zip(a["seen"], b["seen"], strict=True):
        verdicts, adv = sa["verdicts"] + sb["verdicts"], sa["adv"] + sb["adv"]
        assert len(verdicts) == 8
        r = torch.zeros(8, 3, dtype=torch.float64)
        reached = torch.zeros(8, 3, dtype=torch.bool)
        for i, v in enumerate(verdicts):
            r[i, :len(v)] = torch.tensor(v)
            reached[i, :len(v)] = True
        expect = attempt_advantages(r, reached, group_size=8, mode="cal")
        for i, v in enumerate(verdicts):
            for k in range(len(v)):
                assert adv[i][k] == pytest.approx(float(expect[i, k]), abs=1e-5)
