"""TIPEX: two-tier inference-time parallelism for multi-agent LLM systems. The public API;
nothing heavy is imported here (torch and transformers load only with their adapters)."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "VirtualEventLoop": "icml_tipex.clock",
    "SimEventLoop": "icml_tipex.clock",
    "Deadlock": "icml_tipex.clock",
    "run": "icml_tipex.clock",
    "new_loop": "icml_tipex.clock",
    "AsyncChatModel": "icml_tipex.chat",
    "Completion": "icml_tipex.chat",
    "ModelCallError": "icml_tipex.chat",
    "SynthGAIA": "icml_tipex.synthgaia",
    "Task": "icml_tipex.synthgaia",
    "safe_calc": "icml_tipex.synthgaia",
    "ScriptedModel": "icml_tipex.scripted",
    "SimParams": "icml_tipex.scripted",
    "Plan": "icml_tipex.plan",
    "Subtask": "icml_tipex.plan",
    "PlanError": "icml_tipex.plan",
    "parse_plan": "icml_tipex.plan",
    "run_dag": "icml_tipex.scheduler",
    "TokenBudget": "icml_tipex.budget",
    "BudgetExhausted": "icml_tipex.budget",
    "normalize_answer": "icml_tipex.aggregate",
    "answers_match": "icml_tipex.aggregate",
    "plurality": "icml_tipex.aggregate",
    "first_finish": "icml_tipex.aggregate",
    "majority_vote_accuracy": "icml_tipex.aggregate",
    "Candidate": "icml_tipex.aggregate",
    "Trace": "icml_tipex.trace",
    "gantt": "icml_tipex.trace",
    "read_jsonl": "icml_tipex.trace",
    "ExecutionConfig": "icml_tipex.runner",
    "TipexRunner": "icml_tipex.runner",
    "SolveResult": "icml_tipex.runner",
    "PathResult": "icml_tipex.runner",
    "bare_agent": "icml_tipex.bare",
    "FaultyModel": "icml_tipex.faults",
    "TransformersChatModel": "icml_tipex.hf",
    "OpenAIChatModel": "icml_tipex.openai_http",
    "ChatServer": "icml_tipex.server",
    "sweep": "icml_tipex.sweep",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'icml_tipex' has no attribute {name!r}")
