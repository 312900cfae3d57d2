import pytest
from icml_bioagent_bench.config import EvaluateConfig, InferConfig

from icml.config import ConfigError, build_config


def test_bad_values_are_one_line_errors():
    for cfg, sets, word in ((EvaluateConfig, ['tasks=["giab"]'], "tasks"),
                            (EvaluateConfig, ['agents=["gpt5"]'], "agents"),
                            (EvaluateConfig, ['conditions=["noise"]'], "conditions"),
                            (EvaluateConfig, ["backend=conda"], "backend"),
                            (EvaluateConfig, ["time_limit_s=0"], "time_limit_s"),
                            (InferConfig, ["agent=cli:"], "agents"),
                            (InferConfig, ["task=zika"], "task")):
        with pytest.raises(ConfigError) as e:
            build_config(cfg, {}, sets)
        assert word in str(e.value) and "\n" not in str(e.value)


def test_cli_rejects_unknown_llm_model_cleanly(tmp_path):
    from icml.testing import icml_cli, one_line_error

    proc = icml_cli("run", "bioagent-bench", "infer", "--set", "agent=llm", "--set",
                    "llm_model=/no/such/model", "--out", str(tmp_path))
    assert proc.returncode != 0
    assert "cannot load the LLM" in one_line_error(proc)
