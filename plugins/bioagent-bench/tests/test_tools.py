import shutil

import pytest
from icml_bioagent_bench import tools
from icml_bioagent_bench.agents import ScriptedAgent
from icml_bioagent_bench.harness import run_agent
from icml_bioagent_bench.tasks import TASK_IDS


def test_missing_tool_names_what_to_install(monkeypatch):
    monkeypatch.setattr(tools, "has_tool", lambda name: name == "builtin")
    with pytest.raises(tools.ToolMissingError, match="apt-get install bwa.*unrelated"):
        tools.resolve("align", "bwa")
    with pytest.raises(tools.ToolMissingError, match="apt-get install salmon"):
        tools.resolve("quant", "debian")
    with pytest.raises(tools.ToolMissingError, match="pip install pysam"):
        tools.resolve("call", "pypi")
    assert tools.resolve("align", "auto") == "builtin"  # the pure-Python fallback
    with pytest.raises(ValueError, match="cannot run stage"):
        tools.resolve("align", "salmon")
    with pytest.raises(ValueError, match="unknown pipeline stage"):
        tools.resolve("assemble")


def test_missing_tool_through_the_cli_is_one_clear_line(monkeypatch, tmp_path):
    from icml.testing import icml_cli, one_line_error

    if all(shutil.which(t) for t in ("bwa", "samtools", "bcftools", "salmon", "kraken2")):
        env_path = "/nonexistent"
        monkeypatch.setenv("PATH", f"{env_path}")
    proc = icml_cli("run", "bioagent-bench", "--set", "backend=debian", "--set",
                    'tasks=["deseq"]', "--out", str(tmp_path))
    if proc.returncode == 0:
        pytest.skip("the Debian tools are installed and PATH could not hide them")
    line = one_line_error(proc)
    assert "apt-get install" in line and "backend=debian" in line


@pytest.mark.parametrize("backend", ["builtin", "pypi"])
def test_every_backend_passes_every_rule(suite, sandbox, backend):
    for tid in TASK_IDS:
        rec = run_agent(suite[(tid, "clean")], ScriptedAgent("correct", backend=backend),
                        sandbox, run_id=f"{tid}-{backend}")
        assert rec.results_match, (tid, backend, rec.problems, rec.trace["error"])


@pytest.mark.skipif(not all(shutil.which(t) for t in ("bwa", "samtools", "bcftools", "salmon",
                                                       "kraken2", "kraken2-build")),
                    reason="Debian bwa/samtools/bcftools/salmon/kraken2 not installed")
def test_debian_tools_pass_every_rule(suite, sandbox):
    for tid in TASK_IDS:
        rec = run_agent(suite[(tid, "clean")], ScriptedAgent("correct", backend="debian"),
                        sandbox, run_id=f"{tid}-debian")
        assert rec.results_match and rec.completion_rate == 1.0, (tid, rec.problems)
    ws = rec.workspace
    import pathlib

    assert (pathlib.Path(ws) / "outputs" / "kraken2_db" / "hash.k2d").exists() or any(
        p.name == "hash.k2d" for p in pathlib.Path(ws).rglob("hash.k2d"))


def test_scripted_agent_time_limit(suite, sandbox, monkeypatch):
    """The agent checks its limit after each pipeline step and stops there. Its clock is a
    counter (one second a reading), so where it stops does not depend on this machine's
    speed: after the first step's reading (1 s, then 2 s) the second's (3 s) is over 2.5 s."""
    import itertools
    import types

    from icml_bioagent_bench import agents
    from icml_bioagent_bench.pipelines import STEPS
    from icml_bioagent_bench.workspace import Limits

    clock = itertools.count()
    monkeypatch.setattr(agents, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    rec = run_agent(suite[("variant-calling", "clean")], ScriptedAgent("correct"), sandbox,
                    limits=Limits(time_s=2.5))
    steps = STEPS["variant-calling"]
    assert rec.status == "timeout" and not rec.results_match and len(steps) > 2
    assert rec.trace["error"] == f"time limit 2.5 s reached during {steps[1]}"
    assert [s["action"].split()[0] for s in rec.trace["steps"]] == ["choose", steps[0]]
