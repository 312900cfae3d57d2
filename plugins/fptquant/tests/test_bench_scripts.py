"""The benchmark scripts that write README tables run on a tiny setting and write a valid
results file (the full runs are what the README prints)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from icml import results as R

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.slow
def test_outlier_controls_writes_its_results_file(tmp_path):
    out = tmp_path / "outlier_controls.json"
    tiny = ["train_steps=2", "hidden_size=32", "seq_len=16", "calib_samples=2",
            "eval_samples=2", "training.local_steps=1", "training.e2e_steps=1",
            "arms=[fp,rtn,fptquant_local]"]
    subprocess.run([sys.executable, str(BENCH / "outlier_controls.py"), "--alphas", "0.5",
                    *(a for s in tiny for a in ("--set", s)), "--out-results", str(out)],
                   check=True, capture_output=True, text=True,
                   env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    data = R.load(out)
    controls, alpha = data["tables"]
    assert [r[0] for r in controls["rows"]] == ["FP", "RTN", "FPTQuant-local"]
    # without injected outliers nothing differs between the FP rows of the three settings
    assert controls["rows"][0][1] == controls["rows"][0][2] == controls["rows"][0][3]
    assert alpha["rows"][0][0] == 0.5 and alpha["rows"][0][1] > 0
    assert data["command"].startswith("python plugins/fptquant/benchmarks/outlier_controls.py")


def _tiny_model_folder(tmp_path):
    from icml.models import byte_tokenizer, tiny_causal_lm

    folder = tmp_path / "tiny"
    tok = byte_tokenizer()
    tiny_causal_lm("llama", hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                   vocab_size=len(tok), seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _run(script, *args):
    subprocess.run([sys.executable, str(BENCH / script), *args], check=True,
                   capture_output=True, text=True,
                   env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})


@pytest.mark.slow
def test_real_model_curves_write_their_results_files_on_a_tiny_model(tmp_path):
    """local_steps_curve.py and e2e_lr.py (README: rerun pending) on a tiny model folder."""
    model = str(_tiny_model_folder(tmp_path))
    _run("local_steps_curve.py", "--model", model, "--snap", "0,1,2", "--window", "16",
         "--out-results", str(tmp_path / "local_steps.json"))
    (curve,) = R.load(tmp_path / "local_steps.json")["tables"]
    assert [r[0] for r in curve["rows"]] == [0, 1, 2] and all(r[2] > 0 for r in curve["rows"])
    _run("e2e_lr.py", "--model", model, "--lrs", "1e-3", "--steps", "1", "--local-steps", "1",
         "--window", "16", "--out-results", str(tmp_path / "e2e_lr.json"))
    data = R.load(tmp_path / "e2e_lr.json")
    (table,) = data["tables"]
    assert [r[0] for r in table["rows"]] == ["none (local only)", "0.001"]
    assert data["command"].startswith("python plugins/fptquant/benchmarks/e2e_lr.py --model")


@pytest.mark.slow
def test_real_model_table_writes_its_results_file_on_a_tiny_model(tmp_path):
    """real_model.py --stats (the powered table) on a tiny model folder: a few rows, three
    windows; CIs over windows, gap closure and the paired difference to QuaRot."""
    model = str(_tiny_model_folder(tmp_path))
    _run("real_model.py", "--model", model, "--bits", "w6a6kv6", "--arms",
         "fp,rtn,quarot,fptquant_local", "--weights", "rtn", "--gptq-bits", "", "--e2e-bits",
         "", "--static-quarot-bits", "", "--eval-windows", "3", "--window", "16", "--calib",
         "1", "--local-steps", "1", "--prompts", "2", "--threads", "1", "--stats",
         "--out-results", str(tmp_path / "real.json"))
    data = R.load(tmp_path / "real.json")
    table, verdict = data["tables"]
    rows = [dict(zip(table["columns"], r)) for r in table["rows"]]
    # the summary's verdict (0.3.10): one row per width with both arms, named by the rule
    (v,) = [dict(zip(verdict["columns"], r)) for r in verdict["rows"]]
    assert verdict["name"] == "verdict" and (v["bits"], v["weights"]) == ("W6A6KV6", "RTN")
    assert v["FPTQuant-local minus QuaRot (log-ppl)"] == rows[3]["log-ppl minus QuaRot's"]
    lo, hi = (float(x) for x in v["95% CI"].strip("[]").split(","))
    assert v["winner"] == ("QuaRot" if lo > 0 else "FPTQuant-local" if hi < 0
                           else "no difference")
    assert v["thread tolerance"] == 0 and v["QuaRot usable"] in ("yes", "no", "-")
    assert [r["arm"] for r in rows][1:] == ["no transform", "QuaRot (dynamic per-token)",
                                           "FPTQuant-local"]
    assert rows[0]["arm"].startswith("FP") and rows[1]["log-ppl gap closed"] == 0
    assert rows[3]["minus QuaRot 95% CI"].startswith("[") and rows[3]["MDE (log-ppl)"] >= 0
    assert data["tolerance"]["CPU s"]["timing"] is True


@pytest.mark.slow
def test_lowbit_kernels_writes_rss_and_the_int_exact_row_on_a_tiny_model(tmp_path):
    """lowbit_kernels.py on a tiny model folder: the int-exact simulated W8A8 row has the
    kernel row's perplexity exactly, and every row has a measured resident size."""
    model = str(_tiny_model_folder(tmp_path))
    _run("lowbit_kernels.py", "--model", model, "--eval-windows", "1", "--window", "32",
         "--new-tokens", "2", "--repeats", "1", "--out-results", str(tmp_path / "low.json"))
    data = R.load(tmp_path / "low.json")
    (table,) = data["tables"]
    rows = {r[0]: dict(zip(table["columns"], r)) for r in table["rows"]}
    exact, kernel = rows["W8A8 simulated int-exact (fp32)"], rows["W8A8 torch._int_mm"]
    assert exact["perplexity"] == kernel["perplexity"]
    assert all(0 <= r["RSS loaded MB"] <= r["RSS after forward MB"] + 8 for r in rows.values())
    assert data["tolerance"]["RSS loaded MB"]["abs"] > 0


