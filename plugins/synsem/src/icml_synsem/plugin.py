"""Hook implementations: thin adapters from the run config to the API. Keep this module light:
heavy libraries (torch, transformers) load in job.py, which the hook imports when it runs."""

from __future__ import annotations

import icml
from icml_synsem.config import EvaluateConfig

CONFIGS = {"evaluate": EvaluateConfig}

BIBTEX = """@article{acevedo2026synsem,
  title   = {Differential syntactic and semantic encoding in {LLMs}},
  author  = {Acevedo, Santiago and Laio, Alessandro and Baroni, Marco},
  journal = {arXiv preprint arXiv:2601.04765},
  year    = {2026}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="synsem",
        title="Differential syntactic and semantic encoding in LLMs",
        summary="Syntactic/semantic centroids of layer representations: ablation, recall@k, "
                "Information Imbalance.",
        paper=icml.Paper(title="Differential syntactic and semantic encoding in LLMs",
                         url="https://arxiv.org/abs/2601.04765",
                         authors="Santiago Acevedo, Alessandro Laio, Marco Baroni",
                         bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
    )


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_synsem.job import evaluate_job

    return evaluate_job(ctx, config)
