"""The benchmark scripts write results files (issue 47): each path run on a tiny setting (or on
synthetic records), read back with ``icml.results.load``, its command recorded from the repo
root, its clock columns declared ``timing``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from icml import results
from icml.testing import load_script

ROOT = Path(__file__).resolve().parents[3]
BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _module(name: str):
    mod = load_script(BENCH / f"{name}.py", f"capkv_{name}")
    return mod


def _run(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def _rows(rng_seed: int, policies: list[str], ratios: list[float]) -> list[dict]:
    """evaluate_item-shaped rows for one item (both modes), deterministic."""
    import random

    g = random.Random(rng_seed)
    rows = []
    for aware in (False, True):
        rows.append({"policy": "full", "ratio": 0.0, "question_aware": aware, "correct": 1.0,
                     "kl": 0.0, "top1": 1.0, "scoring_s": 0.0, "prefill_s": 2.0, "T": 100})
        for p in policies:
            for r in ratios:
                rows.append({"policy": p, "ratio": r, "question_aware": aware,
                             "correct": float(g.random() < 0.5), "kl": g.random(),
                             "top1": g.random(), "scoring_s": 0.1, "T": 100})
    return rows


def test_longctx_table_writes_a_results_file(tmp_path: Path) -> None:
    lc = _module("longctx_bench")
    pols = ["capkv", "leverage", "streaming"]
    run_cmd = "python plugins/capkv/benchmarks/longctx_bench.py run --n 3 --out lc.jsonl"
    inp = tmp_path / "lc.jsonl"
    inp.write_text("".join(json.dumps({"task": "niah_single", "length": 1024, "item": i,
                                       "answer": "x", "rows": _rows(i, pols, lc.RATIOS),
                                       "seconds": 1.0, "command": run_cmd}) + "\n"
                           for i in range(3)))
    out = tmp_path / "longctx.json"
    _run(str(BENCH / "longctx_bench.py"), "table", "--inp", str(inp), "--out-results", str(out))
    data = results.load(out)
    names = [t["name"] for t in data["tables"]]
    assert names == ["full-cache", "niah_single-1024-agnostic", "niah_single-1024-aware",
                     "verdicts", "cost"]
    assert data["command"].startswith(run_cmd + " && python plugins/capkv/benchmarks/"
                                      "longctx_bench.py table --inp ")
    assert data["tolerance"]["CapKV scoring / full prefill"]["timing"] is True
    assert data["tables"][0]["rows"][0][:4] == ["niah_single", 1024, "agnostic", 3]
    t = data["tables"][1]
    assert [r[0] for r in t["rows"]] == pols
    assert set(t["rows"][0][1]) >= {"value", "lo", "hi"}
    # one row per mode and ratio; each verdict carries its paired difference and MDE
    v = data["tables"][3]
    assert len(v["rows"]) == 2 * len(lc.RATIOS)
    row = dict(zip(v["columns"], v["rows"][0]))
    assert row["items"] == 3 and set(row["acc. diff [95% CI]"]) >= {"value", "lo", "hi"}
    assert row["acc. verdict"] in ("ahead", "tied", "behind", "no signal")
    assert row["KL MDE"] > 0
    # cost: 3 policies x 2 modes scored at 0.1 s each, prefill 2 s
    cost = dict(zip(data["tables"][4]["columns"], data["tables"][4]["rows"][0]))
    assert cost["scoring s (all arms)"] == pytest.approx(0.6)
    assert cost["CapKV scoring / full prefill"] == pytest.approx(0.1 / 2.0)


def test_longctx_fidelity_table_writes_a_results_file(tmp_path: Path) -> None:
    lc = _module("longctx_bench")
    rows = [{"policy": p, "ratio": r, "kl": 0.1 * (i + 1) + j, "top1": 0.5, "doc": d}
            for i, p in enumerate(lc.POLICIES) for r in lc.RATIOS for d in range(2)
            for j in (0.01 * d,)]
    inp = tmp_path / "fid.json"
    inp.write_text(json.dumps({"context": 128, "rows": rows, "command": "python fid run"}))
    out = tmp_path / "fid_results.json"
    _run(str(BENCH / "longctx_bench.py"), "fidelity-table", "--inp", str(inp),
         "--out-results", str(out))
    data = results.load(out)
    assert [t["name"] for t in data["tables"]] == ["fidelity", "fidelity-verdict"]
    assert data["command"].startswith("python fid run && python plugins/capkv/")
    # capkv has the lowest KL of all policies: ahead at every ratio, paired over documents
    v = data["tables"][1]
    rows = [dict(zip(v["columns"], r)) for r in v["rows"]]
    assert [r["tau"] for r in rows] == [0.0] * len(lc.RATIOS) + [5.0] * len(lc.RATIOS)
    assert [r["KL verdict"] for r in rows if r["tau"] == 5.0] == ["ahead"] * len(lc.RATIOS)
    assert all(r["best other (KL)"].startswith("leverage") for r in rows if r["tau"] == 5.0)


def test_relevance_diagnostic_writes_a_results_file(tmp_path: Path) -> None:
    out = tmp_path / "rel.json"
    _run(str(BENCH / "relevance_diagnostic.py"), "--steps", "2", "--samples", "4",
         "--out-results", str(out))
    data = results.load(out)
    assert [t["name"] for t in data["tables"]] == ["model", "relevance", "pairs-kept"]
    assert data["command"] == ("python plugins/capkv/benchmarks/relevance_diagnostic.py "
                               "--steps 2 --samples 4 --out-results " + str(out))
    assert len(data["tables"][1]["rows"]) == 2  # one row per layer of the tiny model
    assert [r[0] for r in data["tables"][2]["rows"]] == ["capkv", "capkv (tau 1.0)", "leverage",
                                                         "snapkv", "h2o"]


def test_bench_cost_part_declares_its_clock_columns(tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    _run(str(BENCH / "bench.py"), "--parts", "cost", "--cost-T", "64",
         "--out-results", str(out))
    data = results.load(out)
    assert [t["name"] for t in data["tables"]] == ["cost"]
    assert {c for c, spec in data["tolerance"].items() if spec.get("timing")} == {
        "full prefill (s)", "CapKV scoring, all layers (s)", "scoring / prefill"}
    assert [r[-1] for r in data["tables"][0]["rows"]] == [0.5, 0.5]  # cache bytes kept / full


def test_kvpress_parity_table_pairs_the_two_arms() -> None:
    cmp_ = _module("kvpress_compare")
    rows = [{"model": "tiny", "policy": "snapkv", "ratio": 0.5, "arm": arm, "differ": d,
             "kept": 320, "kvpress_s": 0.2, "ours_s": 0.1}
            for arm, d in (("ours (defaults; SnapKV window 64)", 16),
                           ("ours (kvpress options)", 0))]
    t = cmp_.parity_table(rows, {"kvpress": "0.5.5"})
    assert t["rows"] == [["tiny", "snapkv", 0.5, 0, 16, 320, 0.1, 0.2]]
    results.check_tolerance(cmp_.TIMING)


@pytest.mark.pretrained
def test_memory_bench_writes_a_results_file(tmp_path: Path) -> None:
    out = tmp_path / "mem.json"
    _run(str(BENCH / "memory_bench.py"), "--T", "64", "--ratios", "0,0.5", "--new", "2",
         "--out-results", str(out))
    data = results.load(out)
    rows = data["tables"][0]["rows"]
    assert [r[:2] for r in rows] == [[64, 0.0], [64, 0.5]]
    assert rows[1][2] < rows[0][2]  # the compressed cache is smaller
    assert all(data["tolerance"][c]["timing"] for c in data["tables"][0]["columns"][3:])


@pytest.mark.pretrained
def test_longctx_run_then_table_on_a_tiny_setting(tmp_path: Path) -> None:
    jl, out = tmp_path / "lc.jsonl", tmp_path / "lc.json"
    _run(str(BENCH / "longctx_bench.py"), "run", "--lengths", "256", "--tasks", "niah_single",
         "--n", "1", "--policies", "capkv,streaming", "--out", str(jl))
    _run(str(BENCH / "longctx_bench.py"), "table", "--inp", str(jl), "--out-results", str(out))
    data = results.load(out)
    assert data["command"].count(" && ") == 1 and " run --lengths 256 " in data["command"]
    assert [t["name"] for t in data["tables"]][:3] == ["full-cache", "niah_single-256-agnostic",
                                                       "niah_single-256-aware"]


@pytest.mark.pretrained
def test_overhead_bench_writes_a_results_file(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    _run(str(BENCH / "overhead_bench.py"), "--lengths", "64", "--out-results", str(out))
    data = results.load(out)
    assert [r[:2] for r in data["tables"][0]["rows"]] == [[64, "capkv"]]
    assert all(data["tolerance"][c]["timing"] for c in data["tables"][0]["columns"][2:])
