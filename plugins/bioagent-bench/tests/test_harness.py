import os
import signal
import sys
from pathlib import Path

import pytest
from icml_bioagent_bench.agents import CommandAgent, ScriptedAgent
from icml_bioagent_bench.harness import run_agent
from icml_bioagent_bench.tasks import TASK_IDS
from icml_bioagent_bench.workspace import Limits, Workspace


@pytest.mark.parametrize("tid", TASK_IDS)
def test_reference_pipeline_passes_each_rule(suite, sandbox, tid):
    rec = run_agent(suite[(tid, "clean")], ScriptedAgent("correct"), sandbox)
    assert rec.status == "ok" and rec.results_match, rec.problems
    assert rec.completion_rate == rec.adjusted_completion_rate == 1.0
    if tid == "variant-calling":
        assert rec.metrics["f1_score"] >= 0.95 and rec.metrics["indel_f1"] > 0


@pytest.mark.parametrize("tid", TASK_IDS)
def test_naive_falls_for_the_decoy_and_robust_does_not(suite, sandbox, tid):
    naive = run_agent(suite[(tid, "decoy")], ScriptedAgent("naive"), sandbox)
    robust = run_agent(suite[(tid, "decoy")], ScriptedAgent("robust"), sandbox)
    assert naive.decoy_used and not naive.success
    assert not naive.results_match
    assert robust.results_match and not robust.decoy_used and robust.success
    # the naive policy is not broken: on clean data it passes
    assert run_agent(suite[(tid, "clean")], ScriptedAgent("naive"), sandbox).results_match


@pytest.mark.parametrize("tid", TASK_IDS)
def test_only_the_robust_agent_flags_corruption(suite, sandbox, tid):
    robust = run_agent(suite[(tid, "corrupt")], ScriptedAgent("robust"), sandbox)
    correct = run_agent(suite[(tid, "corrupt")], ScriptedAgent("correct"), sandbox)
    assert robust.flagged and robust.success
    assert not correct.flagged and not correct.success and not correct.results_match
    assert any("not flagged" in p for p in correct.problems)
    if tid == "variant-calling":
        assert correct.metrics["f1_score"] < 0.1


def test_workspace_contract(suite, sandbox):
    task = suite[("deseq", "clean")]
    ws = Workspace.create(task, sandbox, "w1")
    assert sorted(p.name for p in ws.path.iterdir()) == ["data", "outputs", "reference",
                                                          "results"]
    assert not any("truth" in str(p) for p in ws.path.rglob("*"))
    assert not (ws.data / "counts.tsv").stat().st_mode & 0o222  # inputs are read-only
    with pytest.raises(FileExistsError, match="fresh"):
        Workspace.create(task, sandbox, "w1")
    with pytest.raises(ValueError, match="overlap"):
        Workspace.create(task, task.root / "inside", "w2")


def _script(tmp_path: Path, body: str) -> list[str]:
    p = tmp_path / "agent.py"
    p.write_text(body)
    return [sys.executable, str(p)]


def test_command_agent_runs_a_real_pipeline(suite, sandbox, tmp_path):
    body = ("import os\nfrom pathlib import Path\n"
            "from icml_bioagent_bench.pipelines import TaskPipeline\n"
            "assert 'counts.tsv' in os.environ['BIOAGENT_PROMPT']\n"
            "TaskPipeline('deseq', Path.cwd()).run_all({'counts': 'data/counts.tsv', "
            "'samples': 'data/samples.tsv'})\nprint('done')\n")
    rec = run_agent(suite[("deseq", "clean")], CommandAgent(_script(tmp_path, body)), sandbox)
    assert rec.status == "ok" and rec.results_match and rec.completion_rate == 1.0


def test_writing_outside_the_workspace_invalidates_only_that_run(suite, sandbox, tmp_path):
    task = suite[("deseq", "clean")]
    first = run_agent(task, ScriptedAgent("correct"), sandbox, run_id="first")
    before = (Path(first.workspace) / "results" / "differential_expression.csv").read_bytes()
    body = ("from pathlib import Path\n(Path.cwd().parent / 'escape.txt').write_text('x')\n"
            "target = Path.cwd().parent / 'first' / 'results' / 'differential_expression.csv'\n"
            "try:\n    target.write_text('tampered')\nexcept OSError:\n    print('blocked')\n")
    rec = run_agent(task, CommandAgent(_script(tmp_path, body)), sandbox, run_id="evil")
    assert rec.status == "escaped" and not rec.results_match and rec.completion_rate == 0
    assert any("outside its workspace" in p for p in rec.problems)
    assert first.results_match  # the earlier run's grade is final
    after = (Path(first.workspace) / "results" / "differential_expression.csv").read_bytes()
    if os.geteuid() != 0:  # file modes bind only non-root agents: the frozen run is intact
        assert after == before and "blocked" in rec.trace["steps"][0]["output"]
    else:  # root ignores modes: the tampering is caught and the run that did it invalidated
        assert "escape.txt" in " ".join(rec.problems)


