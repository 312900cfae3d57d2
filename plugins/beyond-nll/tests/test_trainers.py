"""Integration: HF Trainer (compute_loss_func and subclass), TRL SFTTrainer, accelerate loop."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from icml_beyond_nll import (
    ProbObjectiveLoss,
    make_trainer,
    prob_objective_loss,
    train_loop,
)


def _batch(seed=0, n=4, t=12, v=64):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, v, (n, t), generator=g)
    labels = ids.clone()
    labels[:, :4] = -100
    attn = torch.ones_like(ids)
    attn[0, -3:] = 0
    labels[0, -3:] = -100
    return {"input_ids": ids, "attention_mask": attn, "labels": labels}


def _args(tmp_path, **kw):
    from transformers import TrainingArguments

    base = {"output_dir": str(tmp_path / "out"), "per_device_train_batch_size": 4,
            "report_to": [], "use_cpu": True, "save_strategy": "no", "logging_steps": 1,
            "disable_tqdm": True, "max_steps": 2, "learning_rate": 1e-3, "seed": 0}
    base.update(kw)
    return TrainingArguments(**base)


@pytest.mark.parametrize("key", ["logp", "p", "GeneralFamily-10", "OnlyTopP-0.05"])
def test_trainer_paths_and_plain_loop_give_the_same_loss(tiny_llama, tmp_path, key):
    from transformers import Trainer

    batch = _batch()
    plain = prob_objective_loss(tiny_llama(input_ids=batch["input_ids"],
                                           attention_mask=batch["attention_mask"]).logits,
                                batch["labels"], key)
    t1 = Trainer(model=tiny_llama, args=_args(tmp_path),
                 compute_loss_func=ProbObjectiveLoss(key))
    t2 = make_trainer(key, model=tiny_llama, args=_args(tmp_path))
    with torch.no_grad():
        a = t1.compute_loss(tiny_llama, dict(batch), num_items_in_batch=torch.tensor(30))
        b = t2.compute_loss(tiny_llama, dict(batch), num_items_in_batch=torch.tensor(30))
    assert torch.allclose(a, plain, atol=1e-6) and torch.allclose(b, plain, atol=1e-6)


def test_subclass_reproduces_official_gradient_accumulation(tiny_llama, tmp_path):
    """With GA=2 the subclass's accumulated gradient is the mean of the two micro-batches'
    "kept"-normalised gradients, as in the paper's trainer."""
    import copy

    b1, b2 = _batch(1), _batch(2)
    ref = copy.deepcopy(tiny_llama)
    for b in (b1, b2):
        out = ref(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
        (prob_objective_loss(out.logits, b["labels"], "OnlyTopP-0.01") / 2).backward()
    trainer = make_trainer("OnlyTopP-0.01", model=tiny_llama,
                           args=_args(tmp_path, gradient_accumulation_steps=2))
    trainer.current_gradient_accumulation_steps = 2
    for b in (b1, b2):
        trainer.training_step(tiny_llama, dict(b), num_items_in_batch=torch.tensor(50))
    for (n, p), q in zip(tiny_llama.named_parameters(), ref.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-6), n


def test_num_items_normalisation_with_plain_trainer_and_accumulation(tiny_llama, tmp_path):
    """compute_loss_func + normalize="num_items": Trainer's own accumulation gives the token mean
    over both micro-batches (HF's gradient-accumulation-correct loss)."""
    import copy

    from transformers import Trainer

    b1, b2 = _batch(4), _batch(5)
    total = sum(int((b["labels"][:, 1:] != -100).sum()) for b in (b1, b2))
    ref = copy.deepcopy(tiny_llama)
    for b in (b1, b2):
        out = ref(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
        prob_objective_loss(out.logits, b["labels"], "GeneralFamily-2", normalize="sum")\
            .div(total).backward()
    trainer = Trainer(model=tiny_llama, args=_args(tmp_path, gradient_accumulation_steps=2),
                      compute_loss_func=ProbObjectiveLoss("GeneralFamily-2",
                                                          normalize="num_items"))
    trainer.current_gradient_accumulation_steps = 2
    for b in (b1, b2):
        trainer.training_step(tiny_llama, dict(b), num_items_in_batch=torch.tensor(total))
    for (n, p), q in zip(tiny_llama.named_parameters(), ref.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-6), n


def test_hf_trainer_trains(tiny_llama, tmp_path):
    pytest.importorskip("datasets")
    from datasets import Dataset

    rows = [{k: v.tolist() for k, v in _batch(i, n=1).items()} for i in range(8)]
    ds = Dataset.from_list([{k: v[0] for k, v in r.items()} for r in rows])
    trainer = make_trainer("GeneralFamily-2", model=tiny_llama, args=_args(tmp_path),
                           train_dataset=ds)
    out = trainer.train()
    assert out.global_step == 2 and torch.isfinite(torch.tensor(out.training_loss))


def test_trl_sft_trainer_with_the_objective(tok, tmp_path):
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    from datasets import Dataset
    from icml_beyond_nll import sft_trainer_class
    from trl import SFTConfig, SFTTrainer

    from icml.models import tiny_causal_lm

    model = tiny_causal_lm("qwen2", hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1)
    ds = Dataset.from_list([{"prompt": f"A{i:04d}=", "completion": f"{(i * 7) % 10000:04d}"}
                            for i in range(16)])
    cfg = SFTConfig(output_dir=str(tmp_path / "sft"), max_steps=2, per_device_train_batch_size=4,
                    report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True,
                    learning_rate=1e-3, logging_steps=1)
    trainer = sft_trainer_class()(objective="p", model=model, args=cfg, train_dataset=ds,
                                  processing_class=tok)
    assert isinstance(trainer, SFTTrainer)
    out = trainer.train()
    assert out.global_step == 2 and torch.isfinite(torch.tensor(out.training_loss))
    # TRL's own metrics survive: the objective goes through SFTTrainer.compute_loss
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 2
    for h in logged:
        assert 0.0 <= h["mean_token_accuracy"] <= 1.0 and h["entropy"] > 0.0
    # and the plain compute_loss_func route gives the same loss as the subclass on one batch
    batch = next(iter(trainer.get_train_dataloader()))
    fn_trainer = SFTTrainer(model=model, args=cfg, train_dataset=ds, processing_class=tok,
                            compute_loss_func=ProbObjectiveLoss("p"))
    with torch.no_grad():
        a = trainer.compute_loss(model, dict(batch))
        b = fn_trainer.compute_loss(model, dict(batch))
    assert torch.allclose(a, b, atol=1e-6)


def test_plain_loop_lowers_the_loss(tiny_llama):
    batch = _batch(3)
    res = train_loop(tiny_llama, [batch], "p", steps=15, lr=3e-3, cpu=True, warmup_ratio=0.0)
    assert res.steps == 15 and res.losses[-1] < res.losses[0]


def test_plain_loop_bad_input(tiny_llama):
    with pytest.raises(ValueError, match="empty"):
        train_loop(tiny_llama, [], "p", steps=1, cpu=True)
    with pytest.raises(ValueError, match="valid keys"):
        train_loop(tiny_llama, [_batch()], "focal", steps=1, cpu=True)


WORKER = textwrap.dedent('''
    import json, sys, torch
    from accelerate import Accelerator
    from icml.models import tiny_causal_lm
    from icml_beyond_nll import train_loop
    acc = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = tiny_causal_lm("llama", hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                           vocab_size=64, seed=0)
    g = torch.Generator().manual_seed(acc.process_index)
    ids = torch.randint(4, 64, (4, 10), generator=g)
    labels = ids.clone(); labels[:, :3] = -100
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    res = train_loop(model, [batch], "GeneralFamily-3", steps=3, grad_accum=2, lr=1e-3,
                     accelerator=acc)
    w = acc.unwrap_model(model).lm_head.weight
    with open(f"rank{acc.process_index}.json", "w") as f:
        json.dump({"rank": acc.process_index, "n": acc.num_processes,
                   "losses": res.losses, "wsum": float(w.detach().double().sum())}, f)
    acc.wait_for_everyone()
    if torch.distributed.is_initialized():  # an undestroyed gloo group can abort at exit
        torch.distributed.destroy_process_group()
''')


def test_two_process_accelerate_run_on_cpu(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # torchrun starts the two ranks; Accelerator(cpu=True) joins them over gloo
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_port", str(port), str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env,
                          cwd=Path(tmp_path))
    written = sorted(tmp_path.glob("rank*.json"))
    teardown_abort = (len(written) == 2 and "terminate called without an active exception"
                      in proc.stderr)  # gloo's exit-time abort after all work was done
    assert proc.returncode == 0 or teardown_abort, proc.stderr[-3000:]
    import json

    res = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    assert sorted(r["rank"] for r in res) == [0, 1] and all(r["n"] == 2 for r in res)
    assert res[0]["losses"] == res[1]["losses"]  # reduced across processes
    assert res[0]["wsum"] == pytest.approx(res[1]["wsum"], abs=1e-9)  # DDP kept them in sync


@pytest.mark.parametrize("parent_metrics", [True, False])
def test_multi_process_scaling_only_for_num_items(tiny_llama, tmp_path, monkeypatch,
                                                  parent_metrics):
    """With average_tokens_across_devices, Trainer multiplies a compute_loss_func loss by the
    number of processes (right for "num_items" only); the subclass scales only "num_items"."""
    from transformers import Trainer

    batch = _batch(6)
    n_items = torch.tensor(40)
    with torch.no_grad():
        out = tiny_llama(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        kept = prob_objective_loss(out.logits, batch["labels"], "p")
        per_item = prob_objective_loss(out.logits, batch["labels"], "p", normalize="num_items",
                                       num_items_in_batch=n_items)
    args = _args(tmp_path)
    args.average_tokens_across_devices = True  # transformers 4.x resets it on one process
    sub_kept = make_trainer("p", model=tiny_llama, args=args,
                            parent_metrics=parent_metrics)
    sub_items = make_trainer("p", normalize="num_items", model=tiny_llama, args=args,
                             parent_metrics=parent_metrics)
    plain = Trainer(model=tiny_llama, args=args,
                    compute_loss_func=ProbObjectiveLoss("p"))
    monkeypatch.setattr(type(sub_kept.accelerator), "num_processes", property(lambda self: 2))
    with torch.no_grad():
        a = sub_kept.compute_loss(tiny_llama, dict(batch), num_items_in_batch=n_items)
        b = sub_items.compute_loss(tiny_llama, dict(batch), num_items_in_batch=n_items)
        c = plain.compute_loss(tiny_llama, dict(batch), num_items_in_batch=n_items)
    assert torch.allclose(a, kept, atol=1e-6)
    assert torch.allclose(b, 2 * per_item, atol=1e-6)
    assert torch.allclose(c, 2 * kept, atol=1e-6)  # the documented compute_loss_func pitfall


def _rows(n, t=10, v=64, ragged=True, seed=11):
    """n training rows; with ragged=True their numbers of supervised tokens differ."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        ids = torch.randint(4, v, (t,), generator=g)
        labels = ids.clone()
        labels[:3] = -100
        if ragged:
            labels[t - 2 * (i % 4):] = -100  # 7, 5, 3, 1 supervised tokens
        rows.append({"input_ids": ids.tolist(), "attention_mask": [1] * t,
                     "labels": labels.tolist()})
    return rows


def _train_one_step(model, tmp_path, rows, *, batch, ga, normalize, objective="logp"):
    """One SGD step of the subclass through Trainer.train(); returns the updated weights."""
    from icml_beyond_nll import ProbObjectiveTrainer
    from torch.utils.data import SequentialSampler

    class InOrder(ProbObjectiveTrainer):  # rows in order, so micro-batches are known
        def _get_train_sampler(self, *args, **kwargs):
            return SequentialSampler(self.train_dataset)

    args = _args(tmp_path, per_device_train_batch_size=batch, gradient_accumulation_steps=ga,
                 max_steps=1, optim="sgd", learning_rate=0.5, weight_decay=0.0,
                 max_grad_norm=0.0, lr_scheduler_type="constant", warmup_steps=0)
    trainer = InOrder(objective=objective, normalize=normalize, model=model, args=args,
                      train_dataset=[{k: torch.tensor(v) for k, v in r.items()} for r in rows])
    trainer.train()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _micro_batch_reference(model, rows, order, objective, normalize, micro):
    """The official accumulation by hand: each micro-batch's loss / #micro-batches ("kept"),
    or the token sum over all / total token count ("num_items"); one SGD step of lr 0.5."""
    import copy

    ref = copy.deepcopy(model)
    chunks = [order[i:i + micro] for i in range(0, len(order), micro)]
    labels_all = torch.tensor([rows[i]["labels"] for i in order])
    total = int((labels_all[:, 1:] != -100).sum())
    for idx in chunks:
        ids = torch.tensor([rows[i]["input_ids"] for i in idx])
        lab = torch.tensor([rows[i]["labels"] for i in idx])
        logits = ref(input_ids=ids).logits
        if normalize == "kept":
            loss = prob_objective_loss(logits, lab, objective) / len(chunks)
        else:
            loss = prob_objective_loss(logits, lab, objective, normalize="sum") / total
        loss.backward()
    with torch.no_grad():
        for p in ref.parameters():
            p -= 0.5 * p.grad
    return {n: p.detach() for n, p in ref.named_parameters()}


@pytest.mark.parametrize("normalize", ["num_items", "kept"])
def test_gradient_accumulation_equals_one_big_batch_through_trainer(tiny_llama, tmp_path,
                                                                     normalize):
    """Trainer.train() with 2 micro-batches of 2 accumulated == one batch of 4, for "num_items"
    with ragged token counts (HF's token mean over the whole batch) and for "kept" with equal
    token counts per micro-batch (where the official mean of micro-batch means is the mean)."""
    import copy

    rows = _rows(4, ragged=normalize == "num_items")
    m_big, m_ga = copy.deepcopy(tiny_llama), copy.deepcopy(tiny_llama)
    big = _train_one_step(m_big, tmp_path / "big", rows, batch=4, ga=1, normalize=normalize)
    ga = _train_one_step(m_ga, tmp_path / "ga", rows, batch=2, ga=2, normalize=normalize)
    moved = max(float((big[n] - p).abs().max()) for n, p in tiny_llama.named_parameters())
    assert moved > 1e-3  # the step did something
    for n in big:
        assert torch.allclose(big[n], ga[n], atol=1e-6, rtol=1e-5), n


def test_kept_accumulation_is_the_official_mean_of_micro_batch_means(tiny_llama, tmp_path):
    """Ragged token counts: with "kept", GA=2 through Trainer.train() equals the official
    per-micro-batch mean / 2 (and differs from one big batch's mean)."""
    import copy

    rows = _rows(4, ragged=True)
    m_ga = copy.deepcopy(tiny_llama)
    order = list(range(4))
    got = _train_one_step(m_ga, tmp_path / "ga", rows, batch=2, ga=2, normalize="kept")
    want = _micro_batch_reference(tiny_llama, rows, order, "logp", "kept", 2)
    whole = _micro_batch_reference(tiny_llama, rows, order, "logp", "kept", 4)
    for n in want:
        assert torch.allclose(got[n], want[n], atol=1e-6, rtol=1e-5), n
    assert any(not torch.allclose(want[n], whole[n], atol=1e-6) for n in want)


def test_plain_loop_skips_a_non_finite_update_like_the_official_trainer(tiny_llama):
    poison = {"on": False}

    def hook(_module, _inp, out):
        return out * float("nan") if poison["on"] else out

    tiny_llama.lm_head.register_forward_hook(hook)
    batch = _batch(7)
    train_loop(tiny_llama, [batch], "p", steps=1, lr=1e-3, cpu=True, warmup_ratio=0.0)
    before = [q.detach().clone() for q in tiny_llama.parameters()]
    poison["on"] = True
    res = train_loop(tiny_llama, [batch], "p", steps=2, lr=1e-3, cpu=True, warmup_ratio=0.0)
    assert res.skipped == 2 and all(torch.isnan(torch.tensor(x)) for x in res.losses)
    assert all(torch.equal(a, b) for a, b in zip(before, tiny_llama.parameters()))


def test_loss_section_is_the_loss_and_reaches_the_loop(tiny_llama):
    """The ``loss.*`` config section is what ProbObjectiveLoss takes: from_config keeps every
    setting, train_loop with that loss equals train_loop with the same keywords, and a
    keyword given next to a ProbObjectiveLoss is an error (one place per setting)."""
    import copy

    import torch
    from icml_beyond_nll import LossSettings, ProbObjectiveLoss, train_loop
    from icml_beyond_nll.config import TrainConfig

    cfg = TrainConfig()
    assert isinstance(cfg.loss, LossSettings) and cfg.loss == LossSettings()
    loss = ProbObjectiveLoss.from_config(LossSettings(normalize="sum", chunk_size=3), "p")
    assert (loss.normalize, loss.chunk_size, loss.objective.name) == ("sum", 3, "p")
    assert isinstance(loss, LossSettings)
    batch = _batch()
    m1, m2 = copy.deepcopy(tiny_llama), copy.deepcopy(tiny_llama)
    r1 = train_loop(m1, [batch], loss, steps=2, lr=1e-3, cpu=True, warmup_ratio=0.0)
    r2 = train_loop(m2, [batch], "p", normalize="sum", steps=2, lr=1e-3, cpu=True,
                    warmup_ratio=0.0)
    assert r1.losses == pytest.approx(r2.losses, rel=1e-6)
    for a, b in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="ProbObjectiveLoss"):
        train_loop(tiny_llama, [batch], loss, normalize="kept", steps=1, cpu=True)
    with pytest.raises(ValueError, match="normalize"):
        LossSettings(normalize="mean")
