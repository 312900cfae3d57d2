"""Hook implementations: thin adapters from the run config to the API. Light at import time."""

from __future__ import annotations

import icml
from icml_tipex.config import EvaluateConfig, InferConfig

CONFIGS = {"evaluate": EvaluateConfig, "infer": InferConfig}

BIBTEX = """@inproceedings{tipex2026,
  title     = {{TIPEX}: Two-Tier Inference-Time Parallelism for Multi-Agent {LLM} Systems},
  booktitle = {Proceedings of the 43rd International Conference on Machine Learning (ICML)},
  year      = {2026}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="tipex",
        title="TIPEX: two-tier inference-time parallelism for multi-agent LLM systems",
        summary="Replica (N paths) x structural (subtask DAG, width w) parallelism in one "
                "asyncio executor with a virtual clock",
        paper=icml.Paper(title="TIPEX: Two-Tier Inference-Time Parallelism for Multi-Agent "
                         "LLM Systems", url="https://icml.cc/", bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
        default_threads=1,
    )


@icml.hookimpl
def icml_infer(ctx: icml.RunContext, config: InferConfig) -> icml.RunResult:
    from icml_tipex.job import infer_job

    return infer_job(ctx, config)


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_tipex.job import evaluate_job

    return evaluate_job(ctx, config)
