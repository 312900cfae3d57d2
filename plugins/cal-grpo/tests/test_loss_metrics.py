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
    logps = sequence_logprobs(model, b.input_ids, b.attention_mask, chunk_size=None)
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


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_chunked_logprobs_equal_full_forward_without_a_full_logit_block(arch):
    """Values and parameter gradients equal the one-pass log-probs; the output layer never
    returns more than ``chunk_size`` positions at once (forward or recomputation)."""
    from icml_cal_grpo.loss import sequence_logprobs

    from icml.models import tiny_causal_lm

    model = tiny_causal_lm(arch, seed=0, hidden_size=32)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 200, (3, 21), generator=g)
    att = torch.ones_like(ids)
    att[1, 15:] = 0
    keep = att[:, 1:] > 0
    params = list(model.parameters())
    full = sequence_logprobs(model, ids, att, 0.7, chunk_size=None)
    g_full = torch.autograd.grad(full[keep].sum(), params)
    widths = []
    h = model.lm_head.register_forward_hook(lambda m, a, o: widths.append(o.shape[1]))
    chunked = sequence_logprobs(model, ids, att, 0.7, chunk_size=6)
    g_chunk = torch.autograd.grad(chunked[keep].sum(), params)
    h.remove()
    assert torch.allclose(full, chunked, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g_full, g_chunk, strict=True))
    assert max(widths) == 6 and len(widths) == 2 * 4       # 20 positions: 4 chunks, recomputed
    # positions=: the output layer sees only the flagged positions (5 of them, one chunk)
    pos = torch.zeros_like(keep)
    pos[0, 3:5] = True
    pos[2, 17:20] = True
    widths.clear()
    h = model.lm_head.register_forward_hook(lambda m, a, o: widths.append(o.shape[1]))
    sel = sequence_logprobs(model, ids, att, 0.7, chunk_size=6, positions=pos)
    g_sel = torch.autograd.grad(sel.sum(), params)
    h.remove()
    assert widths == [5, 5]                                # forward + recomputation
    assert torch.allclose(sel[pos], full[pos], atol=1e-6) and (sel[~pos] == 0).all()
    g_ref = torch.autograd.grad(sequence_logprobs(model, ids, att, 0.7, chunk_size=None)[pos]
                                .sum(), params)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g_ref, g_sel, strict=True))
    with pytest.raises(ValueError, match="positions"):
        sequence_logprobs(model, ids, att, positions=pos[:, :-1])
    allowed = (5, 7, 9)
    assert torch.allclose(sequence_logprobs(model, ids, att, allowed_token_ids=allowed,
                                            chunk_size=None),
                          sequence_logprobs(model, ids, att, allowed_token_ids=allowed,
                                            chunk_size=7), atol=1e-6)


def test_k3_kl_value_and_gradient_by_enumeration():
    """A categorical policy over 6 tokens: E_pi[k3] = KL(pi || ref) and, differentiating
    through log pi only as the loss does, E_pi[grad k3] = autograd of KL(ref || pi)."""
    from icml_cal_grpo.loss import kl_k3

    g = torch.Generator().manual_seed(1)
    theta = torch.randn(6, dtype=torch.float64, generator=g).requires_grad_(True)
    ref = torch.log_softmax(torch.randn(6, dtype=torch.float64, generator=g), -1)
    logp = torch.log_softmax(theta, -1)
    pi = logp.exp().detach()
    k3 = kl_k3(logp, ref)                                   # one value per sampled token
    kl_fwd = (pi * (logp.detach() - ref)).sum()
    assert float((pi * k3).sum().detach()) == pytest.approx(float(kl_fwd), rel=1e-12)
    (est,) = torch.autograd.grad((pi * k3).sum(), theta)    # sum_a pi(a) grad k3(a)
    kl_rev = (ref.exp() * (ref - torch.log_softmax(theta, -1))).sum()
    (exact,) = torch.autograd.grad(kl_rev, theta)
    assert torch.allclose(est, exact, atol=1e-12)
    (fwd_grad,) = torch.autograd.grad((torch.softmax(theta, -1) *
                                       (torch.log_softmax(theta, -1) - ref)).sum(), theta)
    assert float((est - fwd_grad).norm()) > 1e-3            # it is not grad KL(pi || ref)


def test_kl_term_enters_the_loss_gradient():
    """With zero advantages the loss gradient is beta * (1 - exp(ref - logp)) / n_tokens on
    unmasked tokens and 0 elsewhere; beta > 0 without ref_logps is an error."""
    logps, adv, mask = _case()
    ref = logps.detach() + 0.3 * torch.randn(3, 6, generator=torch.Generator().manual_seed(2))
    loss, stats = clipped_pg_loss(logps, logps.detach(), torch.zeros_like(adv), mask,
                                  ref_logps=ref, beta=0.1)
    loss.backward()
    m = mask.float()
    expect = 0.1 * (1 - torch.exp(ref - logps.detach())) * m / m.sum()
    assert torch.allclose(logps.grad, expect, atol=1e-7) and stats["kl"] > 0
    with pytest.raises(ValueError, match="ref_logps"):
        clipped_pg_loss(logps, logps.detach(), adv, mask, beta=0.1)


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_loss_num_items_makes_micro_batches_sum_to_the_big_batch(loss_type):
    logps, adv, mask = _case()
    ref = logps.detach() - 0.2
    big, _ = clipped_pg_loss(logps, logps.detach() + 0.05, adv, mask, loss_type=loss_type,
                             ref_logps=ref, beta=0.05)
    n_items = {"dapo": float(mask.sum()), "grpo": 3.0, "dr_grpo": 18.0}[loss_type]
    parts = [clipped_pg_loss(logps[s], logps.detach()[s] + 0.05, adv[s], mask[s],
                             loss_type=loss_type, ref_logps=ref[s], beta=0.05,
                             num_items=n_items)[0] for s in (slice(0, 1), slice(1, 3))]
    assert float(sum(parts)) == pytest.approx(float(big), rel=1e-6)
