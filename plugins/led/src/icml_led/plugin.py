"""Hook implementations: thin adapters from the run config to the API. Light at import time."""

from __future__ import annotations

import icml
from icml_led.config import EvaluateConfig, InferConfig

CONFIGS = {"infer": InferConfig, "evaluate": EvaluateConfig}

BIBTEX = """@inproceedings{led2026,
  title     = {Latent Exploration Decoding},
  booktitle = {Proceedings of the 43rd International Conference on Machine Learning (ICML)},
  year      = {2026},
  note      = {arXiv:2602.01698; code: https://github.com/AlbertTan404/LED}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="led",
        title="Latent Exploration Decoding",
        summary="Depth-conditioned exploration for transformers generate: max-entropy "
                "aggregation of intermediate-layer posteriors.",
        paper=icml.Paper(title="Latent Exploration Decoding",
                         url="https://arxiv.org/abs/2602.01698",
                         authors="Renmin University of China, UNIMORE, Xiaomi",
                         bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
        default_threads=1,  # the tiny models run fastest on one thread; --threads overrides
    )


@icml.hookimpl
def icml_infer(ctx: icml.RunContext, config: InferConfig) -> icml.RunResult:
    from icml_led.job import infer_job

    return infer_job(ctx, config)


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_led.job import evaluate_job

    return evaluate_job(ctx, config)
