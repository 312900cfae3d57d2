"""Same seed, same results and traces, byte for byte, as the runner before it was optimised.

``data/golden_runner.json`` was produced by running ``python plugins/tipex/tests/golden.py
--write`` on the code at commit aa920a2 (the runner, scheduler, clock and scripted model before
the per-call cost work), with PYTHONHASHSEED 1, 2 and 3 giving the same file. It holds, for 12
configs (chain and DAG, N up to 9, w up to 8, g 1 to 8, K, quorum, judge, first-finish, token
budget, timeout, temperature 0, a raising planner, a hanging synthesizer) x 3 levels x 4 tasks,
every result field (floats as exact reprs) and the SHA-256 of the task's full JSONL trace.
A change that reorders events at equal virtual times, rounds a time differently or skips an
event fails here."""

import json
from pathlib import Path

import pytest

from icml.testing import load_script

golden = load_script(Path(__file__).with_name("golden.py"), "tipex_golden")


@pytest.mark.parametrize("engine", ["sim", "asyncio"])
def test_runner_matches_the_pre_optimisation_golden(engine: str) -> None:
    """Both virtual-clock engines: the lean SimEventLoop must reproduce asyncio's schedule."""
    want = json.loads(golden.GOLDEN.read_text())
    got = json.loads(json.dumps(golden.fingerprint(engine)))
    assert sorted(got) == sorted(want)
    for key in want:  # results first: a readable diff when something moved
        assert got[key]["results"] == want[key]["results"], key
        assert got[key]["events"] == want[key]["events"], key
        assert got[key]["trace_sha256"] == want[key]["trace_sha256"], key
