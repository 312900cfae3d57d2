"""Hook implementations: thin adapters from the run config to the API. Light at import time."""

from __future__ import annotations

import icml
from icml_expo_gs.config import DifferentiateConfig, EvaluateConfig, InferConfig, TrainConfig

CONFIGS = {"train": TrainConfig, "infer": InferConfig, "evaluate": EvaluateConfig,
           "differentiate": DifferentiateConfig}

BIBTEX = """@inproceedings{expogs2026,
  title     = {Expo-GS: Exposure-Aware HDR Novel-View Synthesis with Gaussians and an SDF},
  booktitle = {Proceedings of the 43rd International Conference on Machine Learning (ICML)},
  year      = {2026}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="expo-gs",
        title="Expo-GS",
        summary="HDR novel-view synthesis: Expo-GS (exposure-aware SDF, SDF-guided density) vs "
                "HDR-GS, pure-PyTorch splatting.",
        paper=icml.Paper(title="Expo-GS: exposure-aware HDR novel-view synthesis with "
                               "Gaussians and an SDF", url="https://icml.cc/Conferences/2026",
                         authors="ICML 2026 (no code or arXiv id found)",
                         bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
        default_threads=1,
    )


@icml.hookimpl
def icml_train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    from icml_expo_gs.job import train_job

    return train_job(ctx, config)


@icml.hookimpl
def icml_infer(ctx: icml.RunContext, config: InferConfig) -> icml.RunResult:
    from icml_expo_gs.job import infer_job

    return infer_job(ctx, config)


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_expo_gs.job import evaluate_job

    return evaluate_job(ctx, config)


@icml.hookimpl
def icml_differentiate(ctx: icml.RunContext, config: DifferentiateConfig) -> icml.RunResult:
    from icml_expo_gs.job import differentiate_job

    return differentiate_job(ctx, config)
