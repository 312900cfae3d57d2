"""TIPEX: two-tier inference-time parallelism for multi-agent LLM systems. The public API;
nothing heavy is imported here (torch and transformers load only with their adapters)."""

from __future__ import annotations

from icml.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "VirtualEventLoop": "clock",
    "SimEventLoop": "clock",
    "Deadlock": "clock",
    "run": "clock",
    "new_loop": "clock",
    "AsyncChatModel": "chat",
    "Completion": "chat",
    "ModelCallError": "chat",
    "SynthGAIA": "synthgaia",
    "Task": "synthgaia",
    "safe_calc": "synthgaia",
    "ScriptedModel": "scripted",
    "SimParams": "scripted",
    "Plan": "plan",
    "Subtask": "plan",
    "PlanError": "plan",
    "parse_plan": "plan",
    "run_dag": "scheduler",
    "TokenBudget": "budget",
    "BudgetExhausted": "budget",
    "normalize_answer": "aggregate",
    "answers_match": "aggregate",
    "plurality": "aggregate",
    "first_finish": "aggregate",
    "majority_vote_accuracy": "aggregate",
    "Candidate": "aggregate",
    "Trace": "trace",
    "gantt": "trace",
    "read_jsonl": "trace",
    "ExecutionConfig": "runner",
    "ExecutionSettings": "config",
    "TipexRunner": "runner",
    "SolveResult": "runner",
    "PathResult": "runner",
    "bare_agent": "bare",
    "FaultyModel": "faults",
    "TransformersChatModel": "hf",
    "OpenAIChatModel": "openai_http",
    "ChatServer": "server",
    "sweep": "sweep",
})
