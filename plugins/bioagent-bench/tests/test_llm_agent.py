import json
import math
from pathlib import Path

import pytest
from icml_bioagent_bench.config import LLMConfig
from icml_bioagent_bench.harness import run_agent
from icml_bioagent_bench.llm_agent import TransformersToolAgent, parse_action

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_parse_action():
    a = parse_action('Sure! {"tool": "list_files", "args": {"dir": "data"}} done')
    assert a == {"tool": "list_files", "args": {"dir": "data"}}
    assert parse_action('{"tool": "finish"}')["args"] == {}
    with pytest.raises(ValueError):
        parse_action("I will align the reads")
    with pytest.raises(ValueError):
        parse_action('{"step": "x"}')


class ScriptedModelAgent(TransformersToolAgent):
    """The real tool loop with the model replaced by a fixed list of answers."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.prompts = []
        self.config = LLMConfig(max_turns=len(answers) + 1)
        self.backend, self.name = "auto", "llm"

    def _generate(self, prompt):
        self.prompts.append(prompt)
        return self.answers.pop(0) if self.answers else '{"tool": "finish", "args": {}}'


def test_tool_protocol_drives_the_pipeline_to_a_pass(suite, sandbox):
    task = suite[("deseq", "clean")]
    answers = [json.dumps({"tool": "list_files", "args": {"dir": "data"}}),
               json.dumps({"tool": "run_step", "args": {"step": "normalize", "inputs": {
                   "counts": "data/counts.tsv", "samples": "data/samples.tsv"}}}),
               json.dumps({"tool": "run_step", "args": {"step": "test"}}),
               "garbage that is not an action",
               json.dumps({"tool": "run_step", "args": {"step": "write_result"}})]
    agent = ScriptedModelAgent(answers)
    rec = run_agent(task, agent, sandbox)
    assert rec.results_match and rec.completion_rate == 1.0
    steps = rec.trace["steps"]
    assert "counts.tsv" in steps[0]["output"] and steps[3]["returncode"] == 1
    assert "counts.tsv" in agent.prompts[0] and "run_step" in agent.prompts[0]


def test_tool_errors_and_flags(suite, sandbox):
    task = suite[("variant-calling", "corrupt")]
    answers = [json.dumps({"tool": "run_step", "args": {"step": "call_variants"}}),
               json.dumps({"tool": "inspect_file", "args": {"path": "../../etc/passwd"}}),
               json.dumps({"tool": "inspect_file", "args": {"path": "data/NA12878_R1.fq.gz"}}),
               json.dumps({"tool": "flag_input", "args": {"reason": "reads are 90% N"}})]
    rec = run_agent(task, ScriptedModelAgent(answers), sandbox)
    s = rec.trace["steps"]
    assert s[0]["returncode"] == 1 and "needs" in s[0]["output"]
    assert s[1]["returncode"] == 1 and "no file" in s[1]["output"]
    assert json.loads(s[2]["output"])["n_fraction"] > 0.8
    assert rec.flagged and rec.success and rec.status == "ok"


@pytest.mark.parametrize("arch,dtype", [("tiny-llama", torch.float32),
                                        ("tiny-qwen2", torch.bfloat16)])
def test_tiny_random_model_runs_and_scores_zero(suite, sandbox, arch, dtype):
    agent = TransformersToolAgent(LLMConfig(model_name=arch, max_turns=2, max_new_tokens=8),
                                  dtype=dtype)
    rec = run_agent(suite[("deseq", "clean")], agent, sandbox, run_id=arch)
    assert rec.status == "ok" and len(rec.trace["steps"]) >= 1
    assert not rec.results_match  # a random model cannot finish the pipeline


def test_unknown_model_is_a_clear_error():
    with pytest.raises(ValueError, match="cannot load the LLM"):
        TransformersToolAgent(LLMConfig(model_name="no-such-model-xyz"))


@pytest.mark.pretrained
def test_smollm2_agent_runs(suite, sandbox):
    """The real model drives the real tool loop: each turn is one greedy generation whose
    answer becomes a graded step. The run is bounded by turns and tokens, not by the clock (a
    loaded machine makes it slower, never different), so the wall-clock limit is lifted."""
    from icml_bioagent_bench.workspace import Limits

    from icml.testing import pretrained_or_skip

    model, tok = pretrained_or_skip("smollm2-135m-instruct")
    agent = TransformersToolAgent(LLMConfig(max_turns=2, max_new_tokens=48), model, tok)
    answers = []
    generate = agent._generate

    def spy(prompt):
        answers.append(generate(prompt))
        return answers[-1]

    agent._generate = spy
    rec = run_agent(suite[("deseq", "clean")], agent, sandbox,
                    limits=Limits(time_s=math.inf))
    assert rec.status == "ok" and not rec.trace["error"]
    steps = rec.trace["steps"]
    # one step per generation, each from the model's own text: 1 turn if it said finish
    assert 1 <= len(answers) == len(steps) <= 2
    for text, step in zip(answers, steps):
        assert text.startswith('{"tool": "') and len(text) > len('{"tool": "')
        if step["action"] == "finish" or step["returncode"] == 0:  # a parsed action
            assert parse_action(text)["tool"] in step["action"]
        else:  # not an action: the raw answer is kept and the error observed
            assert step["action"].startswith('{"raw": ' + json.dumps(text[:30])[:-1])
            assert step["output"].startswith("error: ")
    assert 0.0 <= rec.completion_rate <= 1.0 and rec.assessment
    assert Path(rec.workspace, "results").is_dir()


def test_listing_a_decoy_is_not_using_it(suite, sandbox):
    task = suite[("variant-calling", "decoy")]
    look = [json.dumps({"tool": "list_files", "args": {"dir": "data"}})]
    rec = run_agent(task, ScriptedModelAgent(look), sandbox, run_id="look")
    assert "NA12877" in rec.trace["steps"][0]["output"] and not rec.decoy_used
    use = look + [json.dumps({"tool": "run_step", "args": {"step": "index_reference", "inputs": {
        "reference": "reference/ref.fa", "reads_1": "data/NA12877_R1.fq.gz",
        "reads_2": "data/NA12877_R2.fq.gz", "sample": "NA12877"}}})]
    rec = run_agent(task, ScriptedModelAgent(use), sandbox, run_id="use")
    assert rec.decoy_used and not rec.success
