"""The GRPO loss (masking, KL, clipping), the trainer and the warm start."""

import pytest
import torch
from icml_dr_mmsearch.config import TrainConfig, WarmStartConfig, WorldConfig
from icml_dr_mmsearch.grpo import (
    AdvantageConfig,
    GRPOConfig,
    RewardConfig,
    SearchGRPOTrainer,
    TrajectoryReward,
    warm_start,
)
from icml_dr_mmsearch.loss import grpo_loss, low_var_kl, token_logprobs
from icml_dr_mmsearch.rollout import RolloutConfig, agent_rollout, trajectory_batch


def _batch(warm, tok, env, kb, seed=0):
    qs = [kb.questions_by_hops(3)[0], kb.questions_by_hops(2)[0]]
    g = torch.Generator().manual_seed(seed)
    trajs = agent_rollout(warm, tok, env, qs, num_generations=4, generator=g)
    return trajs, trajectory_batch(trajs, tok.pad_token_id)


def test_tool_output_tokens_get_zero_gradient(warm, tok, env, kb):
    trajs, b = _batch(warm, tok, env, kb)
    mask = b["loss_mask"][:, 1:]
    assert (mask == 0).logical_and(b["attention_mask"][:, 1:] == 1).any()   # tool tokens exist
    lp = token_logprobs(warm, b["input_ids"], b["attention_mask"])
    lp.retain_grad()
    adv = torch.randn(len(trajs))
    ref = lp.detach() + 0.1 * torch.randn_like(lp)
    loss, _ = grpo_loss(lp, lp.detach(), adv, mask, ref_logps=ref, beta=0.5)
    loss.backward()
    assert torch.all(lp.grad[mask == 0] == 0)
    assert lp.grad[mask == 1].abs().sum() > 0
    warm.zero_grad(set_to_none=True)


def test_masked_tokens_do_not_change_the_loss():
    g = torch.Generator().manual_seed(0)
    lp = torch.randn(3, 7, generator=g)
    old, ref = lp + 0.05 * torch.randn(3, 7, generator=g), lp + 0.1
    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 0]] * 3)
    adv = torch.tensor([1.0, -0.5, 0.2])
    base, _ = grpo_loss(lp, old, adv, mask, ref_logps=ref)
    junk = lp.clone()
    junk[mask == 0] = 1e4                          # nonsense where masked: no effect, no nan
    other, _ = grpo_loss(junk, old, adv, mask, ref_logps=ref)
    assert torch.isfinite(other) and float(other) == pytest.approx(float(base))


def test_kl_and_clipping():
    lp = torch.tensor([[-1.0, -2.0]])
    assert torch.all(low_var_kl(lp, lp) == 0)
    assert torch.all(low_var_kl(lp, lp + 0.3) > 0)
    adv = torch.tensor([1.0])
    mask = torch.ones(1, 2)
    # ratio far above 1 + eps with a positive advantage: clipped, no gradient
    x = torch.zeros(1, 2, requires_grad=True)
    loss, st = grpo_loss(x, torch.full((1, 2), -1.0), adv, mask, beta=0)
    loss.backward()
    assert st["clip_fraction"] == 1.0 and torch.all(x.grad == 0)
    with pytest.raises(ValueError, match="aggregation"):
        grpo_loss(x, x, adv, mask, aggregation="sum")


def _trainer(warm, tok, env, kb, reward="mmsearch_r1", adv="group", seed=0):
    import copy

    return SearchGRPOTrainer(copy.deepcopy(warm), tok, env, kb.questions,
                             reward=RewardConfig(kind=reward), advantage=AdvantageConfig(kind=adv),
                             args=GRPOConfig(num_generations=4, prompts_per_step=3),
                             rollout=RolloutConfig(), seed=seed, cpu=True)


