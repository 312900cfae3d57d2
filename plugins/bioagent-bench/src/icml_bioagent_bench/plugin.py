"""Hook implementations: thin adapters from the run config to the API. Light at import time."""

from __future__ import annotations

import icml
from icml_bioagent_bench.config import EvaluateConfig, InferConfig

CONFIGS = {"evaluate": EvaluateConfig, "infer": InferConfig}

BIBTEX = """@article{fa2026bioagentbench,
  title   = {BioAgent Bench: An AI Agent Evaluation Suite for Bioinformatics},
  author  = {Fa, Dionizije and Culjak, Marko and Pandza, Bruno and Cupic, Mateo},
  journal = {arXiv preprint arXiv:2601.21800},
  year    = {2026}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="bioagent-bench",
        title="BioAgent Bench: evaluating AI agents on bioinformatics pipelines",
        summary="Offline bioinformatics agent tasks with real tools; official rules, judge, "
                "completion, perturbations.",
        paper=icml.Paper(title="BioAgent Bench: An AI Agent Evaluation Suite for "
                         "Bioinformatics", url="https://arxiv.org/abs/2601.21800",
                         authors="Fa, Culjak, Pandza, Cupic", bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
        default_threads=1,
    )


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_bioagent_bench.job import evaluate_job

    return evaluate_job(ctx, config)


@icml.hookimpl
def icml_infer(ctx: icml.RunContext, config: InferConfig) -> icml.RunResult:
    from icml_bioagent_bench.job import infer_job

    return infer_job(ctx, config)
