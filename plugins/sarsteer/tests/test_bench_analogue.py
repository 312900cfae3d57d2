"""bench_analogue.py's tables on synthetic flags (no model): the matched-refusal rows, the
paired SARSteer - plain difference and its MDE, and the bad-input errors."""

import argparse
import sys
from pathlib import Path

import pytest

from icml.testing import load_script

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_analogue.py"


def _bench():
    mod = load_script(BENCH, "sarsteer_bench_analogue")
    return mod


def _flags(rate, n):
    k = round(rate * n)
    return [True] * k + [False] * (n - k)


def test_tables_matched_difference():
    bench = _bench()
    alphas, n = [0.1, 0.5, 1.0], 20
    args = argparse.Namespace(seeds=[0, 1], alphas=alphas, form="roleplay", k=2, n_fit=16,
                              target=0.5, peer_alpha=0.0)
    ref = {k: {"harmful": _flags(0.0, n), "benign": _flags(0.0, n)}
           for k in ("no defense", "prompt defense (R appended)", "no defense, direct form")}
    # plain: harmful 0 / 0.4 / 1.0, benign 0 / 0.4 / 1.0; SARSteer: benign half of plain's
    plain = {"harmful": [_flags(r, n) for r in (0.0, 0.4, 1.0)],
             "benign": [_flags(r, n) for r in (0.0, 0.4, 1.0)]}
    sar = {"harmful": plain["harmful"], "benign": [_flags(r, n) for r in (0.0, 0.2, 0.5)]}
    out, diff = bench.tables(args, ref, {"plain": [plain, plain], "sarsteer": [sar, sar]},
                             None)
    matched = {r[0]: r for r in out[1]["rows"]}
    # the crossing of 50% lies 1/6 of the way from alpha 0.5 to 1.0
    assert matched["plain steering (lambda=0)"][1] == "0.583"
    assert matched["plain steering (lambda=0)"][3]["value"] == pytest.approx(50.0)
    assert matched["SARSteer (k=2, lambda=1)"][3]["value"] == pytest.approx(100 * (
        0.2 + (0.5 - 0.2) / 6))
    assert diff.value == pytest.approx(100 * ((0.2 + 0.3 / 6) - 0.5))
    assert diff.hi < 0


def test_bad_input(monkeypatch):
    bench = _bench()
    from icml import ConfigError

    for argv, key in ((["--k", "0"], "--k"), (["--target", "1.0"], "--target"),
                      (["--peer-alpha", "0.33"], "--peer-alpha")):
        monkeypatch.setattr(sys, "argv", [str(BENCH), *argv])
        with pytest.raises(ConfigError, match=key):
            bench.main()
