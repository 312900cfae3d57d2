"""The benchmark scripts write the results files their README tables will be rendered from
(issue 47): run at a tiny setting, each writes a file whose command is the invocation, whose
tables have the README's columns, and which renders."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def test_arms_part_writes_a_results_file(tmp_path):
    from icml import results

    out = tmp_path / "arms.json"
    args = ["--part", "arms", "--seeds", "2", "--steps", "1", "--warm-steps", "1",
            "--eval-generations", "1", "--arms", "baseline", "both", "--per-call-penalty",
            "--premature-fraction", "0.8", "--label", "collapse_regime",
            "--out", str(tmp_path / "raw.json"), "--out-results", str(out)]
    subprocess.run([sys.executable, str(BENCH / "bench.py"), *args], check=True,
                   capture_output=True, text=True)
    data = results.load(out)
    assert data["command"].startswith("python plugins/dr-mmsearch/benchmarks/bench.py ")
    assert data["command"].endswith("--out-results " + str(out))
    assert data["seeds"] == [0, 1] and data["quick"] is False
    (table,) = data["tables"]
    assert table["name"] == "arms_collapse_regime"
    assert [r[0] for r in table["rows"]] == ["warm start", "baseline", "both"]
    assert table["columns"][-2:] == ["Δ acc 3-hop vs baseline", "MDE Δ acc 3-hop"]
    assert "premature_fraction=0.8" in table["title"] and "penalty True" in table["title"]
    # the paired difference is there for the arm, not for the baseline or the warm start
    assert table["rows"][2][-2] is not None and table["rows"][1][-2] is None
    assert "| both |" in results.render_table(table)


def test_arms_part_on_fact_worlds_writes_the_comparisons(tmp_path):
    """The held-out fact-world comparison's command at a tiny setting: the held-out columns
    come from the held-out world, the comparison and per-seed tables are written."""
    import json

    from icml import results

    out, raw = tmp_path / "heldout.json", tmp_path / "raw.json"
    args = ["--part", "arms", "--seeds", "2", "--steps", "1", "--warm-steps", "1",
            "--eval-generations", "1", "--arms", "baseline", "baseline_nopen", "both",
            "--fact-worlds", "3", "--holdout", "0.34", "--holdout-by", "world",
            "--label", "heldout", "--out", str(raw), "--out-results", str(out)]
    subprocess.run([sys.executable, str(BENCH / "bench.py"), *args], check=True,
                   capture_output=True, text=True)
    data = results.load(out)
    names = [t["name"] for t in data["tables"]]
    assert names == ["arms_heldout", "arms_heldout_comparisons", "arms_heldout_per_seed"]
    cfg = json.loads(raw.read_text())["arms_heldout"]["config"]
    assert cfg["fact_worlds"] == 3 and cfg["holdout_by"] == "world"
    arms = data["tables"][0]
    held = arms["columns"].index("held-out acc")
    assert all(r[held] is not None for r in arms["rows"])


def test_pretrained_stage_table_from_a_run_record():
    """The stage table of ``pretrained.py --out-results`` from its run record: one row per stage
    run so far, held-out columns, the clock column last."""
    sys.path.insert(0, str(BENCH))
    try:
        from pretrained import STAGE_COLS, stage_table
    finally:
        sys.path.remove(str(BENCH))
    from icml import results

    ev = {k: 0.5 for _, k in STAGE_COLS} | {"heldout_rollouts": 12, "eval_seconds": 3.0}
    out = {"config": {"model": "m", "seed": 0, "eval_generations": 1, "warm_steps": 15,
                      "steps": 2},
           "warm_start": ev, "arms": {"baseline": {"eval": ev}, "both": {"eval": ev}}}
    table = stage_table(out)
    assert [r[0] for r in table["rows"]] == ["after the warm start (15 SFT steps)",
                                             "+ 2 GRPO steps, baseline", "+ 2 GRPO steps, both"]
    assert table["columns"][:2] == ["stage", "held-out rollouts"]
    assert table["columns"][-1] == "eval s"
    assert table["rows"][0][1] == 12
    assert "| 0.50 |" in results.render_table(table)


@pytest.mark.pretrained
@pytest.mark.slow
def test_pretrained_script_writes_a_results_file(tmp_path):
    """The real script on SmolLM2 at the smallest budget: one warm step, one GRPO step, one arm."""
    from icml.testing import pretrained_or_skip

    pretrained_or_skip("smollm2-135m-instruct")
    from icml import results

    out = tmp_path / "pretrained.json"
    args = ["--skip-zero-shot", "--arms", "baseline", "--steps", "1", "--warm-steps", "1",
            "--prompts-per-step", "1", "--num-generations", "2", "--eval-generations", "1",
            "--eval-train", "0", "--holdout", "0.05", "--max-turn-tokens", "8",
            "--device", "cpu", "--out", str(tmp_path / "raw.json"), "--out-results", str(out)]
    subprocess.run([sys.executable, str(BENCH / "pretrained.py"), *args], check=True,
                   capture_output=True, text=True)
    data = results.load(out)
    assert data["command"].startswith(
        "OMP_NUM_THREADS=1 python plugins/dr-mmsearch/benchmarks/pretrained.py ")
    assert [r[0] for r in data["tables"][0]["rows"]] == ["after the warm start (1 SFT steps)",
                                                         "+ 1 GRPO steps, baseline"]
    assert data["tolerance"]["eval s"]["timing"] is True


def test_comparison_tables_pair_by_seed_and_apply_the_rule():
    """The pre-registered comparisons from per-seed records (no training): paired differences,
    the MDE and seed sd, the verdict of ``metrics.paired_verdict``, and the per-seed table."""
    sys.path.insert(0, str(BENCH))
    try:
        from bench import COMPARISONS, comparison_tables
    finally:
        sys.path.remove(str(BENCH))
    from icml import results

    def rec(acc, col):
        return {"heldout_accuracy": acc, "heldout_collapse_rate": col, "collapse_rate": col,
                "heldout_accuracy_hop2": acc, "heldout_accuracy_hop3": acc,
                "accuracy_hop3": acc, "turns_hop3": 3.0}

    noise = [0.10, 0.30, 0.05, 0.25, 0.15]
    per = {"baseline": [rec(0.1, 0.9 + 0.01 * i) for i in range(5)],
           "baseline_nopen": [rec(x, 0.2) for x in noise],
           "both": [rec(x + 0.01 * (-1) ** i, 0.0 + 0.01 * i) for i, x in enumerate(noise)]}
    res = {"per_seed": per, "config": {"seeds": 5, "seed_list": [0, 1, 2, 3, 4], "steps": 1,
                                       "mu": "question", "holdout": 1.0,
                                       "holdout_by": "question"}}
    comp, raw = comparison_tables(res, "arms_t")
    rows = {(r[0], r[1]): r for r in comp["rows"]}
    assert set(rows) == {(a, b) for a, b, _ in COMPARISONS if a in per and b in per}
    col = comp["columns"]
    main = rows[("both", "baseline_nopen")]
    assert main[col.index("detected Δ held-out collapse 3-hop")] == "yes"     # -0.18, tiny sd
    assert main[col.index("Δ held-out collapse 3-hop")]["value"] < 0
    assert main[col.index("detected Δ held-out acc")] == "no"                 # +-0.01 noise
    assert len(raw["rows"]) == 15 and raw["rows"][0][:2] == ["baseline", 0]
    assert "| both | baseline_nopen |" in results.render_table(comp)
