"""Hook implementations: thin adapters from the run config to the API. Light at import time."""

from __future__ import annotations

import icml
from icml_het_cpflora.config import EvaluateConfig, InferConfig, TrainConfig

CONFIGS = {"train": TrainConfig, "infer": InferConfig, "evaluate": EvaluateConfig}

BIBTEX = """@inproceedings{hetcpflora2026,
  title     = {Het-CPFLoRA: Heterogeneous Customizable Personalized Federated LoRA Fine Tuning},
  booktitle = {Proceedings of the 43rd International Conference on Machine Learning (ICML)},
  year      = {2026},
  note      = {code: https://github.com/tongxin-tx/Het-CPFLoRA}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="het-cpflora",
        title="Het-CPFLoRA",
        summary="Personalized federated LoRA: per-client shared/personal rank split, SVD "
                "aggregation, OOD-weighted inference.",
        paper=icml.Paper(title="Het-CPFLoRA: Heterogeneous Customizable Personalized "
                               "Federated LoRA Fine Tuning",
                         url="https://github.com/tongxin-tx/Het-CPFLoRA", bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
        default_threads=1,
    )


@icml.hookimpl
def icml_train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    from icml_het_cpflora.job import train_job

    return train_job(ctx, config)


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_het_cpflora.job import train_job

    return train_job(ctx, config)


@icml.hookimpl
def icml_infer(ctx: icml.RunContext, config: InferConfig) -> icml.RunResult:
    from icml_het_cpflora.job import infer_job

    return infer_job(ctx, config)
