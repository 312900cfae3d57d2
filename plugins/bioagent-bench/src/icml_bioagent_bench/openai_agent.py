"""An agent behind any OpenAI-compatible chat-completions endpoint with tool calling (OpenAI,
vLLM, llama.cpp's server, SGLang, Ollama, OpenRouter, ...): the official system prompt, the
task prompt, the tool set of :mod:`.actions` as ``tools``; each assistant turn's
``tool_calls`` run in the workspace and their results go back as ``tool`` messages, until the
model answers without a tool call, calls ``finish``, or the turn or time limit is reached.
Standard library only (``urllib``); the API key is read from the environment variable the
config names, never stored."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from icml_bioagent_bench.agents import AgentTimeout, Trace, TraceStep
from icml_bioagent_bench.config import OpenAIConfig
from icml_bioagent_bench.pipelines import PipelineError, TaskPipeline
from icml_bioagent_bench.task import FLAG_SENTENCE, OFFICIAL_SYSTEM_PROMPT, TaskView


class EndpointError(RuntimeError):
    """The endpoint answered with an error or something that is not a chat completion."""


def chat_completion(config: OpenAIConfig, messages: list[dict[str, Any]],
                    tools: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
    """One ``POST {base_url}/chat/completions``; the first choice's message."""
    body = {"model": config.model, "messages": messages, "tools": tools,
            "tool_choice": "auto", "temperature": config.temperature,
            "max_tokens": config.max_tokens}
    headers = {"Content-Type": "application/json"}
    key = os.environ.get(config.api_key_env, "") if config.api_key_env else ""
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(config.base_url.rstrip("/") + "/chat/completions",
                                 data=json.dumps(body).encode(), headers=headers,
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            data = json.loads(resp.read().decode())
    except urllib.error.HTTPError as exc:
        raise EndpointError(f"HTTP {exc.code}: {exc.read()[:300].decode(errors='replace')}"
                            ) from None
    except json.JSONDecodeError as exc:
        raise EndpointError(f"the answer is not JSON ({exc})") from None
    try:
        return data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        raise EndpointError(f"not a chat completion: {str(data)[:300]}") from None


class OpenAIToolAgent:
    """The tool-calling agent over an OpenAI-compatible endpoint, configured by
    :class:`~icml_bioagent_bench.config.OpenAIConfig` (the ``openai.*`` keys). ``backend``
    picks the pipeline tools, as for the scripted agents."""

    def __init__(self, config: OpenAIConfig, *, backend: str = "auto") -> None:
        if not config.model:
            raise ValueError("openai.model: name the served model (e.g. --set "
                             "openai.model=Qwen/Qwen2.5-7B-Instruct)")
        self.config, self.backend = config, backend
        self.name = "openai"

    def messages(self, task: TaskView) -> list[dict[str, Any]]:
        """The opening messages: the official system prompt (plus how to flag an input) and
        the task prompt as the official taskset builds it, with the file lists."""
        user = (f"{task.prompt}\n\nFiles in data/: {', '.join(task.input_files)}\n"
                f"Files in reference/: {', '.join(task.reference_files) or '(none)'}")
        return [{"role": "system", "content": f"{OFFICIAL_SYSTEM_PROMPT}\n{FLAG_SENTENCE}"},
                {"role": "user", "content": user}]

    def run(self, task: TaskView, workdir: Path, timeout_s: float) -> Trace:
        from icml_bioagent_bench.actions import execute, tool_specs

        t0 = time.perf_counter()
        ws = Path(workdir)
        trace = Trace(self.name, task.task_id, structured=True)
        pipe = TaskPipeline(task.task_id, ws, backend=self.backend)
        tools = tool_specs(task.task_id, shell=self.config.shell)
        msgs = self.messages(task)
        done = False
        try:
            for turn in range(self.config.max_turns):
                left = timeout_s - (time.perf_counter() - t0)
                if left <= 0:
                    raise AgentTimeout(f"time limit {timeout_s:g} s reached")
                try:
                    msg = chat_completion(self.config, msgs, tools,
                                          min(left, self.config.request_timeout_s))
                except (urllib.error.URLError, OSError) as exc:
                    if turn == 0:  # the endpoint is not there: a setup failure
                        trace.status = "not_started"
                        trace.error = f"cannot reach {self.config.base_url}: {exc}"
                    else:
                        trace.status, trace.error = "error", f"endpoint: {exc}"
                    break
                except EndpointError as exc:
                    trace.status, trace.error = "error", f"endpoint: {exc}"
                    break
                calls = msg.get("tool_calls") or []
                msgs.append({"role": "assistant", "content": msg.get("content") or "",
                             **({"tool_calls": calls} if calls else {})})
                if not calls:  # a final answer without a tool call ends the run
                    trace.steps.append(TraceStep("answer", 0, str(msg.get("content"))[:500],
                                                 [], time.perf_counter() - t0))
                    break
                for call in calls:
                    fn = call.get("function") or {}
                    name = str(fn.get("name", ""))
                    try:
                        args = json.loads(fn.get("arguments") or "{}")
                        if name == "finish":
                            obs, files, rc, done = "finished", [], 0, True
                        else:
                            obs, files = execute(name, args, ws, pipe, trace,
                                                 shell=self.config.shell,
                                                 shell_timeout_s=max(1.0, left))
                            rc = 0
                    except (ValueError, PipelineError, OSError) as exc:
                        obs, files, rc = f"error: {exc}", [], 1
                    action = json.dumps({"tool": name, "args": fn.get("arguments", "")})
                    trace.steps.append(TraceStep(action[:300], rc, obs[:500], files,
                                                 time.perf_counter() - t0))
                    msgs.append({"role": "tool", "tool_call_id": str(call.get("id", "")),
                                 "content": obs[:4000]})
                if done:
                    break
        except AgentTimeout as exc:
            trace.status, trace.error = "timeout", str(exc)
        trace.seconds = time.perf_counter() - t0
        return trace
