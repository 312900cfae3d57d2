"""Hook implementations: thin adapters from the run config to the API. Keep this module light:
import heavy libraries (torch, ...) inside the hook bodies."""

from __future__ import annotations

import random

import icml
from icml_het_cpflora.config import EvaluateConfig


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="het-cpflora",
        title="Het Cpflora",
        summary="One line on what the method does.",
        paper=icml.Paper(title="Het Cpflora", url="https://icml.cc/"),
        capabilities=("evaluate",),
        configs={"evaluate": EvaluateConfig},
    )


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_het_cpflora.method import running_mean

    rng = random.Random(ctx.seed)
    draw = rng.random if config.distribution == "uniform" else lambda: rng.gauss(0.5, 1.0)
    samples = [draw() for _ in ctx.progress(range(config.n), desc="sampling")]
    estimate = running_mean(samples)
    return icml.RunResult(
        metrics={"estimate": estimate, "abs_error": abs(estimate - 0.5)},
        tables=[icml.Table("Estimate", ["n", "estimate", "target"], [[config.n, estimate, 0.5]])],
    )
