import pytest
from icml_bioagent_bench.config import EvaluateConfig, InferConfig, Limits

from icml.config import ConfigError, build_config


def test_bad_values_are_one_line_errors():
    for cfg, sets, word in ((EvaluateConfig, ['tasks=["giab"]'], "tasks"),
                            (EvaluateConfig, ['agents=["gpt5"]'], "agents"),
                            (EvaluateConfig, ['conditions=["noise"]'], "conditions"),
                            (EvaluateConfig, ["backend=conda"], "backend"),
                            (EvaluateConfig, ["limits.time_s=0"], "limits.time_s"),
                            (InferConfig, ["agent=cli:"], "agents"),
                            (InferConfig, ["task=zika"], "task")):
        with pytest.raises(ConfigError) as e:
            build_config(cfg, {}, sets)
        assert word in str(e.value) and "\n" not in str(e.value)


def test_cli_rejects_unknown_llm_model_cleanly(tmp_path):
    from icml.testing import icml_cli, one_line_error

    proc = icml_cli("run", "bioagent-bench", "infer", "--set", "agent=llm", "--set",
                    "llm.model_name=/no/such/model", "--out", str(tmp_path))
    assert proc.returncode != 0
    assert "cannot load the LLM" in one_line_error(proc)


def test_infinite_limits_are_accepted_as_no_limit():
    cfg = build_config(EvaluateConfig, {}, ["limits.time_s=inf", "limits.disk_mb=inf"])
    assert cfg.limits == Limits(float("inf"), float("inf"))
    with pytest.raises(ConfigError, match="limits.time_s"):
        build_config(EvaluateConfig, {}, ["limits.time_s=nan"])


def test_a_cli_agent_that_cannot_start_fails_the_run_not_scores_zero(tmp_path):
    """`agent=cli:<missing command>` exited 0 with score 0; each run whose agent cannot start
    is now a failed call (ctx.call_failed), so a job where none started is a failed run."""
    import logging

    from icml_bioagent_bench.job import infer_job

    import icml

    ctx = icml.RunContext(out_dir=tmp_path, seed=0, show_progress=False,
                          logger=logging.getLogger("test"))
    cfg = build_config(InferConfig, {}, ["task=deseq", "agent=cli:/no/such/agent",
                                         "limits.time_s=inf"])
    infer_job(ctx, cfg)
    problem = ctx.calls_problem()
    assert "cannot start '/no/such/agent'" in problem and "\n" not in problem
    ok = icml.RunContext(out_dir=tmp_path / "ok", seed=0, show_progress=False,
                         logger=logging.getLogger("test"))
    infer_job(ok, build_config(InferConfig, {}, ["task=deseq", "limits.time_s=inf"]))
    assert ok.calls_problem() == "" and ok.calls["ok"] == 1
