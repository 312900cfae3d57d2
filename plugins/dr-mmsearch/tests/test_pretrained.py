"""The agent loop on the real pretrained SmolLM2-135M-Instruct (BPE tokenizer, 30 Llama blocks):
the tag check, rollout log-probs equal to a full forward (cache across turns, left padding), tool
outputs masked, and one GRPO step that trains only the last block."""


import pytest
import torch


@pytest.fixture(scope="module")
def smollm():
    from icml.testing import pretrained_or_skip

    return pretrained_or_skip("smollm2-135m-instruct")


@pytest.mark.pretrained
def test_rollout_and_one_grpo_step_on_smollm(smollm):
    from icml_dr_mmsearch.config import WorldConfig
    from icml_dr_mmsearch.env import DEFAULT_INSTRUCTION
    from icml_dr_mmsearch.experiment import build_world
    from icml_dr_mmsearch.grpo import GRPOConfig, RewardConfig, SearchGRPOTrainer, gold_trajectory
    from icml_dr_mmsearch.loss import token_logprobs
    from icml_dr_mmsearch.rollout import RolloutConfig, agent_rollout, trajectory_batch
    from icml_dr_mmsearch.tokenizer import check_tokenizer

    torch.manual_seed(0)
    model, tok = smollm
    check_tokenizer(tok)                                   # BPE writes every tag
    kb, env, _ = build_world(WorldConfig(n_entities=16, world_seed=0))
    env.instruction = DEFAULT_INSTRUCTION
    q3 = kb.questions_by_hops(3)[0]
    # the gold trajectory tokenises with the tool results masked, and re-decodes to the turns
    ids, mask = gold_trajectory(env, tok, q3)
    model_text = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert "".join(model_text.split()) == "".join("".join(env.gold_responses(q3)).split())
    # a sampled rollout is scored exactly as one forward pass scores it
    g = torch.Generator().manual_seed(0)
    rc = RolloutConfig(max_turn_tokens=6)
    trajs = agent_rollout(model, tok, env, [q3, kb.questions_by_hops(1)[0]], num_generations=2,
                          generator=g, config=rc)
    batch = trajectory_batch(trajs, tok.pad_token_id)
    with torch.no_grad():
        lp = token_logprobs(model, batch["input_ids"], batch["attention_mask"])
    lm = batch["loss_mask"][:, 1:].bool()
    for i, t in enumerate(trajs):
        assert torch.allclose(lp[i][lm[i]], torch.tensor(t.logprobs), atol=1e-3)
    # one GRPO step with only the last block trainable moves that block, nothing else
    model.requires_grad_(False)
    model.model.layers[-1].requires_grad_(True)
    before = {n: p.detach().clone() for n, p in model.named_parameters()
              if n.startswith(("model.layers.29.", "model.layers.0."))}
    try:
        trainer = SearchGRPOTrainer(model, tok, env, [q3], reward=RewardConfig(),
                                    args=GRPOConfig(num_generations=2, prompts_per_step=1,
                                                    beta=0.0, learning_rate=1e-3),
                                    rollout=rc, cpu=True)
        m = trainer.step()
        assert torch.isfinite(torch.tensor(m["loss"]))
        after = dict(model.named_parameters())
        assert all(torch.equal(before[n], after[n]) for n in before if ".0." in n)
        if m["advantage_abs"] > 0:
            assert any(not torch.equal(before[n], after[n]) for n in before if ".29." in n)
    finally:
        for n, p in model.named_parameters():
            if n in before:
                p.data.copy_(before[n])
        model.requires_grad_(True)