@pytest.mark.parametrize("reward, adv", [("mmsearch_r1", "group"), ("gaussian", "proximity")])
def test_trainer_step_updates_and_is_deterministic(warm, tok, env, kb, reward, adv):
    t1 = _trainer(warm, tok, env, kb, reward, adv)
    before = [p.detach().clone() for p in t1.model.parameters()]
    m1 = [t1.step() for _ in range(2)]
    assert m1[0]["kl"] == pytest.approx(0.0, abs=1e-6)       # reference = the start policy
    assert any(not torch.equal(a, p) for a, p in zip(before, t1.model.parameters(),
                                                      strict=True))
    for k in ("reward", "accuracy", "turns", "collapse_rate", "diverse_rate", "loss"):
        assert k in m1[0]
    if reward == "gaussian":
        assert "mu" in m1[0]
    m2 = [_trainer(warm, tok, env, kb, reward, adv).step() for _ in range(1)]
    assert m2[0] == m1[0]


def test_trajectory_reward_ema_moves_mu(warm, tok, env, kb, play):
    q = kb.questions_by_hops(3)[0]
    rw = TrajectoryReward(RewardConfig(kind="gaussian", mu="ema", mu_init=1.0, mu_momentum=0.5))
    t = play(env, q, env.gold_responses(q))
    assert t.turns == 4
    rw([t])
    assert rw.target.value == pytest.approx(2.5)


def test_warm_start_learns_the_gold_turns(tiny, tok, env, kb):
    losses = warm_start(tiny, tok, env, kb.questions, steps=25, batch_size=8,
                        learning_rate=5e-3)
    assert losses[-1] < 0.5 * losses[0]


def test_bad_training_settings(warm, tok, env, kb):
    with pytest.raises(ValueError, match="num_generations"):
        GRPOConfig(num_generations=1)
    with pytest.raises(ValueError, match="reward kind"):
        RewardConfig(kind="f1")
    with pytest.raises(ValueError, match="advantage kind"):
        AdvantageConfig(kind="ppo")
    with pytest.raises(ValueError, match="questions"):
        SearchGRPOTrainer(warm, tok, env, [], cpu=True)


def test_evaluation_reports_the_held_out_split_separately(warm, tok, env, kb):
    from icml_dr_mmsearch.experiment import evaluate_policy

    train, held = kb.split(0.3, seed=0)
    m = evaluate_policy(warm, tok, env, train, num_generations=2, seed=0, held_out=held)
    assert 0 <= m["heldout_accuracy"] <= 1 and "heldout_accuracy_hop3" in m
    assert "heldout_accuracy_hop1" not in m          # 1-hop questions are all in training
    assert "accuracy_hop1" in m and "heldout_collapse_rate" in m
    plain = evaluate_policy(warm, tok, env, train, num_generations=2, seed=0)
    assert not any(k.startswith("heldout_") for k in plain)


def test_warm_start_and_training_never_see_held_out_questions(monkeypatch):
    import icml_dr_mmsearch.experiment as ex

    seen = []
    real_demos, real_trainer = ex.warm_start_data, ex.SearchGRPOTrainer

    def demos(env, questions, *a, **k):
        seen.extend(q.id for q in questions)
        return real_demos(env, questions, *a, **k)

    def trainer(model, tok, env, questions, **k):
        seen.extend(q.id for q in questions)
        return real_trainer(model, tok, env, questions, **k)

    monkeypatch.setattr(ex, "warm_start_data", demos)
    monkeypatch.setattr(ex, "SearchGRPOTrainer", trainer)
    cfg = TrainConfig(arms=["both"], world=WorldConfig(n_entities=16), hidden_size=16,
                      warm=WarmStartConfig(steps=2), steps=1,
                      grpo=GRPOConfig(prompts_per_step=2, num_generations=2),
                      eval_generations=1, holdout=0.3)
    res = ex.run_arms(cfg, seed=0)
    held = {q.id for q in res["warm"].heldout_questions}
    assert held and seen and not held & set(seen)
    assert "heldout_accuracy_hop3" in res["arms"]["both"]
