"""icml.training: the seeded tiny-LM training loop plugins share (issue 48)."""

from __future__ import annotations

import math

import pytest

from icml.config import ConfigError, build_config
from icml.training import TrainSettings, lr_factor, warmup_steps


def _tiny_llama():
    from icml.models import tiny_causal_lm

    return tiny_causal_lm("llama", seed=0, hidden_size=32, num_layers=2, num_heads=4,
                          num_kv_heads=2, vocab_size=48, max_positions=64)


def _counting_data(torch, n: int = 64, length: int = 16):
    """Rows that count upwards mod 40 from a random start: next-token is learnable."""
    g = torch.Generator().manual_seed(1)
    start = torch.randint(0, 40, (n, 1), generator=g)
    return (start + torch.arange(length)) % 40 + 4


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_loss_decreases_and_two_runs_are_bit_identical() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from icml.training import train_lm

    data = _counting_data(torch)
    s = TrainSettings(steps=40, lr=1e-2, batch_size=8, schedule="cosine", warmup=0.1, seed=3)
    a, b = _tiny_llama(), _tiny_llama()
    la, lb = train_lm(a, data, s), train_lm(b, data, s)
    assert la.losses == lb.losses
    sa, sb = _state(a), _state(b)
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert len(la.losses) == 40 and len(la.lrs) == 40 and len(la.grad_norms) == 40
    assert sum(la.losses[-5:]) / 5 < 0.6 * sum(la.losses[:5]) / 5, la.losses
    assert not a.training  # left in eval mode
    other = train_lm(_tiny_llama(), data, TrainSettings(steps=40, lr=1e-2, batch_size=8,
                                                        schedule="cosine", warmup=0.1, seed=4))
    assert other.losses != la.losses  # the seed draws the batches


def test_identical_at_one_and_two_threads() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from icml.training import train_lm

    data = _counting_data(torch)
    s = TrainSettings(steps=12, lr=1e-2, batch_size=8, schedule="one-cycle", warmup=0.1)
    before = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            model = _tiny_llama()
            runs.append((train_lm(model, data, s).losses, _state(model)))
    finally:
        torch.set_num_threads(before)
    (l1, s1), (l2, s2) = runs
    assert l1 == l2
    assert all(torch.equal(s1[k], s2[k]) for k in s1)


def test_callable_batches_custom_loss_params_and_global_rng_untouched() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from icml.training import train_lm

    data = _counting_data(torch)
    model = _tiny_llama()
    head = model.lm_head.weight
    frozen = {k: v.clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    seen = []

    def batches(step: int):
        seen.append(step)
        rows = data[step * 4:(step + 1) * 4]
        return rows, rows.masked_fill(rows < 10, -100)

    def loss_fn(m, batch):
        assert set(batch) >= {"input_ids", "labels"}
        return m(input_ids=batch["input_ids"], labels=batch["labels"]).loss

    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    log = train_lm(model, batches, TrainSettings(steps=5, max_grad_norm=0), loss_fn=loss_fn,
                   params=[head])
    assert torch.equal(torch.rand(3), expected_next)  # the caller's RNG stream is untouched
    assert seen == [0, 1, 2, 3, 4] and log.grad_norms == [] and log.skipped == 0
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in frozen.items())
    assert log.seconds > 0 and math.isfinite(log.final_loss)


def test_default_loss_matches_the_models_own_shifted_loss() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from icml.training import next_token_loss

    model = _tiny_llama()
    ids = _counting_data(torch, n=3)
    ref = model(input_ids=ids, labels=ids).loss

    class Plain(torch.nn.Module):  # not a transformers model: no `labels` argument
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, input_ids):
            return self.inner(input_ids=input_ids).logits

    ours = next_token_loss(Plain(), {"input_ids": ids, "labels": ids})
    assert torch.allclose(ours, ref, atol=1e-6)
    assert torch.equal(next_token_loss(model, {"input_ids": ids, "labels": ids}), ref)


def test_dict_data_masks_padding_and_nonfinite_loss_is_an_error() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from icml.training import train_lm

    ids = _counting_data(torch, n=8)
    att = torch.ones_like(ids)
    att[:, -3:] = 0
    got = []

    def loss_fn(m, batch):
        got.append(batch["labels"])
        return m(**batch).loss

    train_lm(_tiny_llama(), {"input_ids": ids, "attention_mask": att},
             TrainSettings(steps=2, batch_size=4), loss_fn=loss_fn)
    assert all((lab[:, -3:] == -100).all() and (lab[:, :-3] >= 4).all() for lab in got)

    def nan_loss(m, batch):
        return m(**batch).loss * float("nan")

    with pytest.raises(FloatingPointError, match="step 0: the loss is not finite"):
        train_lm(_tiny_llama(), ids, TrainSettings(steps=3), loss_fn=nan_loss)
    log = train_lm(_tiny_llama(), ids, TrainSettings(steps=3, skip_nonfinite=True),
                   loss_fn=nan_loss)
    assert log.skipped == 3 and len(log.losses) == 3


