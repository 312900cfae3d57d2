"""Metadata and thin hook adapters; the jobs live in ``job.py``. Light: torch and the method's
modules are imported inside the jobs."""

from __future__ import annotations

import icml
from icml_modality_pairing.config import DifferentiateConfig, EvaluateConfig, TrainConfig

CONFIGS = {"train": TrainConfig, "evaluate": EvaluateConfig, "differentiate": DifferentiateConfig}

BIBTEX = """@inproceedings{modalitypairing2026,
  title     = {Multimodal Learning as Convolutional Smoothing: Stochastic Modality Pairing for
               Flatter Loss Landscapes},
  booktitle = {International Conference on Machine Learning (ICML)},
  year      = {2026},
  note      = {Reconstructed from the abstract; title and authors to be confirmed}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="modality-pairing",
        title="Multimodal learning as convolutional smoothing; stochastic modality pairing",
        summary="Same-class stochastic modality pairing (dataset, collator) and a torch.func "
                "sharpness suite for any model.",
        paper=icml.Paper(title="Multimodal learning as convolutional smoothing (stochastic "
                               "modality pairing)", url="https://icml.cc/", bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
        default_threads=1,
    )


@icml.hookimpl
def icml_train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    from icml_modality_pairing.job import train

    return train(ctx, config)


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_modality_pairing.job import evaluate

    return evaluate(ctx, config)


@icml.hookimpl
def icml_differentiate(ctx: icml.RunContext, config: DifferentiateConfig) -> icml.RunResult:
    from icml_modality_pairing.job import differentiate

    return differentiate(ctx, config)
