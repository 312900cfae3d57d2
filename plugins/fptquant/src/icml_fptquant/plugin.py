"""Hook implementations: thin adapters from the run config to the API (light module: heavy
imports happen inside the hooks)."""

from __future__ import annotations

import icml
from icml_fptquant.config import EvaluateConfig, QuantizeConfig, TrainConfig

CONFIGS = {"quantize": QuantizeConfig, "train": TrainConfig, "evaluate": EvaluateConfig}

BIBTEX = """@article{vanbreugel2025fptquant,
  title   = {FPTQuant: Function-Preserving Transforms for LLM Quantization},
  author  = {van Breugel, Boris and Bondarenko, Yelysei and Whatmough, Paul and Nagel, Markus},
  journal = {arXiv preprint arXiv:2506.04985},
  year    = {2025}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="fptquant",
        title="FPTQuant: Function-Preserving Transforms for LLM Quantization",
        summary="Mergeable pre-RoPE, value, MLP and residual transforms for static W4A4KV4 LLMs",
        paper=icml.Paper(title="FPTQuant: Function-Preserving Transforms for LLM Quantization",
                         url="https://arxiv.org/abs/2506.04985",
                         authors="B. van Breugel, Y. Bondarenko, P. Whatmough, M. Nagel",
                         venue="arXiv 2025", bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),  # quantize first: the primary capability
        configs=CONFIGS,
        default_threads=1,  # the tiny models run fastest on one thread; --threads overrides
    )


@icml.hookimpl
def icml_quantize(ctx: icml.RunContext, config: QuantizeConfig) -> icml.RunResult:
    from icml_fptquant.job import quantize_job

    return quantize_job(ctx, config)


@icml.hookimpl
def icml_train(ctx: icml.RunContext, config: TrainConfig) -> icml.RunResult:
    from icml_fptquant.job import train_job

    return train_job(ctx, config)


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_fptquant.job import evaluate_job

    return evaluate_job(ctx, config)
