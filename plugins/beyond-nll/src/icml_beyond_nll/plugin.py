"""Hook implementations: thin adapters from the run config to the API. Keep this module light:
heavy libraries (torch, transformers, accelerate) are imported inside the hook bodies."""

from __future__ import annotations

import icml
from icml_beyond_nll.config import DifferentiateConfig, EvaluateConfig, TrainConfig

CONFIGS = {"train": TrainConfig, "evaluate": EvaluateConfig, "differentiate": DifferentiateConfig}

BIBTEX = """@inproceedings{li2026beyond,
  title     = {Beyond Log Likelihood: Probability-Based Objectives for Supervised Fine-Tuning
               across the Model Capability Continuum},
  author    = {Li, Gaotang and Qiu, Ruizhong and Chen, Xiusi and Ji, Heng and Tong, Hanghang},
  booktitle = {International Conference on Machine Learning (ICML)},
  year      = {2026},
  note      = {arXiv:2510.00526}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="beyond-nll",
        title="Beyond Log Likelihood",
        summary="Probability-based SFT objectives (-p, (1-p^a)/a, thresholds) for HF/TRL "
                "trainers, with a prior-strength diagnostic.",
        paper=icml.Paper(
            title="Beyond Log Likelihood: Probability-Based Objectives for Supervised "
                  "Fine-Tuning across the Model Capability Continuum",
            url="https://arxiv.org/abs/2510.00526",
            authors="Gaotang Li, Ruizhong Qiu, Xiusi Chen, Heng Ji, Hanghang Tong",
            bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
        # tiny models: issue 16 measured 16 s with one thread vs 215 s with torch's default
        # next to one other job (identical metrics); --threads N overrides
        default_threads=1,
    )


@icml.hookimpl
def icml_train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    from icml_beyond_nll.job import run_continuum

    return run_continuum(ctx, config)


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_beyond_nll.job import run_diagnostic

    return run_diagnostic(ctx, config)


@icml.hookimpl
def icml_differentiate(ctx: icml.RunContext, config: DifferentiateConfig) -> icml.RunResult:
    from icml_beyond_nll.job import run_gradients

    return run_gradients(ctx, config)
