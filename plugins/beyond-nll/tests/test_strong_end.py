"""The powered strong-end benchmark (benchmarks/strong_end.py, issue 64): the longer noisy
supervision keeps the round-2 items, the tables' intervals are icml.stats' paired ones over the
same seeds and items, and bad settings are one-line errors before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from icml import ConfigError, results, stats
from icml.testing import load_script

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "strong_end.py"
WORDS = sorted({a + b + "ord" for a in "abcdefghij" for b in "klmnopqrst"})


@pytest.fixture(scope="module")
def se():
    mod = load_script(BENCH, "beyond_nll_strong_end")
    return mod


def test_tail_extends_the_round2_items_and_noise_only_touches_training(se):
    plain, test = se.rm.make_task("strong", WORDS, 20, 10, 0, 0.0)
    train, test2 = se.make_strong(WORDS, 20, 10, 0, 0.0, 3)
    assert test2 == test  # the held-out items are round 2's
    words = [p.rsplit("\n", 1)[1][:-1] for p, _ in plain]
    for i, ((p, a), (p0, a0)) in enumerate(zip(train, plain)):
        assert p == p0 and a.startswith(a0 + "\n")
        lines = a.split("\n")[1:]
        nxt = [words[(i + 1 + j) % 20] for j in range(3)]
        assert lines == [f"{w}: {w[0]}" for w in nxt]  # clean at noise 0
    noisy, test3 = se.make_strong(WORDS, 20, 10, 0, 0.99, 3)
    assert test3 == test
    letters = [ln.split(": ")[1] for _, a in noisy for ln in a.split("\n")[1:]]
    truth = [ln.split(": ")[1] for _, a in train for ln in a.split("\n")[1:]]
    assert sum(x != y for x, y in zip(letters, truth)) >= 0.9 * len(truth)
    assert se.make_strong(WORDS, 20, 10, 0, 0.3, 0) == se.rm.make_task("strong", WORDS, 20, 10,
                                                                         0, 0.3)


@pytest.mark.parametrize("argv, key", [
    (["--noise", "0,1.5"], "--noise"), (["--noise", "a"], "--noise"),
    (["--objectives", "p,logp"], "--objectives"), (["--objectives", "logp,bogus"], "bogus"),
    (["--seeds", "1"], "--seeds"), (["--layers", "x"], "--layers"),
    (["--dtype-check", "9"], "--dtype-check"), (["--lr", "0"], "--lr")])
def test_bad_settings_are_one_line_errors_before_loading(se, argv, key, monkeypatch):
    import icml.models

    def boom(*a, **k):
        raise AssertionError("model loaded before the settings were checked")

    monkeypatch.setattr(icml.models, "load_pretrained", boom)
    with pytest.raises(ConfigError) as e:
        se.main(argv)
    assert key in str(e.value) and "\n" not in str(e.value)


def _saved(rng, seeds=3, n=50):
    runs = []
    for lv in (0.0, 0.3):
        for s in range(seeds):
            for o, acc in (("logp", 0.8), ("p", 0.85)):
                runs.append({"noise": lv, "seed": s, "objective": o, "dtype": "bfloat16",
                             "sec": 1.0, "items": (rng.random(n) < acc).astype(int).tolist()})
    runs.append({"noise": 0.3, "seed": 0, "objective": "logp", "dtype": "float32", "sec": 2.0,
                 "items": runs[6]["items"]})
    before = {str(lv): {"items": [1, 0] * (n // 2), "p_train": 0.4, "p_answer": 0.5}
              for lv in (0.0, 0.3)}
    args = {"objectives": "logp,p", "noise": "0,0.3", "seeds": seeds, "dtype": "bfloat16",
            "threads": 1}
    return {"args": args, "before": before, "runs": runs}


def test_tables_are_paired_seed_and_item_intervals(se, tmp_path):
    d = _saved(np.random.default_rng(0))
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(d))
    out = tmp_path / "strong_end.json"
    assert se.main(["--from-json", str(saved), "--out-results", str(out)]) == 0
    data = results.load(out)
    assert data["command"] == ("python plugins/beyond-nll/benchmarks/strong_end.py --from-json "
                               f"{saved} --out-results {out}")
    assert data["tolerance"]["s / run"]["timing"]
    t = results.find_table(data, "strong-end")
    assert [r[:2] for r in t["rows"]] == [[0.0, "logp"], [0.0, "p"], [0.3, "logp"], [0.3, "p"]]
    row = t["rows"][3]
    col = t["columns"].index
    x = np.array([r["items"] for r in d["runs"][:-1] if r["noise"] == 0.3
                  and r["objective"] == "p"], float)
    ref = np.array([r["items"] for r in d["runs"][:-1] if r["noise"] == 0.3
                    and r["objective"] == "logp"], float)
    want = stats.hierarchical_diff_ci(x, ref, seed=0)
    got = row[col("vs NLL [seeds x items 95% CI]")]
    assert (got["value"], got["lo"], got["hi"]) == (want.value, want.lo, want.hi)
    assert got["value"] == pytest.approx(x.mean() - ref.mean())
    items = stats.paired_diff_ci(x.mean(0), ref.mean(0), seed=0)
    assert row[col("vs NLL [items 95% CI]")]["lo"] == items.lo
    assert row[col("MDE (seeds x items)")] == stats.mde_from_samples(x - ref, seed=0)
    assert t["rows"][2][col("vs NLL [seeds x items 95% CI]")] is None  # NLL itself
    chk = results.find_table(data, "dtype-check")
    assert len(chk["rows"]) == 1 and chk["rows"][0][chk["columns"].index("items that agree")] == 1


@pytest.mark.pretrained
def test_runs_end_to_end_on_the_real_model(se, tmp_path):
    out = tmp_path / "strong_end.json"
    rc = se.main(["--seeds", "2", "--steps", "2", "--n-train", "8", "--n-test", "6",
                  "--tail", "1", "--objectives", "logp,p", "--noise", "0,0.3",
                  "--dtype-check", "1", "--out-results", str(out)])
    assert rc == 0
    data = results.load(out)
    assert len(results.find_table(data, "strong-end")["rows"]) == 4
    assert len(results.find_table(data, "dtype-check")["rows"]) == 1
    runs = json.loads((tmp_path / "items" / "strong_end.items.json").read_text())["runs"]
    assert len(runs) == 2 * 2 * 2 + 1 and all(len(r["items"]) == 6 for r in runs)


def test_bfloat16_autocast_training_sees_its_own_updates(se):
    """Regression (0.1.6): autocast's weight cache kept the first step's bfloat16 weights for the
    whole training loop. Under ``autocast(..., "bfloat16")`` the trained model's logits must
    follow the trained weights, not the starting ones."""
    import torch

    from icml.models import tiny_causal_lm

    model = tiny_causal_lm("llama", hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
                           vocab_size=64, seed=0)
    model.requires_grad_(False)
    ids = torch.randint(4, 64, (12, 8), generator=torch.Generator().manual_seed(0))
    labels = torch.full_like(ids, -100)
    labels[:, 5:] = ids[:, 5:]
    h = se.rm.bottom_hidden(model, ids, 1)
    base = se.rm.TopLayers(model, 1)
    where = se.rm.shifted(labels) != -100
    with se.autocast("cpu", "bfloat16"):
        top = se.rm.train_one(base, h, labels, "logp", steps=8, batch=4, lr=1e-2, seed=0, lora=0)
        inside = top(h, where).float()
        start = base(h, where).float()
    with se.autocast("cpu", "bfloat16"):
        fresh = top(h, where).float()
    assert torch.allclose(inside, fresh, atol=1e-2)
    assert (inside - start).abs().max() > 0.1
