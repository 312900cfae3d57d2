"""BioAgent Bench as a library: small real bioinformatics tasks generated offline, a sandboxed
workspace per run, agents behind one protocol, the official grading rules, pipeline judge,
completion metrics, perturbations and stability. Nothing heavy is imported here."""

from __future__ import annotations

from icml.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "BioTask": "task",
    "TaskView": "task",
    "SYSTEM_PROMPT": "task",
    "make_task": "tasks",
    "TASK_IDS": "tasks",
    "make_variant_task": "tasks.variants",
    "make_transcript_quant_task": "tasks.transcript_quant",
    "make_deseq_task": "tasks.deseq",
    "make_metagenomics_task": "tasks.metagenomics",
    "perturb": "perturbations",
    "Workspace": "workspace",
    "Limits": "config",
    "AgentHarness": "agents",
    "ScriptedAgent": "agents",
    "CommandAgent": "agents",
    "Trace": "agents",
    "make_agent": "factory",
    "TransformersToolAgent": "llm_agent",
    "OpenAIToolAgent": "openai_agent",
    "OpenAIConfig": "config",
    "LLMConfig": "config",
    "TaskPipeline": "pipelines",
    "score_results": "scoring",
    "ScoreResult": "scoring",
    "PipelineAssessment": "judge",
    "RuleJudge": "judge",
    "LLMJudge": "judge",
    "completion_rate": "judge",
    "adjusted_completion_rate": "judge",
    "run_agent": "harness",
    "RunRecord": "harness",
    "make_suite": "suite",
    "evaluate_suite": "suite",
    "completion_table": "suite",
    "stability": "robustness",
    "jaccard": "robustness",
    "pearson": "robustness",
    "available_tools": "tools:available",
})
