"""The real-model benchmark script's arms and tables, on a tiny model (no pretrained weights)."""

from pathlib import Path
from types import SimpleNamespace

import torch

from icml.testing import load_script

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "real_model.py"


def _bench():
    mod = load_script(BENCH, "led_real_model_bench")
    return mod


def test_led_norm_arm_reads_through_the_final_norm(llama):
    ms = _bench().methods(1.0, depth=4, top_k=8)
    assert not ms["led"].make(None).config.use_final_norm
    dec = ms["led_norm"].make(None)
    assert dec.config.use_final_norm and (dec.config.depth, dec.config.top_k) == (4, 8)
    ids = torch.randint(4, 260, (4, 6), generator=torch.Generator().manual_seed(0))
    out = {}
    for key in ("led", "led_norm"):
        gens = [torch.Generator().manual_seed(i) for i in range(4)]
        out[key] = llama.generate(ids, max_new_tokens=12, pad_token_id=0,
                                  custom_generate=ms[key].make(gens),
                                  **ms[key].generate_kwargs)
    # same generators, same base path: they part only where a row explores, and the read-outs
    # differ there (the untrained tiny model explores often at T = 1)
    ref = llama.generate(ids, max_new_tokens=12, pad_token_id=0, do_sample=True, temperature=1.0,
                         custom_generate=type(dec)(
                             type(dec.config)(depth=4, top_k=8, use_final_norm=True),
                             [torch.Generator().manual_seed(i) for i in range(4)]))
    assert torch.equal(out["led_norm"], ref)
    assert not torch.equal(out["led"], out["led_norm"])


def test_tables_pair_led_norm_with_led_and_baselines():
    bench = _bench()
    runs = {}
    for key, name, correct in [("sampling", "sampling", [4, 0]), ("led", "led", [0, 0]),
                               ("led_norm", "led norm", [16, 8])]:
        runs[f"1/{key}"] = {"name": name, "T": 1.0, "correct": correct,
                            "explored": float("nan")}
    text = bench.quality_tables({"runs": runs}, SimpleNamespace(samples=16))
    paired = text.split("Paired by prompt")[1]
    rows = [r for r in paired.splitlines() if r.startswith("| 1 | led norm |")]
    assert [r.split(" | ")[2] for r in rows] == ["sampling", "led"]
    # led_norm - led: pass@1 (1 + 0.5) / 2 = 0.75, pass@16 1.0 on both prompts
    assert rows[1].split(" | ")[3].startswith("0.750") and rows[1].split(" | ")[5].startswith(
        "1.000")


def test_default_command_runs_the_full_grid():
    """Since 0.2.2 the one command is the whole grid, DoLa included (--full is kept as a
    no-op for old command lines)."""
    import pytest

    bench = _bench()
    args = bench.parse_args([])
    assert (args.problems, args.samples, args.temperatures) == (16, 16, [0.6, 1.0])
    assert args.methods == ["sampling", "dola", "top8", "led", "led_norm"]
    assert bench.parse_args(["--full"]).methods == args.methods
    assert bench.parse_args(["--methods", "dola"]).methods == ["dola"]
    with pytest.raises(SystemExit):
        bench.parse_args(["--full", "--methods", "led"])


def test_quality_results_tables_use_icml_stats():
    """The results-file tables: estimates as dicts from icml.stats, McNemar on pass@16."""
    bench = _bench()
    runs = {"1/sampling": {"name": "sampling", "T": 1.0, "correct": [4, 0],
                           "explored": float("nan")},
            "1/led": {"name": "led", "T": 1.0, "correct": [16, 8], "explored": 0.5}}
    passk, paired = bench.quality_results({"runs": runs}, SimpleNamespace(samples=16))
    assert passk["name"] == "passk" and passk["rows"][1][2]["value"] == 0.75
    row = paired["rows"][0]
    assert row[1:3] == ["led", "sampling"]
    assert row[3]["value"] == (1.0 - 0.25 + 0.5) / 2           # paired pass@1 difference
    assert row[5]["value"] == 0.5                              # pass@16: 1,1 vs 1,0
    assert row[6] == 1.0                                       # McNemar: one discordant pair
