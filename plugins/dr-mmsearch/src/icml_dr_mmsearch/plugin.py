"""Metadata and thin hook adapters; the jobs live in ``job.py``. Light module: torch,
transformers, PIL and bm25s are imported inside the jobs."""

from __future__ import annotations

import icml
from icml_dr_mmsearch.config import EvaluateConfig, InferConfig, TrainConfig

CONFIGS = {"train": TrainConfig, "infer": InferConfig, "evaluate": EvaluateConfig}

BIBTEX = """@inproceedings{wang2026drmmsearch,
  title     = {DR-MMSearchAgent: Deepening Reasoning in Multimodal Search Agents},
  author    = {Wang and Yan and Zhou and Chen and Shao and Zhang and Xie},
  booktitle = {International Conference on Machine Learning (ICML)},
  year      = {2026},
  note      = {arXiv:2604.19264}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="dr-mmsearch",
        title="DR-MMSearchAgent: deepening reasoning in multimodal search agents",
        summary="Structural-proximity advantages and Gaussian turn rewards vs MMSearch-R1, "
                "offline search env.",
        paper=icml.Paper(
            title="DR-MMSearchAgent: Deepening Reasoning in Multimodal Search Agents",
            url="https://arxiv.org/abs/2604.19264",
            authors="Wang, Yan, Zhou, Chen, Shao, Zhang, Xie", bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
        default_threads=1,  # the tiny models run fastest on one thread; --threads overrides
    )


@icml.hookimpl
def icml_train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    from icml_dr_mmsearch.job import train

    return train(ctx, config)


@icml.hookimpl
def icml_infer(ctx: icml.RunContext, config: InferConfig) -> icml.RunResult:
    from icml_dr_mmsearch.job import infer

    return infer(ctx, config)


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_dr_mmsearch.job import evaluate

    return evaluate(ctx, config)
