"""``benchmarks/bench_llm.py --out-results`` writes every number of the README's LLM section as a
results file (issue 47), checked with a tiny random model (``tiny-llama``, one tool call)."""

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def test_bench_llm_writes_agent_actions_and_judge_tables(tmp_path):
    from icml import results

    out = tmp_path / "llm.json"
    args = ["--model", "tiny-llama", "--max-turns", "1", "--out-results", str(out)]
    subprocess.run([sys.executable, str(BENCH / "bench_llm.py"), *args], check=True,
                   capture_output=True, text=True)
    data = results.load(out)
    assert data["command"] == ("python plugins/bioagent-bench/benchmarks/bench_llm.py "
                               + " ".join(args))
    agent, actions, judge = data["tables"]
    assert [t["name"] for t in data["tables"]] == ["llm-agent", "llm-actions", "llm-judge"]
    assert [r[:3] for r in agent["rows"]] == [["llm", c, 4] for c in
                                              ("clean", "corrupt", "decoy", "bloat")]
    (runs, n_actions, valid, _tools, _s), = actions["rows"]
    assert runs == 16 and n_actions >= 16 and 0 <= valid <= n_actions
    (judged, fit, agree, *_rest), = judge["rows"]
    assert judged == 32 and 0 <= agree <= fit <= judged
    if fit == 0:   # no answer parsed: no mean or correlation is made up
        assert judge["rows"][0][3:6] == [None, None, None]
    assert data["tolerance"]["agent s"]["timing"] and data["tolerance"]["judge s"]["timing"]
    for t in data["tables"]:
        results.render_table(t)
