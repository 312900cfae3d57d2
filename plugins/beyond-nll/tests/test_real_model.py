"""The real-model benchmark's pieces (benchmarks/real_model.py): the DFT peer equals TRL's loss,
the cached top-layer forward equals the full model, the tasks are held-out."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "real_model.py"


@pytest.fixture(scope="module")
def rm():
    spec = importlib.util.spec_from_file_location("beyond_nll_real_model", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_dft_peer_is_trls_dft_loss(rm, tok, tmp_path):
    """The benchmark's "dft" arm computes what TRL's SFTTrainer(loss_type="dft") computes."""
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from icml.models import tiny_causal_lm

    model = tiny_causal_lm("qwen2", hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1)
    ds = Dataset.from_list([{"prompt": f"A{i:04d}=", "completion": f"{(i * 7) % 10000:04d}"}
                            for i in range(8)])
    cfg = SFTConfig(output_dir=str(tmp_path / "dft"), max_steps=1, per_device_train_batch_size=4,
                    report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True,
                    loss_type="dft")
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=ds, processing_class=tok)
    batch = next(iter(trainer.get_train_dataloader()))
    with torch.no_grad():
        trl_loss = trainer.compute_loss(model, dict(batch))
        logits = model(input_ids=batch["input_ids"],
                       attention_mask=batch.get("attention_mask")).logits
    tgt = rm.shifted(batch["labels"])
    where = tgt != -100
    ours = rm.dft_loss(logits[where], tgt[where])
    assert where.sum() > 4
    assert torch.allclose(ours, trl_loss.float(), rtol=1e-4, atol=1e-6)


def test_tasks_are_held_out_and_noise_only_touches_training(rm):
    words = [f"w{c}ord" for c in "abcdefghijklmnopqrstuvwxyz"] * 1
    for task in rm.TASKS:
        train, test = rm.make_task(task, words, 12, 8, seed=0, noise=0.0)
        assert not {p for p, _ in train} & {p for p, _ in test}
        noisy, test2 = rm.make_task(task, words, 12, 8, seed=1, noise=1.0)
        assert test2 == test and [p for p, _ in noisy] == [p for p, _ in train]
        assert all(a != b for (_, a), (_, b) in zip(noisy, train))


@pytest.mark.pretrained
def test_cached_top_layers_equal_the_full_model(rm):
    from icml.models import load_pretrained

    model, tok = load_pretrained("smollm2-135m-instruct")
    model.eval().requires_grad_(False)
    pairs = rm.make_task("weak", rm.vocab_words(tok), 3, 2, seed=0, noise=0.0)[0]
    enc = rm.encode(tok, pairs)
    where = rm.shifted(enc["labels"]) != -100
    with torch.no_grad():
        full = model(input_ids=enc["input_ids"]).logits[where]
        top = rm.TopLayers(model, 2)
        ours = top(rm.bottom_hidden(model, enc["input_ids"], 2), where)
    assert torch.allclose(ours, full, atol=1e-4)
    assert all(p.requires_grad for p in top.parameters())
    assert sum(p.numel() for p in top.parameters()) < 10_000_000  # the LM head is not copied
