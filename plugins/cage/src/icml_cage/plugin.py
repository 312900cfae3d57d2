"""Metadata and thin hook adapters: `evaluate` runs the dual-probe benchmark, `train` exports
chain-SFT data; the jobs live in ``job.py``."""

from __future__ import annotations

import icml
from icml_cage.config import EvaluateConfig, TrainConfig

CONFIGS = {"evaluate": EvaluateConfig, "train": TrainConfig}

BIBTEX = """@inproceedings{hoang2026cage,
  title={The Abstraction Gap in Vision-Language Causal Reasoning},
  author={Hoang and Hasan},
  booktitle={International Conference on Machine Learning (ICML)},
  year={2026}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="cage",
        title="CAGE: the Causal Abstraction Gap Evaluation for vision-language models",
        summary="Dual-probe causal benchmark (text vs explicit chain) and the Abstraction Gap.",
        paper=icml.Paper(title="The Abstraction Gap in Vision-Language Causal Reasoning",
                         url="https://arxiv.org/abs/2605.28779", authors="Hoang, Hasan",
                         bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
    )


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_cage.job import evaluate_job

    return evaluate_job(ctx, config)


@icml.hookimpl
def icml_train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    from icml_cage.job import train_job

    return train_job(ctx, config)
