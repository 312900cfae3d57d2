"""Hook implementations: thin adapters from the run config to the icml_capkv API. Keep this
module light: the jobs (and torch, transformers) load from job.py when a hook runs."""

from __future__ import annotations

import icml
from icml_capkv.config import EvaluateConfig, InferConfig

CONFIGS = {"infer": InferConfig, "evaluate": EvaluateConfig}

BIBTEX = """@article{capkv2026,
  title   = {Rethinking KV Cache Eviction via a Unified Information-Theoretic Objective},
  journal = {arXiv preprint arXiv:2604.25975},
  year    = {2026},
  url     = {https://arxiv.org/abs/2604.25975}
}"""


@icml.hookimpl
def icml_plugin_info() -> icml.PluginInfo:
    return icml.PluginInfo(
        name="capkv",
        title="CapKV: capacity-aware KV cache eviction",
        summary="KV-cache eviction by relevance-weighted leverage scores (log-det capacity), "
                "with baselines, for transformers.",
        paper=icml.Paper(
            title="Rethinking KV Cache Eviction via a Unified Information-Theoretic Objective",
            url="https://arxiv.org/abs/2604.25975", bibtex=BIBTEX),
        capabilities=tuple(CONFIGS),
        configs=CONFIGS,
        # tiny models: issue 16 measured 21 s with one thread vs 218 s with torch's default
        # next to one other job (identical metrics); --threads N overrides
        default_threads=1,
    )


@icml.hookimpl
def icml_infer(ctx: icml.RunContext, config: InferConfig) -> icml.RunResult:
    from icml_capkv.job import infer_job

    return infer_job(ctx, config)


@icml.hookimpl
def icml_evaluate(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    from icml_capkv.job import evaluate_job

    return evaluate_job(ctx, config)
