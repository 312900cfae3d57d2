"""Hook implementations: thin adapters from the run config to the API. Light at import time."""

from __future__ import annotations

import icml
from icml_sarsteer.config import EvaluateConfig, InferConfig, TrainConfig

CONFIGS = {"evaluate": EvaluateConfig, "infer": InferConfig, "train": TrainConfig}

BIBTEX = """@inproceedings{lin2026sarsteer,
  title     = {{SARSteer}: Safe-Ablated Refusal Steering for Large Audio-Language Models},
  author    = {Lin, Weilin and Li, Jianze and Xiong, Hui and Liu, Li},
  booktitle = {Proceedings of the 43rd International Conference on Machine Learning (ICML)},
  year      = {2026},
  note      = {arXiv:2510.17633}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="sarsteer",
        title="SARSteer: safe-ablated refusal steering for audio-language models",
        summary="Text-derived refusal steering with safe-space ablation for audio-LMs and any "
                "transformers decoder; baselines.",
        paper=icml.Paper(title="SARSteer: Safe-Ablated Refusal Steering for Large "
                               "Audio-Language Models",
                         url="https://arxiv.org/abs/2510.17633",
                         authors="Lin, Li, Xiong, Liu", bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
        default_threads=1,
    )


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_sarsteer.job import evaluate_job

    return evaluate_job(ctx, config)


@icml.hookimpl
def icml_infer(ctx: icml.RunContext, config: InferConfig) -> icml.RunResult:
    from icml_sarsteer.job import infer_job

    return infer_job(ctx, config)


@icml.hookimpl
def icml_train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    from icml_sarsteer.job import train_job

    return train_job(ctx, config)
