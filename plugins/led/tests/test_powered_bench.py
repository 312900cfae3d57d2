"""The powered benchmark's selection rule and tables (no pretrained weights)."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from icml.testing import load_script

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "powered.py"


def _bench():
    mod = load_script(BENCH, "led_powered_bench")
    return mod


def test_selection_drops_floor_and_ceiling_then_fits_the_band():
    b = _bench()
    counts = {"add2": [4, 6], "addsub3": [0, 0], "word_add": [16, 16], "word_sub": [8, 8],
              "word_mul": [12, 14], "mul": [15, 16]}
    kept, log = b.select_families(counts, 16)
    decided = {f: why for f, _, why in log}
    assert decided["addsub3"] == "dropped: floor" and decided["word_add"] == "dropped: ceiling"
    # add2 0.31, word_sub 0.5, word_mul 0.81, mul 0.97 -> mul is above the ceiling too;
    # pooled of the rest 0.54 lies in the band
    assert decided["mul"] == "dropped: ceiling"
    assert kept == ["add2", "word_sub", "word_mul"]
    # too easy a pool: the easiest kept family goes until the pooled pass@1 is <= 0.6
    kept, log = b.select_families({"add2": [15, 15], "mul": [10, 10], "word_mul": [8, 8]}, 16)
    assert kept == ["word_mul", "mul"] and ("add2", 15 / 16, "dropped: band") in log


def test_selection_never_reads_other_arms_and_final_size():
    b = _bench()
    assert b.final_count(5) == 105 and b.final_count(6) == 108 and b.final_count(1) == 102
    assert b.SELECT_T in b.TEMPERATURES and b.MAX_NEW_TOKENS >= 64 and b.SAMPLES >= 16
    args = b.parse_args(["final", "--families", "add2,mul", "--arms", "sampling,led"])
    assert args.families == ["add2", "mul"] and args.arms == ["sampling", "led"]
    for bad in (["final", "--families", "add9"], ["final", "--arms", "beam"],
                ["final", "--samples", "8"]):
        with pytest.raises(SystemExit):
            b.parse_args(bad)


def test_tables_pair_led_with_each_baseline_at_pass_1_4_16():
    b = _bench()
    args = SimpleNamespace(samples=16, temperatures=[0.6], max_new_tokens=64, dtype="bfloat16")
    mk = lambda name, c, ex: {"name": name, "T": 0.6, "correct": c, "explored": ex,  # noqa: E731
                              "mean_reply_tokens": 20.0, "capped": 0.0, "seconds": 2.0,
                              "tokens": 100, "cpu_seconds": 1.0}
    runs = {"0.6/sampling": mk("sampling", [4, 0, 16], float("nan")),
            "0.6/top8": mk("top8", [4, 1, 16], 0.0),
            "0.6/led": mk("led", [8, 1, 16], 0.1)}
    check = {"led": mk("led", [6, 1], 0.1)}
    passk, paired, dtype, cost = b.tables_from(runs, check, args, 3)
    assert [r[1] for r in paired["rows"]] == ["sampling", "top8"]
    row = paired["rows"][0]
    assert row[2]["value"] == pytest.approx((4 / 16 + 1 / 16) / 3)      # pass@1 difference
    assert row[6]["value"] == pytest.approx(1 / 3)                     # pass@16: prompt 2
    assert row[8] == 1.0                                               # McNemar, 1 discordant
    assert dtype["rows"][0][3]["value"] == pytest.approx((8 - 6) / 16 / 2)
    assert cost["rows"][0][6] == 1.0


def test_merge_takes_each_cell_from_one_part_and_the_check_at_its_temperature(tmp_path):
    import json

    b = _bench()
    mk = lambda name, t, c: {"name": name, "T": t, "correct": c, "explored": 0.1,  # noqa: E731
                             "mean_reply_tokens": 20.0, "capped": 0.0, "seconds": 2.0,
                             "tokens": 100, "cpu_seconds": 1.0}
    probs = [{"question": "q", "answer": 1, "family": "add2", "fmt": "answer"}] * 3
    old = {"problems": probs, "runs": {"0.6/sampling": mk("sampling", 0.6, [4, 0, 16]),
                                       "0.6/led": mk("led", 0.6, [8, 1, 16])},
           "float32": {"led": mk("led", 0.6, [6, 1])}}          # 0.2.7's raw file: no settings
    args = b.parse_args(["final", "--cells", "0.6/dola,0.8/sampling,0.8/led"])
    assert b.cells_of(args) == [(0.6, "dola"), (0.8, "sampling"), (0.8, "led")]
    assert args.temperatures == [0.6, 0.8]
    new = {"problems": probs, "runs": {"0.8/led": mk("led", 0.8, [1, 1, 1]),
                                       "0.6/dola": mk("dola", 0.6, [0, 0, 16]),
                                       "0.8/sampling": mk("sampling", 0.8, [2, 2, 2])},
           "float32": {}, "float32_T": None, "settings": b.settings_of(args)}
    (tmp_path / "a.json").write_text(json.dumps(old))
    (tmp_path / "b.json").write_text(json.dumps(new))
    margs = b.parse_args(["merge", "--parts", f"{tmp_path / 'a.json'},{tmp_path / 'b.json'}"])
    tables, raw = b.merge(margs, lambda m: None)
    passk, paired, dtype, cost, procs = tables
    assert procs["rows"][0][:2] == ["a", "0.6/sampling,0.6/led"]
    assert [(r[0], r[1]) for r in passk["rows"]] == [("0.6", "sampling"), ("0.6", "dola"),
                                                      ("0.6", "led"), ("0.8", "sampling"),
                                                      ("0.8", "led")]
    assert [(r[0], r[1]) for r in paired["rows"]] == [("0.6", "sampling"), ("0.6", "dola"),
                                                       ("0.8", "sampling")]
    assert "T=0.6" in dtype["title"] and [r[2] for r in cost["rows"][:3]] == ["a", "b", "a"]
    (tmp_path / "c.json").write_text(json.dumps(old))
    margs = b.parse_args(["merge", "--parts", f"{tmp_path / 'a.json'},{tmp_path / 'c.json'}"])
    with pytest.raises(SystemExit, match="two parts"):
        b.merge(margs, lambda m: None)


def test_grid_balances_cells_over_workers_and_merges_them(tmp_path, monkeypatch):
    """``grid`` splits the 12 cells over two workers by their cost (DoLa ~3x the others),
    runs ``final --cells ... --raw-out`` per worker and merges the raw files into one grid;
    ``--reference`` compares each cell's replies with earlier raw files."""
    import json
    import subprocess

    b = _bench()
    cells = [(t, a) for t in b.TEMPERATURES for a in b.ARMS]
    groups, check_w = b.balance(cells, 2, True)
    assert sorted(c for g in groups for c in g) == sorted(cells) and check_w in (0, 1)
    loads = [sum(b.CELL_COST[a] for _, a in g) + (b.CHECK_COST if i == check_w else 0)
             for i, g in enumerate(groups)]
    assert max(loads) - min(loads) <= max(b.CELL_COST.values())
    assert b.balance(cells, 1, False) == ([sorted(cells)], -1)

    probs = [p.__dict__ for p in b.make_suite(3, seed=b.FINAL_SEED, families=("add2", "mul"))]
    calls = []

    class FakeWorker:          # writes the raw file a real worker would write
        def __init__(self, cmd):
            calls.append(cmd)
            a = b.parse_args(cmd[2:])
            runs = {f"{t:g}/{k}": {"name": k, "T": t, "correct": [16, 0, 3], "explored": 0.1,
                                   "mean_reply_tokens": 20.0, "capped": 0.0, "seconds": 2.0,
                                   "tokens": 100, "cpu_seconds": 1.0, "texts_sha256": k}
                    for t, k in a.cells}
            mk = {"name": "x", "T": 0.6, "correct": [16, 0], "seconds": 2.0, "tokens": 50,
                  "cpu_seconds": 1.0, "texts_sha256": "f32"}
            check = {"sampling": mk, "led": mk} if a.dtype_prompts else {}
            Path(a.raw_out).write_text(json.dumps({
                "problems": probs, "runs": runs, "float32": check,
                "float32_T": a.check_t if check else None, "settings": b.settings_of(a),
                "process": {"cells": [], "threads": 1, "wall_s": 5.0, "cpu_s": 4.0,
                            "load": [1.0, 1.0]}}))

        def wait(self):
            return 0

    monkeypatch.setattr(subprocess, "Popen", FakeWorker)
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"problems": probs, "runs": {
        "0.6/led": {"correct": [16, 0, 3], "texts_sha256": "led", "cpu_seconds": 2.0},
        "0.8/dola": {"correct": [16, 1, 3], "texts_sha256": "other", "cpu_seconds": 2.0}},
        "float32": {}}))
    args = b.parse_args(["grid", "--families", "add2,mul", "--prompts", "3", "--check-t", "0.6",
                         "--dtype-prompts", "2", "--reference", str(ref)])
    tables, raw = b.grid(args, lambda m: None)
    assert len(calls) == 2 and all("--raw-out" in c and c[2] == "final" for c in calls)
    assert sum(c[c.index("--dtype-prompts") + 1] != "0" for c in calls) == 1
    names = [t["name"] for t in tables]
    assert names == ["passk", "paired", "dtype", "cost", "processes", "reference"]
    assert len(raw["runs"]) == 12 and raw["float32_T"] == 0.6
    procs = tables[4]["rows"]
    assert procs[2][0].startswith("the grid command") and procs[2][5] == 8.0
    refrows = {r[0]: r for r in tables[5]["rows"]}
    assert refrows["0.6/led"][3] == "yes" and refrows["0.8/dola"][3] == "no"
    assert refrows["0.8/dola"][6] == 1 and refrows["1/top8"][2] == "-"
    assert refrows["0.6/led"][9] == 0.5
