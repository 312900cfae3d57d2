"""Issue 62's pieces: the tau-sweep arms of the long-context engine, the paired verdicts with
their MDE, and the bfloat16-vs-float32 table."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from icml_capkv.longctx import (
    _press,
    check_policies,
    compare_arm,
    evaluate_item,
    make_items,
    tau_of,
)
from icml_capkv.scorers import ScoreInputs

from icml.testing import load_script

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _bench():
    mod = load_script(BENCH / "longctx_bench.py", "capkv_longctx_bench")
    return mod


def test_tau_arms_are_capkv_at_that_tau_and_tau_zero_is_leverage() -> None:
    assert _press("capkv_tau2", None).tau == 2.0
    assert _press("capkv_tau10", None).tau == 10.0
    assert _press("capkv", None).tau == 5.0  # the configured (authors') tau
    assert [tau_of(p) for p in ("leverage", "capkv_tau1", "capkv_tau2.5", "snapkv")] == [
        0.0, 1.0, 2.5, None]
    g = torch.Generator().manual_seed(0)
    keys, values = torch.randn(1, 2, 40, 8, generator=g), torch.randn(1, 2, 40, 8, generator=g)
    inputs = ScoreInputs(keys, values, None, torch.randn(1, 4, 8, generator=g))
    assert torch.equal(_press("capkv_tau0", None).score(inputs),
                       _press("leverage", None).score(inputs))
    assert not torch.equal(_press("capkv_tau2", None).score(inputs),
                           _press("leverage", None).score(inputs))


def test_unknown_policies_are_refused_before_any_work() -> None:
    check_policies(["capkv", "capkv_tau10", "snapkv_kvpress", "leverage"])
    for bad in ("capkv_tau", "capkv_tauX", "bogus"):
        with pytest.raises(ValueError, match=bad):
            check_policies(["capkv", bad])
    with pytest.raises(ValueError, match="bogus"):
        evaluate_item(None, None, ["bogus"], [0.5])  # refused before touching the model


def _cell(per_item: dict[str, list[float]], metric: str = "correct") -> dict:
    return {(p, 0.5): {metric: list(v)} for p, v in per_item.items()}


def test_paired_verdicts_ahead_tied_behind_and_no_signal() -> None:
    n = 50
    ones, zeros = [1.0] * n, [0.0] * n
    half = [float(i % 2) for i in range(n)]
    # capkv right everywhere, every baseline right on half: ahead, by 0.5
    v = compare_arm(_cell({"capkv": ones, "snapkv": half, "random": zeros}), "capkv", 0.5,
                    "correct", lower=False)
    assert (v["verdict"], v["best"], v["n"]) == ("ahead", "snapkv", n)
    assert v["diff"]["value"] == pytest.approx(0.5) and 0 < v["mde"] < 0.5
    # leverage counts as a competitor of capkv, but not of itself
    v = compare_arm(_cell({"capkv": half, "leverage": ones, "snapkv": zeros}), "capkv", 0.5,
                    "correct", lower=False)
    assert (v["verdict"], v["best"]) == ("behind", "leverage")
    v = compare_arm(_cell({"capkv": half, "leverage": ones, "snapkv": zeros}), "leverage",
                    0.5, "correct", lower=False)
    assert (v["verdict"], v["best"]) == ("ahead", "snapkv")
    # one discordant item out of 50: tied, with the MDE of a paired 0/1 comparison
    v = compare_arm(_cell({"capkv": [1.0] + zeros[1:], "snapkv": zeros}), "capkv", 0.5,
                    "correct", lower=False)
    assert v["verdict"] == "tied" and v["mde"] > 0
    # everyone fails every item: no signal
    v = compare_arm(_cell({"capkv": zeros, "snapkv": zeros}), "capkv", 0.5, "correct",
                    lower=False)
    assert v["verdict"] == "no signal"
    # KL: lower is better
    g = torch.Generator().manual_seed(1)
    noise = (0.01 * torch.randn(n, generator=g)).tolist()
    v = compare_arm(_cell({"capkv": [0.1 + e for e in noise], "h2o": [0.3] * n}, "kl"),
                    "capkv", 0.5, "kl", lower=True)
    assert v["verdict"] == "ahead" and v["diff"]["hi"] < 0


def test_dtype_table_counts_agreeing_grades_and_checks_the_cis() -> None:
    lb = _bench()

    def rec(i: int, shift: float) -> dict:
        rows = [{"policy": "full", "ratio": 0.0, "question_aware": False, "correct": 1.0,
                 "kl": 0.0, "top1": 1.0, "scoring_s": 0.0, "prefill_s": 1.0, "T": 10}]
        rows += [{"policy": p, "ratio": r, "question_aware": False,
                  "correct": float((i + k) % 2), "kl": 0.1 * (i + 1) + shift, "top1": 1.0,
                  "scoring_s": 0.1, "T": 10}
                 for k, p in enumerate(("capkv", "snapkv")) for r in lb.RATIOS]
        return {"task": "niah_single", "length": 128, "item": i, "rows": rows, "seconds": 1.0}

    bf = [rec(i, 0.0) for i in range(6)]
    from icml_capkv.longctx import summarize_items

    t = lb.dtype_table(bf, [rec(i, 0.001) for i in range(3)], summarize_items(bf))
    rows = {r[0]: r for r in t["rows"]}
    assert rows["capkv"][1] == f"{3 * len(lb.RATIOS)}/{3 * len(lb.RATIOS)}"
    assert rows["capkv"][3] == pytest.approx(0.001) and rows["capkv"][4] == "yes"
    t = lb.dtype_table(bf, [rec(i, 1.0) for i in range(3)], summarize_items(bf))
    assert {r[0]: r[4] for r in t["rows"]}["snapkv"] == "no"  # a KL shift far outside the CI


@pytest.mark.pretrained
def test_bfloat16_engine_runs_the_tau_arms_on_the_real_model(smol) -> None:
    model, tok = smol
    item = make_items(tok, "niah_single", 256, 1)[0]
    bf16 = copy.deepcopy(model).to(torch.bfloat16)  # the session's model stays float32
    rows = evaluate_item(bf16, item, ["capkv", "capkv_tau1", "leverage"], [0.5], modes=(False,))
    assert [r["policy"] for r in rows] == ["full", "capkv", "capkv_tau1", "leverage"]
    assert rows[0]["correct"] == 1.0 and "decode_s" in rows[0]
