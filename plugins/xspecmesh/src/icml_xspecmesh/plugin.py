"""Hook implementations: thin adapters from the run config to the API. Light at import time."""

from __future__ import annotations

import icml
from icml_xspecmesh.config import EvaluateConfig, InferConfig, TrainConfig

CONFIGS = {"infer": InferConfig, "train": TrainConfig, "evaluate": EvaluateConfig}

BIBTEX = """@inproceedings{xspecmesh2026,
  title     = {XSpecMesh: Quality-Preserving Auto-Regressive Mesh Generation Acceleration via
               Multi-Head Speculative Decoding},
  booktitle = {Proceedings of the 43rd International Conference on Machine Learning (ICML)},
  year      = {2026},
  note      = {arXiv:2507.23777}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="xspecmesh",
        title="XSpecMesh",
        summary="Speculative decoding for AR mesh generation: distilled draft heads, "
                "one-call verification, three acceptance rules.",
        paper=icml.Paper(title="XSpecMesh: Quality-Preserving Auto-Regressive Mesh Generation "
                               "Acceleration via Multi-Head Speculative Decoding",
                         url="https://arxiv.org/abs/2507.23777", authors="Xiamen University",
                         bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
        default_threads=1,  # the tiny models run fastest on one thread; --threads overrides
    )


@icml.hookimpl
def icml_infer(ctx: icml.RunContext, config: InferConfig) -> icml.RunResult:
    from icml_xspecmesh.job import infer_job

    return infer_job(ctx, config)


@icml.hookimpl
def icml_train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    from icml_xspecmesh.job import train_job

    return train_job(ctx, config)


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_xspecmesh.job import evaluate_job

    return evaluate_job(ctx, config)
