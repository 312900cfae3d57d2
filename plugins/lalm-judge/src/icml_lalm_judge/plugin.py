"""Hook implementations: thin adapters from the run config to the API. Light at import time."""

from __future__ import annotations

import icml
from icml_lalm_judge.config import EvaluateConfig

CONFIGS = {"evaluate": EvaluateConfig}

BIBTEX = """@article{ivry2026lalmjudge,
  title   = {LALM-as-a-Judge: Safety Evaluation of Multi-Turn Spoken Dialogues},
  author  = {Ivry, Amir and Watanabe, Shinji},
  journal = {arXiv preprint arXiv:2602.04796},
  year    = {2026},
  note    = {metrics reconstructed from the abstract; no official code}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="lalm-judge",
        title="LALM-as-a-Judge: safety judging of multi-turn spoken dialogues (reconstructed)",
        summary="Spoken-dialogue safety benchmark: one label-blind unsafe turn of graded "
                "severity, offline speech, T/A/A+T judges.",
        paper=icml.Paper(title="LALM-as-a-Judge: safety evaluation in multi-turn spoken "
                         "dialogues", url="https://arxiv.org/abs/2602.04796",
                         authors="Amir Ivry, Shinji Watanabe", bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
        default_threads=1,
    )


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_lalm_judge.job import evaluate_job

    return evaluate_job(ctx, config)
