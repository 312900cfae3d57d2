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
    from icml_cal_grpo.config import AdvantageConfig

    kw = dict(kw)
    mode = kw.pop("mode")
    adv = AdvantageConfig(**{k: kw.pop(k) for k in ("lam", "scale", "baseline") if k in kw})
    c = train_probe_lm(mode, 1, make_model=_make, steps=2, advantage=adv, **kw)
    assert len(c.ver) == 2 and all(0 < v < 1 for v in c.ver)


def _rollouts(model, tok, n_gen=6):
    from icml_cal_grpo import attempt_advantages, multi_attempt_rollout, token_advantages
    from icml_cal_grpo.rollout import MultiAttemptConfig

    calls = iter(range(10_000))
    cfg = MultiAttemptConfig(max_attempts=3, feedback=" no ", max_attempt_tokens=4,
                             on_length="verify")
    b = multi_attempt_rollout(model, tok, ["a: ", "bb: "], lambda p, a, e: next(calls) % 4 == 3,
                              cfg, num_generations=n_gen,
                              generator=torch.Generator().manual_seed(0))
    adv = attempt_advantages(b.rewards, b.reached, group_size=n_gen)
    return b, token_advantages(adv, b.attempt_index), cfg


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_gradient_accumulation_equals_one_big_batch(loss_type):
    """One SGD step (lr 1, no clipping) from 1, 3 and 12 micro-batches moves every weight by
    the same amount, KL term included."""
    import copy

    m0, tok = _make(0)
    b, tok_adv, cfg = _rollouts(m0, tok)
    deltas = []
    for gas in (1, 3, 12):
        m = copy.deepcopy(m0)
        ref = tiny_causal_lm("qwen2", seed=5, hidden_size=32)
        args = AttemptGRPOConfig(num_generations=6, prompts_per_step=2, loss_type=loss_type,
                                 beta=0.05, gradient_accumulation_steps=gas, max_grad_norm=0,
                                 logprob_chunk_size=3)
        tr = AttemptGRPOTrainer(m, tok, lambda p, a, e: False, ["x"], args, cfg,
                                optimizer=torch.optim.SGD(m.parameters(), lr=1.0), ref_model=ref)
        st = tr.update(b.input_ids, b.attention_mask, b.attempt_index, tok_adv)
        assert st["kl"] > 0
        deltas.append(torch.cat([(p1 - p0).detach().flatten() for p1, p0 in
                                 zip(m.parameters(), m0.parameters(), strict=True)]))
    assert float(deltas[0].abs().max()) > 1e-4
    for d in deltas[1:]:
        assert torch.allclose(d, deltas[0], atol=1e-6, rtol=1e-4)


def test_kl_reference_defaults_frozen_copy_or_lora_base():
    """beta > 0: the reference is a frozen copy (KL 0 on the first update) or, for a LoRA model,
    the model with its adapters off (the same log-probs as the base model)."""
    import copy

    from peft import LoraConfig, get_peft_model

    m, tok = _make(0)
    b, tok_adv, cfg = _rollouts(m, tok, n_gen=4)
    args = AttemptGRPOConfig(num_generations=4, prompts_per_step=2, beta=0.1,
                             learning_rate=1e-2)
    tr = AttemptGRPOTrainer(m, tok, lambda p, a, e: False, ["x"], args, cfg)
    assert tr.ref_model is not None and not any(p.requires_grad
                                                for p in tr.ref_model.parameters())
    assert tr.update(b.input_ids, b.attention_mask, b.attempt_index, tok_adv)["kl"] == 0.0
    assert tr.update(b.input_ids, b.attention_mask, b.attempt_index, tok_adv)["kl"] > 0.0
    base = copy.deepcopy(_make(1)[0])
    lora = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, target_modules=["q_proj",
                                                                                "v_proj"]))
    tr = AttemptGRPOTrainer(lora, tok, lambda p, a, e: False, ["x"], args, cfg)
    assert tr.ref_model is None and tr._ref_is_adapter_off
    for _ in range(2):
        tr.update(b.input_ids, b.attention_mask, b.attempt_index, tok_adv)
    from icml_cal_grpo.loss import sequence_logprobs

    with torch.no_grad():
        want = sequence_logprobs(base, b.input_ids, b.attention_mask)
        pol = sequence_logprobs(lora, b.input_ids, b.attention_mask)
    assert torch.allclose(tr._ref_logps(b.input_ids, b.attention_mask), want, atol=1e-6)
    assert float((pol - want).abs().max()) > 1e-4            # the adapter did train
