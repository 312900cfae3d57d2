"""BioAgent Bench as a library: small real bioinformatics tasks generated offline, a sandboxed
workspace per run, agents behind one protocol, the official grading rules, pipeline judge,
completion metrics, perturbations and stability. Nothing heavy is imported here."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BioTask": "icml_bioagent_bench.task",
    "TaskView": "icml_bioagent_bench.task",
    "SYSTEM_PROMPT": "icml_bioagent_bench.task",
    "make_task": "icml_bioagent_bench.tasks",
    "TASK_IDS": "icml_bioagent_bench.tasks",
    "make_variant_task": "icml_bioagent_bench.tasks.variants",
    "make_transcript_quant_task": "icml_bioagent_bench.tasks.transcript_quant",
    "make_deseq_task": "icml_bioagent_bench.tasks.deseq",
    "make_metagenomics_task": "icml_bioagent_bench.tasks.metagenomics",
    "perturb": "icml_bioagent_bench.perturb",
    "Workspace": "icml_bioagent_bench.workspace",
    "Limits": "icml_bioagent_bench.workspace",
    "AgentHarness": "icml_bioagent_bench.agents",
    "ScriptedAgent": "icml_bioagent_bench.agents",
    "CommandAgent": "icml_bioagent_bench.agents",
    "Trace": "icml_bioagent_bench.agents",
    "make_agent": "icml_bioagent_bench.agents",
    "TransformersToolAgent": "icml_bioagent_bench.llm_agent",
    "TaskPipeline": "icml_bioagent_bench.pipelines",
    "score_results": "icml_bioagent_bench.scoring",
    "ScoreResult": "icml_bioagent_bench.scoring",
    "PipelineAssessment": "icml_bioagent_bench.judge",
    "RuleJudge": "icml_bioagent_bench.judge",
    "LLMJudge": "icml_bioagent_bench.judge",
    "completion_rate": "icml_bioagent_bench.judge",
    "adjusted_completion_rate": "icml_bioagent_bench.judge",
    "run_agent": "icml_bioagent_bench.harness",
    "RunRecord": "icml_bioagent_bench.harness",
    "make_suite": "icml_bioagent_bench.suite",
    "evaluate_suite": "icml_bioagent_bench.suite",
    "completion_table": "icml_bioagent_bench.suite",
    "stability": "icml_bioagent_bench.stability",
    "jaccard": "icml_bioagent_bench.stability",
    "pearson": "icml_bioagent_bench.stability",
    "available_tools": "icml_bioagent_bench.tools",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name == "available_tools":
        from icml_bioagent_bench.tools import available

        return available
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'icml_bioagent_bench' has no attribute {name!r}")
