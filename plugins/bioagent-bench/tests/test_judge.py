import json

import pytest
from icml_bioagent_bench.judge import (
    JudgeError,
    LLMJudge,
    PipelineAssessment,
    adjusted_completion_rate,
    completion_rate,
    judge_evidence,
    parse_assessment,
)


def test_completion_formulas_and_bounds():
    for done in range(0, 5):
        for final in (False, True):
            a = PipelineAssessment(done, 4, final, "")
            assert 0 <= completion_rate(a) <= 1
            assert 0 <= adjusted_completion_rate(a) <= 1
            assert completion_rate(a) == done / 4
            assert adjusted_completion_rate(a) == (done + final) / 5
    full = PipelineAssessment(4, 4, True, "")
    assert completion_rate(full) == adjusted_completion_rate(full) == 1.0
    assert completion_rate(PipelineAssessment(0, 0, False, "")) != completion_rate(
        PipelineAssessment(0, 0, False, ""))  # nan, where the official code divides by zero


def test_schema_is_strict():
    with pytest.raises(JudgeError):
        PipelineAssessment(-1, 3, True, "")
    with pytest.raises(JudgeError):
        PipelineAssessment(1, 3, "yes", "")  # type: ignore[arg-type]
    with pytest.raises(JudgeError, match="unexpected"):
        PipelineAssessment.from_dict({"steps_completed": 1, "steps_to_completion": 2,
                                      "final_result_reached": True, "notes": "", "x": 1})
    with pytest.raises(JudgeError, match="missing"):
        PipelineAssessment.from_dict({"steps_completed": 1, "steps_to_completion": 2})
    a = parse_assessment('blah {"steps_completed": 2, "steps_to_completion": 3, '
                         '"final_result_reached": false, "notes": "ok"} tail')
    assert a == PipelineAssessment(2, 3, False, "ok")
    assert set(PipelineAssessment.json_schema()["required"]) == set(a.to_dict())


def test_llm_judge_gets_the_official_evidence_and_falls_back(suite, sandbox):
    from icml_bioagent_bench.agents import ScriptedAgent
    from icml_bioagent_bench.harness import run_agent

    seen = []
    ans = json.dumps({"steps_completed": 1, "steps_to_completion": 3,
                      "final_result_reached": True, "notes": "n"})

    def gen(prompt):
        seen.append(prompt)
        return ans

    task = suite[("deseq", "clean")]
    rec = run_agent(task, ScriptedAgent("correct"), sandbox, judge=LLMJudge(gen))
    assert rec.assessment["steps_completed"] == 1 and rec.completion_rate == pytest.approx(1 / 3)
    p = seen[0]
    assert "Expected-result snippets" in p and "CPAR2_" in p and task.result_rule in p
    assert "results/differential_expression.csv" in p
    bad = LLMJudge(lambda _: "I think it went well", retries=0)
    rec2 = run_agent(task, ScriptedAgent("correct"), sandbox, run_id="again", judge=bad)
    assert bad.failures == 1 and "unusable" in rec2.assessment["notes"]
    assert rec2.assessment["steps_completed"] == rec2.assessment["steps_to_completion"]
    with pytest.raises(JudgeError):
        LLMJudge(lambda _: "{}", fallback=None, retries=0).assess(task, rec.workspace,
                                                                  _score(task, rec))


def _score(task, rec):
    from pathlib import Path

    from icml_bioagent_bench.scoring import score_results

    return score_results(task.task_id, Path(rec.workspace) / "results", task.truth_dir)


def test_truth_never_reaches_the_agent_view(suite):
    task = suite[("variant-calling", "clean")]
    v = task.view()
    assert "truth" not in json.dumps(v.__dict__)
    ev = judge_evidence(task, task.root, _score_empty(task))
    assert "truth_snippets" in ev


def _score_empty(task):
    from icml_bioagent_bench.scoring import ScoreResult

    return ScoreResult(False)