def test_settings_are_a_config_and_reject_bad_values() -> None:
    s = build_config(TrainSettings, {}, ["lr=0.01", "betas=[0.9, 0.95]", "schedule=cosine",
                                         "dtype=float64", "device=none"])
    assert s.betas == (0.9, 0.95) and s.dtype == "float64" and s.device is None
    with pytest.raises(ConfigError, match="betas"):
        build_config(TrainSettings, {}, ["betas=[0.9]"])
    with pytest.raises(ConfigError, match="one-cycle"):
        build_config(TrainSettings, {}, ["schedule=one-cycle"])
    with pytest.raises(ConfigError, match="must not span exactly one step"):
        build_config(TrainSettings, {}, ["schedule=one-cycle", "warmup=0.1", "steps=10"])
    with pytest.raises(ConfigError, match="must end before the last"):
        build_config(TrainSettings, {}, ["schedule=one-cycle", "warmup=12", "steps=10"])
    # shorter than one step: legal in torch (the run starts on the falling phase)
    assert build_config(TrainSettings, {}, ["schedule=one-cycle", "warmup=0.1",
                                            "steps=2"]).steps == 2
    with pytest.raises(ConfigError, match="'schedule'"):
        build_config(TrainSettings, {}, ["schedule=cosin"])


def test_schedules_warm_up_then_decay_to_the_floor() -> None:
    s = TrainSettings(steps=20, warmup=0.25, schedule="cosine", min_lr_ratio=0.1)
    assert warmup_steps(s) == 5
    assert [lr_factor(s, i) for i in range(5)] == [0.2, 0.4, 0.6, 0.8, 1.0]
    assert lr_factor(s, 5) == 1.0
    assert lr_factor(s, 19) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 14 / 15)))
    lin = TrainSettings(steps=10, warmup=2, schedule="linear")
    assert warmup_steps(lin) == 2 and lr_factor(lin, 6) == pytest.approx(1 - 4 / 8)
    assert lr_factor(TrainSettings(steps=10), 7) == 1.0


def test_device_and_dtype_are_settings() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from icml.training import train_lm

    model = _tiny_llama()
    log = train_lm(model, _counting_data(torch, n=8),
                   TrainSettings(steps=2, batch_size=4, dtype="float64", device="cpu"))
    assert next(model.parameters()).dtype == torch.float64 and len(log.losses) == 2
    if torch.cuda.is_available():  # on a GPU machine: the same loop, nothing hard-coded to cpu
        model = _tiny_llama()
        train_lm(model, _counting_data(torch, n=8), TrainSettings(steps=2, device="cuda"))
        assert next(model.parameters()).device.type == "cuda"


@pytest.mark.parametrize("schedule", ["one-cycle", "constant"])
def test_reproduces_the_hand_written_plugin_loops_bit_for_bit(schedule: str) -> None:
    """capkv's train_tiny_lm (AdamW wd 0.01, OneCycleLR pct 0.1, clip 1) and cage's chain_sft
    (AdamW defaults, clip 1, no schedule) give the same losses and weights through train_lm,
    so a plugin adopting it keeps its numbers."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from icml.training import train_lm

    data = _counting_data(torch)
    steps, lr = 20, 5e-3

    def next_batch(step: int):
        rows = data[(step * 4) % 64:(step * 4) % 64 + 4]
        return rows, rows

    ref = _tiny_llama()
    opt = torch.optim.AdamW(ref.parameters(), lr=lr, weight_decay=0.01)
    sched = (torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps,
                                                 pct_start=0.1)
             if schedule == "one-cycle" else None)
    ref.train()
    ref_losses = []
    for step in range(steps):
        ids, labels = next_batch(step)
        out = ref(input_ids=ids, labels=labels)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt.step()
        if sched is not None:
            sched.step()
        ref_losses.append(float(out.loss.detach()))

    ours = _tiny_llama()
    log = train_lm(ours, next_batch, TrainSettings(
        steps=steps, lr=lr, schedule=schedule, warmup=0.1 if schedule == "one-cycle" else 0))
    assert log.losses == ref_losses
    sr, so = _state(ref), _state(ours)
    assert all(torch.equal(sr[k], so[k]) for k in sr)
