"""The fused recall layout (learned by the tiny model in the CPU budget), the bootstrap intervals
and the tied-best rule the benchmark verdict uses."""

import pytest
import torch
from icml_capkv import continuation_logits, prefill
from icml_capkv.fidelity import bootstrap_ci, summarize, verdict
from icml_capkv.recall import BOS, RecallTask, train_recall_model


def test_fused_layout_encodes_each_pair_in_one_token() -> None:
    task = RecallTask(context_len=40, n_pairs=6, n_keys=8, n_values=5, layout="fused")
    assert task.vocab_size == 4 + 8 + 5 + 8 * 5 + task.n_fillers
    s = task.sample(4, torch.Generator().manual_seed(0))
    ctx, rows = s["context"], torch.arange(4)[:, None]
    tok = ctx[rows, s["slots"]]
    assert torch.equal((tok - task.pair0) // 5 + task.key0, s["keys"])
    assert torch.equal((tok - task.pair0) % 5 + task.value0, s["values"])
    mask = task.carries_pair(ctx)
    assert mask.sum(1).tolist() == [6] * 4 and bool((ctx[:, 0] == BOS).all())
    others = ctx[~mask][ctx[~mask] != BOS]
    assert bool((others >= task.filler0).all()), "everything else is a filler duplicate"
    split = RecallTask(context_len=40, n_pairs=6, n_keys=8, n_values=5)
    assert int(split.carries_pair(split.sample(1, torch.Generator())["context"]).sum()) == 12
    with pytest.raises(ValueError, match="layout"):
        RecallTask(layout="interleaved")
    with pytest.raises(ValueError, match="too short"):
        RecallTask(context_len=8, n_pairs=8, n_keys=8, layout="fused")


def test_tiny_model_learns_fused_recall() -> None:
    """The premise of the model-level benchmark: the task is learned (accuracy far above the
    1/n_values of guessing), so KL to the full cache measures lost information."""
    task = RecallTask(context_len=24, n_pairs=4, n_keys=4, n_values=4, n_fillers=3,
                      n_queries=8, layout="fused")
    m, _ = train_recall_model(task, steps=150, batch_size=16, lr=3e-3, hidden_size=64, seed=0)
    ctx, q, a = task.eval_batch(128, torch.Generator().manual_seed(1))
    acc = float((continuation_logits(m, prefill(m, ctx), q)[:, -1].argmax(-1) == a)
                .float().mean())
    assert acc >= 0.9, acc


def test_bootstrap_ci_properties() -> None:
    m, lo, hi = bootstrap_ci([[2.0] * 10, [2.0] * 5])
    assert (m, lo, hi) == (2.0, 2.0, 2.0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, generator=g).tolist()
    m, lo, hi = bootstrap_ci([x[:200], x[200:]])
    assert lo < m < hi
    se = torch.tensor(x).std().item() / 20  # the 95% interval is about +-1.96 standard errors
    # The two-level bootstrap (icml.stats.hierarchical_ci, nested) also resamples the 2 seeds; with
    # no seed effect the drawn seeds' means still spread by item noise, which adds about
    # (S-1)/S = 1/2 of the item variance: the width is about sqrt(1.5) x the item-only one.
    assert abs((hi - lo) / (2 * 1.96 * se * 1.5 ** 0.5) - 1) < 0.15
    # seed variance counts: the same values with the two seeds shifted apart widen the interval
    m3, lo3, hi3 = bootstrap_ci([[v - 1 for v in x[:200]], [v + 1 for v in x[200:]]])
    assert hi3 - lo3 > 3 * (hi - lo)
    m2, lo2, hi2 = bootstrap_ci([x[:50]])
    assert hi2 - lo2 > hi - lo, "fewer questions must give a wider interval"
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_ci([[]])


def _rows(policy, ratio, kl):
    return {"policy": policy, "ratio": ratio, "kl_each": kl, "correct_each": [1.0] * len(kl)}


def test_verdict_rule() -> None:
    base = [0.1 * i for i in range(20)]
    runs = [[_rows("capkv", 0.5, [v + 0.05 for v in base]), _rows("h2o", 0.5, base),
             _rows("random", 0.5, [v + 5 for v in base]), _rows("greedy_logdet", 0.5, base),
             _rows("capkv", 0.9, [v + 3 for v in base]), _rows("h2o", 0.9, base),
             _rows("capkv", 0.25, [v - 1 for v in base]), _rows("h2o", 0.25, base)]]
    s = summarize(runs, "kl")
    assert verdict(s, 0.5, exclude=("greedy_logdet",)) == ("tied", "h2o")
    assert verdict(s, 0.9) == ("worse", "h2o")
    assert verdict(s, 0.25) == ("best", "h2o")
    # all accuracies are 1: CapKV's mean equals the best, which counts as best
    assert verdict(summarize(runs, "accuracy"), 0.5, lower=False)[0] == "best"
    with pytest.raises(ValueError, match="no 'capkv' row"):
        verdict(s, 0.75)
    with pytest.raises(ValueError, match="key must be"):
        summarize(runs, "error")


def test_infer_reports_the_verdict_table(tmp_path) -> None:
    from icml.runner import run

    result = run("capkv", "infer", overrides=["train_steps=5", "eval_samples=16", "context_len=24",
                                              "n_pairs=4", "ratios=[0.5]",
                                              "policies=capkv,leverage,h2o"],
                 out=tmp_path / "run", device="cpu", show_progress=False)
    assert result.status == "ok", result.error
    assert {f"capkv_best_or_tied/{k}/0.5" for k in ("kl", "accuracy")} <= set(result.metrics)
    report = next((tmp_path / "run").glob("**/report.md")).read_text()
    assert "Is CapKV best or tied-best?" in report
