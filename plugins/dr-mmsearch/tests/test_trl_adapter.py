"""Our rollout, rewards and proximity advantages inside TRL's GRPOTrainer (extra 'trl')."""

import math
import os

import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("datasets")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from icml_dr_mmsearch.advantages import Structure, structural_proximity_advantages  # noqa: E402
from icml_dr_mmsearch.rewards import mmsearch_r1_reward  # noqa: E402
from icml_dr_mmsearch.trl_adapter import (  # noqa: E402
    GaussianTurnRewardFunc,
    ProximityGRPOTrainer,
    mmsearch_r1_reward_func,
    question_dataset,
)
from trl import GRPOConfig  # noqa: E402


def test_proximity_advantages_and_masks_in_trl(warm, tok, env, kb, tmp_path):
    import copy

    model = copy.deepcopy(warm).train()
    args = GRPOConfig(output_dir=str(tmp_path), num_generations=4, per_device_train_batch_size=8,
                      max_steps=1, learning_rate=1e-3, use_cpu=True, report_to="none",
                      save_strategy="no", beta=0.0, seed=0, disable_tqdm=True,
                      logging_steps=100)
    tr = ProximityGRPOTrainer(model, args=args, train_dataset=question_dataset(env, kb.questions),
                              processing_class=tok, env=env)
    q3, q1 = kb.questions_by_hops(3)[0], kb.questions_by_hops(1)[0]
    inputs = [{"prompt": f"<q:{q.id}>" + env.prompt(q)} for q in [q3] * 4 + [q1] * 4]
    out = tr._generate_and_score_completions(inputs)
    r = [mmsearch_r1_reward(x["responses"], x["answer"]) for x in inputs]
    expect = structural_proximity_advantages(
        r, [Structure(x["turns"], x["actions"], x["model_tokens"]) for x in inputs],
        group_ids=[i // 4 for i in range(8)], max_turns=env.max_rounds)
    assert torch.allclose(out["advantages"].double(), expect, atol=1e-5)
    for i, x in enumerate(inputs):         # tool results are masked through env_mask
        n_model = int((out["tool_mask"][i] * out["completion_mask"][i]).sum())
        assert n_model == x["model_tokens"]
    tr.train()


def test_reward_funcs():
    right = ["<reason> r </reason> <search><img></search>",
             "<reason> r </reason> <answer> paris </answer>"]
    assert mmsearch_r1_reward_func(None, None, responses=[right], answer=["paris"]) == \
        pytest.approx([0.91])
    from icml_dr_mmsearch.grpo import RewardConfig

    g = GaussianTurnRewardFunc(RewardConfig(kind="gaussian", mu="ema"))
    assert g.__name__ == "gaussian_turn_reward"
    g(None, None, responses=[right], answer=["paris"], required_searches=[1])
    assert g.target.value == pytest.approx(0.9 * 3 + 0.1 * 2)        # EMA moved toward 2 turns
    hop = GaussianTurnRewardFunc(RewardConfig(kind="gaussian", mu="hop"))   # the gold depth
    assert hop(None, None, responses=[right], answer=["paris"], required_searches=[1]) == \
        pytest.approx([0.9 + 0.1])                                   # 2 turns = 1 search + 1
    with pytest.raises(ValueError, match="required_searches"):
        hop(None, None, responses=[right], answer=["paris"])
    qt = GaussianTurnRewardFunc()                                    # default mu: the question
    assert qt(None, None, responses=[right], answer=["paris"],
              question_text=["<image> who founded the company in the image ?"]) == \
        pytest.approx([0.9 * (0.7 + 0.3 * math.exp(-0.5)) + 0.1])     # 2 turns, mu 3
    with pytest.raises(ValueError, match="question_text"):
        qt(None, None, responses=[right], answer=["paris"])
    with pytest.raises(ValueError, match="responses"):
        mmsearch_r1_reward_func(None, None)
