"""The benchmark scripts write the results files the README tables are rendered from (issue 47),
checked at a tiny setting."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def test_bench_flower_writes_a_results_file(tmp_path):
    from icml import results

    out = tmp_path / "flower.json"
    args = ["--arms", "inprocess", "--rounds", "2", "--local-steps", "1", "--pretrain-steps", "1",
            "--out-results", str(out)]
    subprocess.run([sys.executable, str(BENCH / "bench_flower.py"), *args], check=True,
                   capture_output=True, text=True)
    data = results.load(out)
    assert data["command"] == ("OMP_NUM_THREADS=1 python plugins/het-cpflora/benchmarks/"
                               "bench_flower.py " + " ".join(args))
    (table,) = data["tables"]
    assert table["columns"][0] == "backend" and table["columns"][-1] == (
        "final adapters identical to in-process")
    ((label, _r1, _r2, ratio, _total, up, wire, same),) = table["rows"]
    assert label == "in-process simulator" and ratio == 1.0 and same is True
    assert up > 0 and wire is None
    for col in ("round 1 s", "rounds 2+ s/round", "vs in-process", "total s"):
        assert data["tolerance"][col]["timing"] is True   # clock readings: shown, not compared
    assert "upload B/round (tensors)" not in data["tolerance"]   # bytes are exact


def test_flower_table_rows_ratio_and_identity():
    sys.path.insert(0, str(BENCH))
    try:
        from bench_flower import table_rows
    finally:
        sys.path.remove(str(BENCH))
    rows = [("in-process", [1.0, 2.0, 2.0], 5.0, 100.0, None, "inprocess"),
            ("sim", [60.0, 3.0, 3.0], 66.0, 100.0, 160.0, "simulation")]
    got = table_rows(rows, {"inprocess": True, "simulation": False})
    assert got[0][2:4] == [2.0, 1.0] and got[1][2:4] == [3.0, 1.5]
    assert got[1][-1] is False and got[1][-2] == 160.0
    # without the in-process arm there is no ratio
    assert table_rows(rows[1:], {})[0][3] is None


@pytest.mark.pretrained
@pytest.mark.slow
def test_bench_pretrained_writes_a_results_file(tmp_path):
    from icml.testing import pretrained_or_skip

    pretrained_or_skip("smollm2-135m-instruct")
    from icml import results

    out = tmp_path / "pre.json"
    args = ["--rounds", "1", "--local-steps", "1", "--strategies", "local",
            "--out-results", str(out)]
    subprocess.run([sys.executable, str(BENCH / "bench_pretrained.py"), *args], check=True,
                   capture_output=True, text=True)
    data = results.load(out)
    assert data["command"] == ("python plugins/het-cpflora/benchmarks/bench_pretrained.py "
                               + " ".join(args))
    assert [r[0] for r in data["tables"][0]["rows"]] == ["local"]
    assert data["tolerance"]["s/round"]["timing"] is True


@pytest.mark.pretrained
@pytest.mark.slow
def test_bench_rouge_writes_a_results_file(tmp_path):
    from icml.testing import pretrained_or_skip

    pretrained_or_skip("smollm2-135m-instruct")
    from icml import results

    out = tmp_path / "rouge.json"
    args = ["--seeds", "0", "--strategies", "het-cpflora", "local", "--rounds", "1",
            "--local-steps", "1", "--train-size", "4", "--test-size", "2",
            "--max-new-tokens", "4", "--r-shared", "2", "2", "--r-personal", "1", "1",
            "--out-results", str(out)]
    subprocess.run([sys.executable, str(BENCH / "bench_rouge.py"), *args], check=True,
                   capture_output=True, text=True)
    data = results.load(out)
    assert data["command"] == "python plugins/het-cpflora/benchmarks/bench_rouge.py " + \
        " ".join(args)
    main, claims, mixer = data["tables"]
    assert mixer["name"] == "mixer"
    arms = [r[0] for r in main["rows"]]
    assert arms == ["het-cpflora (fixed)", "het-cpflora (OOD)", "local"]
    assert main["rows"][2][7] == 0                      # local-only sends nothing
    assert main["rows"][0][7] > 0
    assert data["tolerance"]["s/run"]["timing"] is True
    assert any(r[0] == "generalization vs local-only" for r in claims["rows"])
    cells = data["metrics"]["cells"]                    # per-prompt scores, seeds x prompts
    assert len(cells["local"]["own_r1"]) == 1 and len(cells["local"]["own_r1"][0]) == 4


def _rouge_bench():
    from icml.testing import load_script

    return load_script(BENCH / "bench_rouge.py", "het_cpflora_bench_rouge")


def test_variance_components_recover_a_planted_split():
    """Seeds x prompts table = seed effect + prompt effect + noise: the ANOVA split finds each
    part, and the projected MDE shrinks with seeds only as far as the seed part allows."""
    import numpy as np

    bench = _rouge_bench()
    rng = np.random.default_rng(0)
    S, n = 400, 300
    d = (rng.normal(0, 0.3, (S, 1)) + rng.normal(0, 0.2, (1, n))
         + rng.normal(0, 0.5, (S, n)))
    comp = bench.variance_components(d)
    assert comp["seed"] == pytest.approx(0.09, rel=0.2)
    assert comp["item"] == pytest.approx(0.04, rel=0.2)
    assert comp["resid"] == pytest.approx(0.25, rel=0.05)
    c = {"seed": 0.01, "item": 0.0, "resid": 0.0}
    assert bench.projected_mde(c, 4, 10) == pytest.approx(2.8016 * 0.05, rel=1e-3)
    assert bench.projected_mde(c, 4, 10 ** 6) == bench.projected_mde(c, 4, 10)
    assert bench.projected_mde(c, 16, 10) == pytest.approx(bench.projected_mde(c, 4, 10) / 2)
    n_t = bench.prompts_needed(c | {"item": 0.04}, 4, 0.2)
    assert bench.projected_mde(c | {"item": 0.04}, 4, n_t) <= 0.2 < bench.projected_mde(
        c | {"item": 0.04}, 4, n_t - 1)
    assert bench.prompts_needed(c, 4, 0.1) == float("inf")    # the seed part alone is 0.14
    with pytest.raises(ValueError, match=">= 2 seeds"):
        bench.variance_components(d[:1])
    # pure noise: the seed and prompt parts are (close to) 0, clipped at 0, never negative
    comp0 = bench.variance_components(rng.normal(0, 1, (5, 40)))
    assert min(comp0.values()) >= 0 and comp0["resid"] > 0.5


def test_design_file_sets_defaults_and_rejects_unknown_keys(tmp_path):
    import json

    bench = _rouge_bench()
    f = tmp_path / "d.json"
    f.write_text(json.dumps({"settings": {"seeds": [3, 4], "test_size": 7},
                             "primary": ["het-cpflora (OOD) - fedit: own_r1"]}))
    args = bench.parse_args(["--design", str(f)])
    assert args.seeds == [3, 4] and args.test_size == 7 and args.rounds == 2
    assert args.design_spec["primary"] == ["het-cpflora (OOD) - fedit: own_r1"]
    assert bench.parse_args(["--design", str(f), "--test-size", "2"]).test_size == 2
    f.write_text(json.dumps({"settings": {"test_sise": 7}}))
    with pytest.raises(SystemExit, match="test_sise"):
        bench.parse_args(["--design", str(f)])
