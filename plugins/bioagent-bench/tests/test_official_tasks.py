"""The six further official tasks: each generator's reference pipeline passes the official rule
(real tools where installed, the pure-Python fallback too), the naive policy falls for the
decoy, the robust one flags the corruption, and the rule texts are the official ones."""

import pytest
from icml_bioagent_bench.agents import ScriptedAgent
from icml_bioagent_bench.harness import run_agent
from icml_bioagent_bench.scoring import rows_match, score_results
from icml_bioagent_bench.suite import make_suite
from icml_bioagent_bench.tasks import EXTRA_TASK_IDS, task_module

# the official taskset's RESULT_RULES (bioagent_taskset/prompts.py), verbatim
OFFICIAL_RULES = {
    "alzheimer-mouse": "results_match is true only if the generated CSV and expected CSV share "
                       "at least one Pathway value.",
    "comparative-genomics": "results_match is true only if at least one consensus_annotation "
                            "value exactly matches the expected results.",
    "cystic-fibrosis": "results_match is true only if the causal CFTR variant is reported "
                       "exactly once with chromosome 7, position 117227832, variant_id 7115, "
                       "reference G, alternate T, gene CFTR, gene_id ENSG00000001626, "
                       "annotation stop_gained, impact HIGH, and transcript ENST00000003084.",
    "evolution": "results_match is true only if at least one chromosome/CHROM and position/POS "
                 "pair matches the expected variants.",
    "single-cell": "results_match is true only if at least one (cluster_id, "
                   "predicted_cell_type) pair matches the expected results.",
    "viral-metagenomics": "results_match is true only if Bottlenose dolphin adenovirus 1 is "
                          "explicitly reported under the Viruses domain.",
}


def _built(tid):
    try:
        task_module(tid)
    except ModuleNotFoundError:
        return False
    return True


TASKS = [t for t in EXTRA_TASK_IDS if _built(t)]


@pytest.fixture(scope="module")
def extra_suite(tmp_path_factory):
    return make_suite(tmp_path_factory.mktemp("extra"), tasks=TASKS, seed=0)


@pytest.mark.parametrize("tid", TASKS)
def test_rule_text_is_official(tid):
    assert task_module(tid).RULE == OFFICIAL_RULES[tid]


@pytest.mark.parametrize("tid", TASKS)
def test_reference_pipeline_passes_and_truth_passes(tid, extra_suite, sandbox):
    task = extra_suite[(tid, "clean")]
    rec = run_agent(task, ScriptedAgent("correct"), sandbox)
    assert rec.status == "ok" and rec.results_match, rec.problems
    assert rec.completion_rate == 1.0 and rec.assessment["final_result_reached"]
    # the truth table itself passes the rule, an empty table does not
    assert score_results(tid, task.truth_dir, task.truth_dir).results_match
    assert not rows_match(tid, [], [])


@pytest.mark.parametrize("tid", TASKS)
def test_builtin_fallback_passes(tid, extra_suite, sandbox):
    rec = run_agent(extra_suite[(tid, "clean")], ScriptedAgent("correct", backend="builtin"),
                    sandbox)
    assert rec.status == "ok" and rec.results_match, rec.problems


@pytest.mark.parametrize("tid", TASKS)
def test_decoy_catches_the_naive_policy_only(tid, extra_suite, sandbox):
    task = extra_suite[(tid, "decoy")]
    naive = run_agent(task, ScriptedAgent("naive"), sandbox)
    robust = run_agent(task, ScriptedAgent("robust"), sandbox)
    assert naive.decoy_used and not naive.success
    assert robust.success and not robust.decoy_used


@pytest.mark.parametrize("tid", TASKS)
def test_corruption_is_flagged_by_the_robust_policy(tid, extra_suite, sandbox):
    if (tid, "corrupt") not in extra_suite:
        assert not any(extra_suite[(tid, "clean")].meta["corrupt"].values())
        return
    rec = run_agent(extra_suite[(tid, "corrupt")], ScriptedAgent("robust"), sandbox)
    assert rec.flagged and rec.success


def test_evaluate_job_runs_a_further_task_without_a_corrupt_condition(tmp_path):
    """``--set tasks=["cystic-fibrosis"]``: the job skips the corruption the task lacks."""
    from icml import runner

    res = runner.run("bioagent-bench", "evaluate", overrides=[
        'tasks=["cystic-fibrosis"]', "trials=1", 'agents=["correct","naive"]'],
        out=tmp_path, show_progress=False)
    assert res.status == "ok"
    table = next(t for t in res.to_dict()["tables"] if t["title"].startswith("Completion"))
    assert {row[1] for row in table["rows"]} == {"clean", "decoy", "bloat"}
