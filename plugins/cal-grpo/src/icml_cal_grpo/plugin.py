"""Hook implementations: thin adapters from the run config to the API. Light module: torch and
transformers are imported inside the hook bodies."""

from __future__ import annotations

import icml
from icml_cal_grpo.config import EvaluateConfig, InferConfig, TrainConfig

CONFIGS = {"train": TrainConfig, "infer": InferConfig, "evaluate": EvaluateConfig}

BIBTEX = """@inproceedings{ildiz2026calgrpo,
  title     = {Learning to Correct: Calibrated Reinforcement Learning for Multi-Attempt
               Chain-of-Thought},
  author    = {Ildiz, Muhammed Emrullah and Gozeten, Halil Alperen and Taga, Ege Onur and
               Oymak, Samet},
  booktitle = {International Conference on Machine Learning (ICML)},
  year      = {2026},
  note      = {arXiv:2604.17912; OpenReview 2hGL0nGPLu}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="cal-grpo",
        title="CAL-GRPO: calibrated attempt-level GRPO for multi-attempt reasoning",
        summary="Unbiased per-attempt advantages for Verification@K RL with verifier feedback.",
        paper=icml.Paper(
            title="Learning to Correct: Calibrated RL for Multi-Attempt Chain-of-Thought "
                  "(CAL-GRPO)",
            url="https://arxiv.org/abs/2604.17912",
            authors="Muhammed Emrullah Ildiz, Halil Alperen Gozeten, Ege Onur Taga, Samet Oymak",
            bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
        default_threads=1,  # the tiny models run fastest on one thread; --threads overrides
    )


@icml.hookimpl
def icml_train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    from icml_cal_grpo.job import train

    return train(ctx, config)


@icml.hookimpl
def icml_infer(ctx: icml.RunContext, config: InferConfig) -> icml.RunResult:
    from icml_cal_grpo.job import infer

    return infer(ctx, config)


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_cal_grpo.job import evaluate

    return evaluate(ctx, config)