def test_time_limit_kills_the_agent(suite, sandbox, tmp_path):
    """An agent still running at the limit is killed (SIGKILL, not left to end its sleep):
    checked by how it ended, not by how long that took on this machine."""
    body = "import time\nopen('results/x.csv','w').write('gene_id\\n')\ntime.sleep(30)\n"
    rec = run_agent(suite[("deseq", "clean")], CommandAgent(_script(tmp_path, body)), sandbox,
                    limits=Limits(time_s=1.0))
    assert rec.status == "timeout" and not rec.results_match
    assert rec.trace["error"] == "killed after the 1 s limit"
    assert rec.trace["steps"][0]["returncode"] == -signal.SIGKILL


def test_disk_limit(suite, sandbox, tmp_path):
    body = "open('outputs/big.bin','wb').write(b'0' * (3 * 2**20))\n"
    rec = run_agent(suite[("deseq", "clean")], CommandAgent(_script(tmp_path, body)), sandbox,
                    limits=Limits(time_s=1e6, disk_mb=2.0))  # no wall clock
    assert rec.status == "disk_limit" and any("MB" in p for p in rec.problems)


def test_malformed_and_missing_results_are_graded_not_raised(suite, sandbox, tmp_path):
    body = "open('results/abundance.csv','w').write('OTU,Phylum,JP4D\\n1,X,abc\\n')\n"
    rec = run_agent(suite[("metagenomics", "clean")], CommandAgent(_script(tmp_path, body)),
                    sandbox)
    assert not rec.results_match and rec.problems and rec.status == "ok"
    assert rec.assessment["final_result_reached"] is False
    rec = run_agent(suite[("metagenomics", "clean")],
                    CommandAgent(_script(tmp_path, "print('nothing')\n")), sandbox, run_id="e")
    assert not rec.results_match and any("no result file" in p for p in rec.problems)
    rec = run_agent(suite[("metagenomics", "clean")],
                    CommandAgent(["/no/such/agent"]), sandbox, run_id="f")
    # a setup failure, not a measurement: the job counts it as a failed call (below)
    assert rec.status == "not_started" and "cannot start" in rec.trace["error"]


def test_a_crashing_agent_is_a_graded_failure(suite, sandbox):
    class Boom:
        name = "boom"

        def run(self, task, workdir, timeout_s):
            raise RuntimeError("kaboom")

    rec = run_agent(suite[("deseq", "clean")], Boom(), sandbox)
    assert rec.status == "error" and "kaboom" in rec.trace["error"]


def test_a_damaged_vcf_gz_is_graded_not_raised(suite, sandbox, tmp_path):
    """A .vcf.gz whose compressed body is damaged raised zlib.error out of read_vcf and
    score_results, ending `icml run bioagent-bench evaluate` and losing every other row."""
    body = ("import gzip\n"
            "vcf = '##fileformat=VCFv4.2\\n#CHROM\\tPOS\\tID\\tREF\\tALT\\tQUAL\\tFILTER\\t"
            "INFO\\n' + ''.join(f'chr1\\t{i}\\t.\\tA\\tC\\t50\\tPASS\\t.\\n' "
            "for i in range(1, 400))\n"
            "raw = gzip.compress(vcf.encode(), mtime=0)\n"
            "raw = raw[:30] + bytes(b ^ 0xFF for b in raw[30:60]) + raw[60:]\n"
            "open('results/calls.vcf.gz', 'wb').write(raw)\n")
    rec = run_agent(suite[("variant-calling", "clean")], CommandAgent(_script(tmp_path, body)),
                    sandbox)
    assert rec.status == "ok" and not rec.results_match
    (problem,) = [p for p in rec.problems if "calls.vcf.gz" in p]
    assert "unreadable VCF" in problem and "\n" not in problem


def test_an_infinite_time_limit_means_no_limit(suite, sandbox, tmp_path):
    """Limits(time_s=inf) raised OverflowError in the command agent's subprocess wait."""
    body = "print('hello')\n"
    rec = run_agent(suite[("deseq", "clean")], CommandAgent(_script(tmp_path, body)), sandbox,
                    limits=Limits(time_s=float("inf"), disk_mb=float("inf")))
    assert rec.status == "ok" and "hello" in rec.trace["steps"][0]["output"]
    for bad in (float("nan"), 0.0, -1.0):
        with pytest.raises(ValueError, match="limits must be positive"):
            Limits(time_s=bad)
