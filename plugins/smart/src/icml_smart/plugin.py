"""Hook implementations: thin adapters from the run config to the API. Light at import time."""

from __future__ import annotations

import icml
from icml_smart.config import DifferentiateConfig, EvaluateConfig, InferConfig, TrainConfig

CONFIGS = {"train": TrainConfig, "infer": InferConfig, "evaluate": EvaluateConfig,
           "differentiate": DifferentiateConfig}

BIBTEX = """@inproceedings{smart2026,
  title     = {SMART: A Mesh-Free Neural Surrogate from Point-Cloud Geometry},
  booktitle = {Proceedings of the 43rd International Conference on Machine Learning (ICML)},
  year      = {2026},
  note      = {architecture reconstructed from the abstract; no official code}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="smart",
        title="SMART: mesh-free physics surrogate from point clouds (reconstructed)",
        summary="Mesh-free point-cloud surrogate with a cross-layer decoder; exact flow data, "
                "chunked queries, shape gradients.",
        paper=icml.Paper(title="SMART: mesh-free neural surrogate over point-cloud geometry",
                         url="https://icml.cc/virtual/2026/papers.html",
                         authors="see the paper", bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
        default_threads=1,
    )


@icml.hookimpl
def icml_train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    from icml_smart.job import train_job

    return train_job(ctx, config)


@icml.hookimpl
def icml_infer(ctx: icml.RunContext, config: InferConfig) -> icml.RunResult:
    from icml_smart.job import infer_job

    return infer_job(ctx, config)


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_smart.job import evaluate_job

    return evaluate_job(ctx, config)


@icml.hookimpl
def icml_differentiate(ctx: icml.RunContext, config: DifferentiateConfig) -> icml.RunResult:
    from icml_smart.job import differentiate_job

    return differentiate_job(ctx, config)
