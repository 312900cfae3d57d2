"""The real-model benchmark's pieces (benchmarks/real_model.py): the DFT peer equals TRL's loss,
the cached top-layer forward equals the full model, the tasks are held-out."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from icml.testing import load_script

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "real_model.py"


@pytest.fixture(scope="module")
def rm():
    mod = load_script(BENCH, "beyond_nll_real_model")
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


def _tiny_two_layer():
    from icml.models import tiny_causal_lm

    model = tiny_causal_lm("llama", hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
                           vocab_size=64, seed=0)
    model.requires_grad_(False)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 64, (12, 8), generator=g)
    labels = torch.full_like(ids, -100)
    labels[:, 5:] = ids[:, 5:]
    return model, ids, labels


def test_all_layers_option_equals_the_full_model_and_trains_every_layer(rm):
    """``--layers all``: the cached input is the embedding output, the forward equals the full
    model, and fine-tuning moves every decoder layer while the tied embedding stays frozen."""
    model, ids, labels = _tiny_two_layer()
    k = len(model.model.layers)
    h = rm.bottom_hidden(model, ids, k)
    assert torch.equal(h, model.model.embed_tokens(ids))
    base = rm.TopLayers(model, k)
    where = rm.shifted(labels) != -100
    with torch.no_grad():
        assert torch.allclose(base(h, where), model(input_ids=ids).logits[where], atol=1e-5)
    emb = model.model.embed_tokens.weight.clone()
    top = rm.train_one(base, h, labels, "logp", steps=4, batch=4, lr=1e-2, seed=0, lora=0)
    for (name, p0), p1 in zip(base.named_parameters(), top.parameters()):
        assert not torch.equal(p0, p1), f"{name} did not train"
    assert len(list(top.parameters())) == len(list(base.parameters()))
    assert torch.equal(model.model.embed_tokens.weight, emb)
    assert top._head[0] is model.lm_head.weight


def test_lora_option_trains_only_the_adapters(rm):
    """``--lora R``: peft adapters on the trained layers; only they move, the base layers (and the
    un-adapted copy) are unchanged, and the training loss falls."""
    pytest.importorskip("peft")
    from icml_beyond_nll import prob_objective_loss

    model, ids, labels = _tiny_two_layer()
    h = rm.bottom_hidden(model, ids, 1)
    base = rm.TopLayers(model, 1)
    before = {n: p.clone() for n, p in base.named_parameters()}
    top = rm.train_one(base, h, labels, "logp", steps=8, batch=4, lr=1e-2, seed=0, lora=4)
    lora = {n: p for n, p in top.named_parameters() if "lora_" in n}
    assert len(lora) == 2 * 7  # A and B on q, k, v, o, gate, up, down
    assert all(p.requires_grad for p in lora.values())
    assert any(n.endswith("lora_B.default.weight") and p.abs().sum() > 0 for n, p in lora.items())
    for n, p in top.named_parameters():
        if "lora_" not in n:
            assert not p.requires_grad
            assert torch.equal(p, before[n.replace(".base_layer", "")]), n
    for n, p in base.named_parameters():  # the base copy is never touched
        assert torch.equal(p, before[n]) and "lora_" not in n
    where = rm.shifted(labels) != -100
    y = rm.shifted(labels)[where]
    with torch.no_grad():
        l0 = prob_objective_loss(base(h, where), y, "logp", shift=False)
        l1 = prob_objective_loss(top(h, where), y, "logp", shift=False)
    assert l1 < l0 - 0.1


@pytest.mark.pretrained
@pytest.mark.parametrize("option", [["--layers", "all"], ["--lora", "4"]])
def test_training_options_run_on_the_real_model(rm, tmp_path, option):
    if option[0] == "--lora":
        pytest.importorskip("peft")
    out = tmp_path / "run.json"
    rc = rm.main(["--tasks", "weak", "--objectives", "logp", "--seeds", "1", "--steps", "2",
                  "--batch", "4", "--n-train", "8", "--n-test", "4", "--json", str(out),
                  "--out-results", str(tmp_path / "real_model.json")] + option)
    assert rc == 0
    import json

    from icml import results

    data = results.load(tmp_path / "real_model.json")
    assert [r[0] for r in results.find_table(data, "after")["rows"]] == ["logp"]

    d = json.loads(out.read_text())
    assert d["args"]["layers" if option[0] == "--layers" else "lora"] == (
        "all" if option[0] == "--layers" else 4)
    assert len(d["runs"]) == 1 and 0.0 <= d["runs"][0]["acc"] <= 1.0


def test_out_results_from_saved_runs(rm, tmp_path):
    """--out-results writes the two README tables as a results file (issue 47), here from a
    saved --json of two tasks x two seeds (no model needed)."""
    import json

    from icml import results

    runs = [{"task": t, "seed": s, "objective": o, "acc": a, "mean_p_test": 0.5, "before": 0.0,
             "sec": 1.0}
            for t, s, o, a in [("strong", 0, "logp", 0.9), ("strong", 0, "p", 0.8),
                               ("strong", 1, "logp", 0.7), ("strong", 1, "p", 0.75),
                               ("weak", 0, "logp", 0.2), ("weak", 0, "p", 0.0),
                               ("weak", 1, "logp", 0.1), ("weak", 1, "p", 0.0)]]
    saved = tmp_path / "runs.json"
    saved.write_text(json.dumps({"before": {"strong": [[0.7, 0.4, 0.0], [0.7, 0.5, 0.0]],
                                            "weak": [[0.0, 0.03, 0.0], [0.0, 0.05, 0.0]]},
                                 "runs": runs}))
    out = tmp_path / "real_model.json"
    assert rm.main(["--from-json", str(saved), "--out-results", str(out)]) == 0
    data = results.load(out)
    assert data["command"] == ("python plugins/beyond-nll/benchmarks/real_model.py --from-json "
                               f"{saved} --out-results {out}")
    assert data["seeds"] == [0, 1]
    before = results.find_table(data, "before")
    assert before["rows"] == [["strong", "0.700 ± 0.000", "0.450 ± 0.071"],
                              ["weak", "0.000 ± 0.000", "0.040 ± 0.014"]]
    after = results.find_table(data, "after")
    assert after["columns"] == ["objective", "strong (n seeds)", "weak (n seeds)",
                                "strong: seeds > / < NLL", "weak: seeds > / < NLL"]
    assert after["rows"] == [["logp", "0.800 ± 0.141 (2)", "0.150 ± 0.071 (2)", "-", "-"],
                             ["p", "0.775 ± 0.035 (2)", "0.000 ± 0.000 (2)", "1/2 / 1/2",
                              "0/2 / 2/2"]]
