"""Metadata and thin hook adapters; the jobs live in ``job.py``. Light: torch and the method
modules are imported inside the jobs."""

from __future__ import annotations

import icml
from icml_sng.config import EvaluateConfig, TrainConfig

CONFIGS = {"train": TrainConfig, "evaluate": EvaluateConfig}

BIBTEX = """@article{goldshlager2025sng,
  title   = {Subsampled Natural Gradient as Sketch-and-Project},
  author  = {Goldshlager, Gil and Hu, Jiang and Lin, Lin},
  journal = {arXiv preprint arXiv:2508.21022},
  year    = {2025}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="sng",
        title="Subsampled natural gradient and SPRING as sketch-and-project",
        summary="SNG and SPRING torch optimizers for least-squares losses (PINNs), with "
                "squared-volume-sampling theory tools.",
        paper=icml.Paper(title="Subsampled Natural Gradient as Sketch-and-Project "
                               "(v1: Fast convergence rates for subsampled natural gradient "
                               "algorithms on quadratic model problems)",
                         url="https://arxiv.org/abs/2508.21022",
                         authors="Gil Goldshlager, Jiang Hu, Lin Lin", bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
        default_threads=1,  # problems this small run fastest on one thread; --threads overrides
    )


@icml.hookimpl
def icml_train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    from icml_sng.job import train

    return train(ctx, config)


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_sng.job import evaluate

    return evaluate(ctx, config)
