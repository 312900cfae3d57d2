import math

import numpy as np
from icml_bioagent_bench.robustness import jaccard, pearson, stability


def test_jaccard_symmetric_and_bounded():
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = set(rng.integers(0, 30, 10).tolist())
        b = set(rng.integers(0, 30, 10).tolist())
        assert jaccard(a, b) == jaccard(b, a)
        assert 0 <= jaccard(a, b) <= 1
    assert jaccard({1, 2}, {1, 2}) == 1.0 and jaccard({1}, {2}) == 0.0
    assert math.isnan(jaccard(set(), set()))


def test_pearson_identical_runs_is_one():
    x = [1.0, 2.0, 5.0, 7.0]
    assert pearson(x, x) == 1.0
    assert pearson(x, [-v for v in x]) == -1.0
    assert math.isnan(pearson([1.0], [1.0]))


def test_stability_of_runs(suite, sandbox):
    from icml_bioagent_bench.agents import ScriptedAgent
    from icml_bioagent_bench.harness import run_agent

    task = suite[("deseq", "clean")]
    dirs = [run_agent(task, ScriptedAgent("correct"), sandbox, run_id=f"t{i}").workspace
            for i in range(2)]
    s = stability("deseq", [f"{d}/results" for d in dirs])
    assert s["jaccard"] == 1.0 and s["pearson"] == 1.0
    other = run_agent(suite[("deseq", "decoy")], ScriptedAgent("naive"), sandbox, run_id="n")
    s2 = stability("deseq", [f"{dirs[0]}/results", f"{other.workspace}/results"])
    assert s2["jaccard"] < 0.5
