"""The clipped loss over attempt spans and the multi-attempt metrics."""

import pytest
import torch
from icml_cal_grpo.loss import clipped_pg_loss
from icml_cal_grpo.metrics import (
    attempt_metrics,
    correction_rate,
    per_attempt_pass_rate,
    verification_at_k,
)


def _case():
    g = torch.Generator().manual_seed(0)
    logps = (-torch.rand(3, 6, generator=g)).requires_grad_(True)
    adv = torch.randn(3, 6, generator=g)
    mask = torch.tensor([[0, 1, 1, 0, 1, 0], [0, 0, 1, 1, 1, 1], [0, 1, 0, 0, 0, 0]])
    return logps, adv, mask


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_masked_tokens_get_zero_gradient_and_on_policy_closed_form(loss_type):
    logps, adv, mask = _case()
    old = logps.detach().clone()
    old[mask == 0] = float("inf")   # garbage on masked tokens must not leak
    loss, _ = clipped_pg_loss(logps, old, adv, mask, loss_type=loss_type)
    loss.backward()
    grad = logps.grad
    assert torch.isfinite(grad).all() and float(grad[mask == 0].abs().max()) == 0.0
    m = mask.double()
    if loss_type == "grpo":
        w = m / m.sum(1, keepdim=True) / 3
    elif loss_type == "dr_grpo":
        w = m / 18
    else:
        w = m / m.sum()
    assert torch.allclose(grad.double(), (-adv * w).double(), atol=1e-6)


def test_clipping_stops_gradient_beyond_the_trust_region():
    logps = torch.zeros(1, 2, requires_grad=True)
    old = torch.log(torch.tensor([[1 / 1.5, 1 / 0.5]]))   # ratios 1.5 and 0.5
    adv = torch.tensor([[1.0, -1.0]])
    loss, stats = clipped_pg_loss(logps, old, adv, torch.ones(1, 2), epsilon=0.2)
    loss.backward()
    assert float(logps.grad.abs().max()) == 0.0 and stats["clip_fraction"] == 1.0


def test_loss_rejects_bad_shapes_and_types():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="shapes differ"):
        clipped_pg_loss(x, x, x, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="loss_type"):
        clipped_pg_loss(x, x, x, x, loss_type="ppo")


def test_metrics_closed_forms():
    r = torch.tensor([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0], [0, 1, 0]], dtype=torch.float)
    vk = [verification_at_k(r, k=k) for k in (1, 2, 3)]
    assert vk == pytest.approx([0.2, 0.6, 0.8])
    assert vk == sorted(vk)
    assert per_attempt_pass_rate(r) == pytest.approx([0.2, 0.4, 0.2])
    assert sum(per_attempt_pass_rate(r)) == pytest.approx(vk[-1])
    assert correction_rate(r) == pytest.approx([0.2, 0.5, 0.5])
    m = attempt_metrics(r)
    assert m["mean_attempts"] == pytest.approx((1 + 2 + 3 + 3 + 2) / 5)
    with pytest.raises(ValueError, match="k must be"):
        verification_at_k(r, k=0)


def test_ver_at_k_nondecreasing_on_random_rollouts():
    g = torch.Generator().manual_seed(4)
    r = (torch.rand(200, 5, generator=g) < 0.2).float()
    vk = [verification_at_k(r, k=k) for k in range(1, 6)]
    assert all(a <= b for a, b in zip(vk, vk[1:], strict=False)) and vk[-1] > vk[0]


def test_model_logits_for_prompt_and_feedback_tokens_get_zero_gradient(tok):
    """Through a real model: the loss's gradient w.r.t. the logits that predict prompt,
    feedback or padding tokens is exactly zero."""
    from icml_cal_grpo import attempt_advantages, multi_attempt_rollout, token_advantages
    from icml_cal_grpo.loss import sequence_logprobs
    from icml_cal_grpo.rollout import MultiAttemptConfig

    from icml.models import tiny_causal_lm

    model = tiny_causal_lm("qwen2", seed=0, hidden_size=32)
    cfg = MultiAttemptConfig(max_attempts=3, feedback=" wrong ", max_attempt_tokens=3,
                             on_length="verify")
    calls = iter(range(10_000))
    b = multi_attempt_rollout(model, tok, ["q: ", "longer q: "],
                              lambda p, a, e: next(calls) % 3 == 2, cfg, num_generations=4)
    adv = attempt_advantages(b.rewards, b.reached, group_size=4)
    assert float(adv.abs().sum()) > 0
    kept = {}

    def keep(module, args, out):
        out.retain_grad()
        kept["o"] = out

    h = model.lm_head.register_forward_hook(keep)
    logps = sequence_logprobs(model, b.input_ids, b.attention_mask)
    h.remove()
    mask = b.attempt_index[:, 1:] >= 0
    loss, _ = clipped_pg_loss(logps, logps.detach(), token_advantages(adv, b.attempt_index)[:, 1:],
                              mask)
    loss.backward()
    g = kept["o"].grad[:, :-1]                      # logits at t predict token t+1
    assert float(g[~mask].abs().max()) == 0.0
    assert float(g[mask].abs().max()) > 0.0


def test_constrained_score_is_that_of_the_sampling_distribution(tok, monkeypatch):
    """With constrained decoding the rollout samples from softmax over the allowed tokens; the
    score E_a[grad log p(a)] under that distribution must be zero (it is not for the
    full-vocabulary log-probs), and the trainer must use it."""
    from icml_cal_grpo import trainer as trainer_mod
    from icml_cal_grpo.loss import sequence_logprobs
    from icml_cal_grpo.tasks import ProbeTask

    from icml.models import tiny_causal_lm

    model = tiny_causal_lm("qwen2", seed=0, hidden_size=32)
    task = ProbeTask()
    arms = task.arm_token_ids(tok)
    ctx = tok("?g!", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([ctx + [a] for a in arms])
    att = torch.ones_like(ids)
    pi_c = torch.softmax(task.policy_logits(model, tok)[1], -1)    # state 1: history (guess,)
    for allowed, zero_mean in ((arms, True), (None, False)):
        model.zero_grad()
        lp = sequence_logprobs(model, ids, att, allowed_token_ids=allowed)[:, -1]
        if allowed is not None:   # the log-probs of the distribution the rollout sampled from
            assert torch.allclose(lp.exp().double(), pi_c, atol=1e-5)
        (pi_c.float().detach() * lp).sum().backward()
        norm = sum(float(p.grad.norm() ** 2) for p in model.parameters()
                   if p.grad is not None) ** 0.5
        assert (norm < 1e-5) if zero_mean else (norm > 1e-2)
    seen = []

    def spy(*args, **kwargs):
        seen.append(args[4] if len(args) > 4 else kwargs.get("allowed_token_ids"))
        return sequence_logprobs(*args, **kwargs)

    monkeypatch.setattr(trainer_mod, "sequence_logprobs", spy)
    tr = trainer_mod.AttemptGRPOTrainer(model, tok, task, [task.prompt],
                                        trainer_mod.AttemptGRPOConfig(num_generations=4),
                                        task.rollout_config(tok))
    tr.step()
    assert seen and all(tuple(s) == arms for s in seen)
