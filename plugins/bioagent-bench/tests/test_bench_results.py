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


def test_bench_agent_writes_task_summary_judge_and_time_tables(tmp_path):
    """``bench_agent.py`` (constrained decoding, LLM judge vs rule judge with CIs) on one task,
    two trials, a tiny random model."""
    from icml import results

    out = tmp_path / "agent.json"
    args = ["--model", "tiny-llama", "--tasks", "deseq", "--trials", "2", "--max-turns", "2",
            "--out-results", str(out)]
    subprocess.run([sys.executable, str(BENCH / "bench_agent.py"), *args], check=True,
                   capture_output=True, text=True)
    data = results.load(out)
    assert [t["name"] for t in data["tables"]] == ["agent-tasks", "agent-summary",
                                                   "judge-agreement", "agent-time"]
    tasks, summary, judge, timing = data["tables"]
    (tid, runs, match, *_), = tasks["rows"]
    assert tid == "deseq" and runs == 2 and 0 <= match <= 2
    assert [r[0] for r in summary["rows"]] == ["llm (constrained)", "scripted correct (clean)",
                                               "scripted naive (decoy)"]
    assert summary["rows"][1][2] == 100.0 and summary["rows"][2][2] == 0.0
    label, n, *_ = judge["rows"][0]
    assert label == "all judged runs" and n == 4  # 2 llm runs + correct + naive
    for row in judge["rows"]:
        assert row[5] <= row[4] <= row[6]  # the agreement lies in its CI
    assert data["tolerance"]["s per run"]["timing"]
    for t in data["tables"]:
        results.render_table(t)
