"""The batched multi-turn rollout: determinism, KV-cache reuse across turns, stop strings,
limits, loss masks, architectures and dtypes, tokenizer checks."""

import pytest
import torch
from icml_dr_mmsearch.env import STOP_STRINGS, SearchEnv
from icml_dr_mmsearch.loss import token_logprobs
from icml_dr_mmsearch.rollout import RolloutConfig, agent_rollout, trajectory_batch
from icml_dr_mmsearch.tokenizer import check_tokenizer, word_tokenizer


def _qs(kb):
    return [kb.questions_by_hops(h)[i] for h in (1, 2, 3) for i in range(2)]


def _run(model, tok, env, qs, seed=0, **kw):
    g = torch.Generator().manual_seed(seed)
    return agent_rollout(model, tok, env, qs, num_generations=3, generator=g,
                         config=RolloutConfig(**kw))


def test_same_seed_same_rollouts(warm, tok, env, kb):
    a = _run(warm, tok, env, _qs(kb), seed=5)
    b = _run(warm, tok, env, _qs(kb), seed=5)
    c = _run(warm, tok, env, _qs(kb), seed=6)
    assert [t.token_ids for t in a] == [t.token_ids for t in b]
    assert [t.responses for t in a] == [t.responses for t in b]
    assert [t.token_ids for t in a] != [t.token_ids for t in c]


@pytest.mark.parametrize("kv_reuse", [True, False])
def test_rollout_logprobs_match_a_full_forward(warm, tok, env, kb, kv_reuse):
    """The cached, left-padded, multi-turn decoding scores every sampled token exactly as one
    forward pass over the finished sequence does (so the cache across turns is right)."""
    trajs = _run(warm, tok, env, _qs(kb), seed=1, kv_reuse=kv_reuse)
    assert max(t.turns for t in trajs) >= 3              # several turns with tool outputs
    batch = trajectory_batch(trajs, tok.pad_token_id)
    with torch.no_grad():
        lp = token_logprobs(warm, batch["input_ids"], batch["attention_mask"])
    mask = batch["loss_mask"][:, 1:].bool()
    for i, t in enumerate(trajs):
        assert torch.allclose(lp[i][mask[i]], torch.tensor(t.logprobs), atol=2e-4)


def test_kv_reuse_encodes_each_token_once(warm, tok, env, kb):
    reuse = _run(warm, tok, env, _qs(kb), seed=2, kv_reuse=True)
    fresh = _run(warm, tok, env, _qs(kb), seed=2, kv_reuse=False)
    total = sum(len(t.token_ids) for t in reuse)
    assert reuse[0].stats["tokens_encoded"] <= total
    assert fresh[0].stats["tokens_encoded"] > reuse[0].stats["tokens_encoded"]


def test_tool_outputs_are_masked(warm, tok, env, kb):
    trajs = _run(warm, tok, env, _qs(kb), seed=3)
    for t in trajs:
        masked = [ids for ids, m in t.segments if not m]
        assert len(masked) == 1 + len(t.episode.observations)          # prompt + each result
        for ids, obs in zip(masked[1:], t.episode.observations, strict=True):
            assert tok.decode(ids).split() == obs.split()
        model_tok = sum(len(ids) for ids, m in t.segments if m)
        assert sum(t.loss_mask) == model_tok == len(t.logprobs) == t.length


def test_stop_strings_and_limits_with_a_random_model(tiny, tok, kb):
    env = SearchEnv(kb, max_rounds=3)
    trajs = _run(tiny, tok, env, _qs(kb), seed=0, max_turn_tokens=6)
    for t in trajs:
        assert t.turns <= 3 and t.episode.image_calls <= 1 and t.episode.text_calls <= 2
        for ids, m in t.segments:
            if m:
                assert 1 <= len(ids) <= 6
        for r in t.responses:   # nothing is generated after a stop string
            cut = [r.find(s) + len(s) for s in STOP_STRINGS if s in r]
            if cut:
                assert r[:min(cut)].strip() == r.strip()


