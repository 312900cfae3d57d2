"""The paper's qualitative claims at small scale on SynthGAIA with the scripted model (seeded;
margins well above the binomial noise of 100 tasks, about 0.05). Settings where TIPEX loses are
asserted too: on the easiest level the planner makes it slower than the bare agent."""

import pytest
from icml_tipex.runner import ExecutionConfig
from icml_tipex.sweep import complementarity, sweep

N_TASKS = 100


@pytest.fixture(scope="module")
def rows(runner, suite):
    cfgs = [ExecutionConfig(max_inflight=None, planner="chain"),
            ExecutionConfig(max_inflight=None, planner="chain", n_replicas=5),
            ExecutionConfig(max_inflight=None,
                            width=4), ExecutionConfig(max_inflight=None, width=4, n_replicas=5)]
    out = []
    for lvl in (1, 2, 3):
        tasks = {lvl: suite.tasks(lvl, N_TASKS if lvl > 1 else 30, offset=10_000)}
        out += sweep(runner, tasks, ExecutionConfig(max_inflight=None), configs=cfgs)
    return out


def test_parallelism_raises_accuracy_at_a_token_cost(rows) -> None:
    for lvl in (2, 3):
        c = complementarity(rows, lvl, 5, 4)
        assert c["gain_both"] > 0.15 and c["token_ratio"] > 3


def test_structural_parallelism_cuts_latency_on_long_tasks_but_not_short_ones(rows) -> None:
    assert complementarity(rows, 3, 5, 4)["speedup"] > 1.3
    assert complementarity(rows, 1, 5, 4)["speedup"] < 1.0  # the planner costs more than it saves


def test_replicas_alone_cannot_rescue_hard_tasks_but_both_tiers_can(rows) -> None:
    c = complementarity(rows, 3, 5, 4)
    assert c["base_acc"] < 0.35
    assert c["gain_both"] > c["gain_rp"] + 0.15
    assert c["gain_both"] > c["gain_sp"] + 0.1
