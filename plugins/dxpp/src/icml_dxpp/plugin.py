"""Metadata and thin hook adapters; the jobs live in ``job.py``. Light: numpy, scipy and torch
are imported inside the jobs."""

from __future__ import annotations

import icml
from icml_dxpp.config import DifferentiateConfig, EvaluateConfig

CONFIGS = {"differentiate": DifferentiateConfig, "evaluate": EvaluateConfig}

BIBTEX = """@article{linghu2026dxpp,
  title   = {dXPP: Penalty-Based Differentiation Through Black-Box Quadratic Programming
             Solvers},
  author  = {Linghu and Liu and Deng},
  journal = {arXiv preprint arXiv:2602.14154},
  year    = {2026}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="dxpp",
        title="dXPP: penalty-based differentiation through black-box QP solvers",
        summary="Differentiable QP layer: any qpsolvers backend forward, one SPD n×n penalty "
                "system backward.",
        paper=icml.Paper(title="dXPP: Penalty-Based Differentiation Through Black-Box "
                               "Quadratic Programming Solvers",
                         url="https://arxiv.org/abs/2602.14154",
                         authors="Linghu, Liu, Deng", bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
    )


@icml.hookimpl
def icml_differentiate(ctx: icml.RunContext, config: DifferentiateConfig) -> icml.RunResult:
    from icml_dxpp.job import differentiate

    return differentiate(ctx, config)


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_dxpp.job import evaluate

    return evaluate(ctx, config)