def test_warm_policy_uses_the_tools(warm, tok, env, kb):
    trajs = _run(warm, tok, env, kb.questions_by_hops(3)[:4], seed=0)
    assert any(t.actions.startswith("IT") for t in trajs)
    for t in trajs:
        assert all(r.rstrip().endswith(STOP_STRINGS) for r in t.responses[:-1])


@pytest.mark.parametrize("arch, dtype", [("llama", torch.float32), ("qwen2", torch.bfloat16)])
def test_architectures_and_dtypes(tok, env, kb, arch, dtype):
    from icml_dr_mmsearch.experiment import make_tiny_model

    model = make_tiny_model(len(tok), arch=arch, hidden_size=32, dtype=dtype)
    trajs = _run(model, tok, env, _qs(kb)[:2], seed=0, max_turn_tokens=4)
    assert len(trajs) == 6 and all(t.turns >= 1 for t in trajs)


def test_tokenizer_without_tags_is_refused(tiny, env, kb):
    from icml.models import byte_tokenizer

    check_tokenizer(byte_tokenizer())                 # byte-level BPE can write any tag
    bad = word_tokenizer(["where", "was", "born"])
    with pytest.raises(ValueError, match="tag strings"):
        agent_rollout(tiny, bad, env, kb.questions[0])


def test_bad_rollout_input(tiny, tok, env, kb):
    with pytest.raises(ValueError, match="empty"):
        agent_rollout(tiny, tok, env, [])
    with pytest.raises(ValueError, match="num_generations"):
        agent_rollout(tiny, tok, env, kb.questions[0], num_generations=0)
    with pytest.raises(ValueError, match="Question"):
        agent_rollout(tiny, tok, env, ["where was x born ?"])
    with pytest.raises(ValueError, match="temperature"):
        RolloutConfig(temperature=0)


def test_byte_tokenizer_rollout(env, kb):
    """Any tokenizer that can write the tags works (here the core's byte-level one)."""
    from icml.models import byte_tokenizer, tiny_causal_lm

    model = tiny_causal_lm("qwen2", hidden_size=32)
    trajs = _run(model, byte_tokenizer(), env, _qs(kb)[:1], seed=0, max_turn_tokens=8)
    assert all(len(t.logprobs) == t.length for t in trajs)


@pytest.mark.parametrize("kv_reuse", [True, False])
def test_vlm_adapter_prefix_is_cached_and_scored_consistently(warm, tok, env, kb, kv_reuse):
    """The image prefix goes through inputs_embeds at prefill; the training forward with the
    same prefixes reproduces the sampled tokens' log-probs, and the image changes the policy."""
    from icml_dr_mmsearch.vision import VisionPrefix

    adapter = VisionPrefix.for_model(warm, n_tokens=3, scale=0.5)
    qs = [kb.questions_by_hops(3)[0], kb.questions_by_hops(1)[0]]       # with and without image
    g = torch.Generator().manual_seed(0)
    trajs = agent_rollout(warm, tok, env, qs, num_generations=2, generator=g, adapter=adapter,
                          config=RolloutConfig(kv_reuse=kv_reuse))
    batch = trajectory_batch(trajs, tok.pad_token_id)
    pre = [adapter.embed_image(t.image) if t.image is not None else None for t in trajs]
    with torch.no_grad():
        lp = token_logprobs(warm, batch["input_ids"], batch["attention_mask"], prefixes=pre)
        plain = token_logprobs(warm, batch["input_ids"], batch["attention_mask"])
    mask = batch["loss_mask"][:, 1:].bool()
    for i, t in enumerate(trajs):
        assert torch.allclose(lp[i][mask[i]], torch.tensor(t.logprobs), atol=2e-4)
    assert not torch.allclose(lp[0][mask[0]], plain[0][mask[0]], atol=1e-3)
    assert torch.allclose(lp[2][mask[2]], plain[2][mask[2]], atol=1e-5)   # no image, no prefix
