"""Agents by name: the one place that knows every agent class. It imports ``agents`` and
(lazily) ``llm_agent``; neither imports it, so the modules form no cycle."""

from __future__ import annotations

import shlex
from typing import Any

from icml_bioagent_bench.agents import POLICIES, AgentHarness, CommandAgent, ScriptedAgent

__all__ = ["make_agent"]


def make_agent(name: str, **kw: Any) -> AgentHarness:
    """``correct``/``naive``/``robust`` (scripted), ``llm`` (transformers tool agent:
    ``config=LLMConfig(...)`` and its device, dtype, backend), ``cli:<command line>``
    (command agent), ``openai`` (``config=OpenAIConfig(...)``, an OpenAI-compatible
    endpoint)."""
    if name in POLICIES:
        return ScriptedAgent(name, backend=kw.get("backend", "auto"))
    if name == "llm":
        from icml_bioagent_bench.config import LLMConfig
        from icml_bioagent_bench.llm_agent import TransformersToolAgent

        kw.setdefault("config", LLMConfig())
        # as before: the tool agent runs with its default backend
        return TransformersToolAgent(**{k: v for k, v in kw.items() if k != "backend"})
    if name == "openai":
        from icml_bioagent_bench.config import OpenAIConfig
        from icml_bioagent_bench.openai_agent import OpenAIToolAgent

        return OpenAIToolAgent(kw.get("config") or OpenAIConfig(),
                               backend=kw.get("backend", "auto"))
    if name.startswith("cli:"):
        return CommandAgent(shlex.split(name[4:]), name="cli")
    raise ValueError(f"unknown agent {name!r}: use correct, naive, robust, llm, openai or "
                     "cli:<command line>")