@pytest.mark.slow
def test_thread_repro_and_the_e2e_rows_on_a_tiny_model(tmp_path):
    """thread_repro.py writes its 1 vs 2 thread checks (training and table rows) as a results
    file; real_model.py with end-to-end rows adds the e2e-minus-local table and takes its
    tolerance from that file (none when the two thread counts agreed)."""
    model = str(_tiny_model_folder(tmp_path))
    _run("thread_repro.py", "--model", model, "--window", "16", "--steps", "1", "--e2e-steps",
         "1", "--eval-windows", "1", "--rows", "w4a4kv4/rtn/fptquant_local",
         "--out-results", str(tmp_path / "tr.json"))
    training, rows = R.load(tmp_path / "tr.json")["tables"]
    assert training["rows"][0][3] == "yes"  # training.threads=1: equal at 1 and 2 threads
    assert training["rows"][0][5] == "yes"  # merging with Q once == Q per weight
    assert [r[:3] for r in rows["rows"]] == [["FP", "-", "FP (de-quantised Q4_1 checkpoint)"],
                                             ["W4A4KV4", "RTN", "FPTQuant-local"]]
    _run("real_model.py", "--model", model, "--bits", "w4a8kv8", "--arms",
         "fp,quarot,fptquant_local,fptquant_e2e", "--weights", "rtn", "--gptq-bits", "",
         "--e2e-bits", "w4a8kv8", "--static-quarot-bits", "", "--eval-windows", "3",
         "--window", "16", "--calib", "1", "--local-steps", "1", "--e2e-steps", "1",
         "--prompts", "2", "--threads", "1", "--stats", "--tolerance-from",
         str(tmp_path / "tr.json"), "--out-results", str(tmp_path / "real.json"))
    data = R.load(tmp_path / "real.json")
    table, e2e, verdict = data["tables"]
    assert verdict["rows"][0][:2] == ["W4A8KV8", "RTN"]
    tol = data["tolerance"].get("*", {}).get("abs", 0.0)
    assert verdict["rows"][0][5] == tol  # the declared thread tolerance is the rule's margin
    assert [r[2] for r in table["rows"]][1:] == ["QuaRot (dynamic per-token)", "FPTQuant-local",
                                                 "FPTQuant-end-to-end"]
    assert e2e["name"] == "e2e" and [r[:2] for r in e2e["rows"]] == [["W4A8KV8", "RTN"]]
    assert e2e["rows"][0][3].startswith("[") and e2e["rows"][0][4] >= 0
    if all(r[-1] == "yes" for r in rows["rows"]):
        assert set(data["tolerance"]) == {"CPU s"}
    else:
        assert data["tolerance"]["*"]["abs"] > 0
