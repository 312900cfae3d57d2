"""CAL advantages inside TRL's GRPOTrainer (optional extra: pip install 'icml-cal-grpo[trl]')."""

import os

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


def _trainer(tmp_path, steps, mode="cal", feedback="!?"):
    tok = byte_tokenizer()
    model = tiny_causal_lm("qwen2", seed=0, hidden_size=64).train()
    task = ProbeTask(seed=0, feedback=feedback)
    args = GRPOConfig(output_dir=str(tmp_path), num_generations=8,
                      per_device_train_batch_size=16, max_steps=steps, learning_rate=3e-3,
                      use_cpu=True, report_to="none", logging_steps=100, save_strategy="no",
                      beta=0.0, loss_type="dapo", scale_rewards="none", seed=0,
                      max_completion_length=16, disable_tqdm=True)
    ds = Dataset.from_dict({"prompt": [task.prompt] * 64})
    tr = CALGRPOTrainer(model, args=args, train_dataset=ds, processing_class=tok, verifier=task,
                        rollout_config=task.rollout_config(tok), cal_mode=mode)
    return tr, task, tok


def test_per_token_advantages_follow_attempt_spans(tmp_path):
    tr, task, tok = _trainer(tmp_path, 1)
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
