"""The tool set every tool-calling agent gets (the transformers agent's JSON actions and the
OpenAI-compatible agent's function calls run the same code): list a workspace folder, inspect a
file, run a step of the task's reference pipeline, flag an unusable input, finish; optionally a
shell command inside the workspace (what the official CLI harnesses give their agents)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from icml_bioagent_bench.agents import Trace
from icml_bioagent_bench.pipelines import ROLES, STEPS, PipelineError, TaskPipeline
from icml_bioagent_bench.workspace import ISSUES_FILE

TOOL_NAMES = ("list_files", "inspect_file", "run_step", "flag_input", "finish")


def tool_specs(task_id: str, *, shell: bool = False) -> list[dict[str, Any]]:
    """The tools as OpenAI ``tools`` entries (JSON-schema parameters) for ``task_id``: the
    step names and input roles are enums, so a server with constrained decoding can only
    produce valid calls."""
    def fn(name: str, desc: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {"type": "function", "function": {
            "name": name, "description": desc,
            "parameters": {"type": "object", "properties": props, "required": required,
                           "additionalProperties": False}}}

    roles = {r: {"type": "string", "description": f"workspace path of the {r} input"}
             for r in ROLES[task_id]}
    out = [
        fn("list_files", "List a workspace folder.",
           {"dir": {"type": "string", "enum": ["data", "reference", "outputs", "results"]}},
           ["dir"]),
        fn("inspect_file", "Show the first lines of a file (a quality summary for FASTQ).",
           {"path": {"type": "string", "description": "e.g. data/<file>"}}, ["path"]),
        fn("run_step", "Run one step of the analysis pipeline, in order: "
           + ", ".join(STEPS[task_id]) + ". Pass the input files (workspace paths) by role.",
           {"step": {"type": "string", "enum": list(STEPS[task_id])},
            "inputs": {"type": "object", "properties": roles, "additionalProperties": False}},
           ["step"]),
        fn("flag_input", "Report an unusable input (corrupted, empty, inconsistent) and stop.",
           {"reason": {"type": "string"}}, ["reason"]),
        fn("finish", "Stop: the deliverable is in results/.", {}, []),
    ]
    if shell:
        out.append(fn("run_command", "Run a shell command in the workspace (cwd is the "
                      "workspace root).", {"command": {"type": "string"}}, ["command"]))
    return out


def execute(tool: str, args: Any, ws: Path, pipe: TaskPipeline, trace: Trace, *,
            shell: bool = False, shell_timeout_s: float = 300.0) -> tuple[str, list[str]]:
    """Run one tool call in workspace ``ws``; ``(observation, input files used)``. Raises
    :class:`PipelineError` for a call that cannot run (unknown tool, bad arguments)."""
    from icml_bioagent_bench import qc

    if not isinstance(args, dict):
        raise PipelineError("args must be an object")
    root = ws.resolve()
    if tool == "list_files":
        d = (ws / str(args.get("dir", "data"))).resolve()
        if not d.is_relative_to(root) or not d.is_dir():
            raise PipelineError(f"no folder {args.get('dir')!r} in the workspace")
        return ", ".join(sorted(p.name for p in d.iterdir())) or "(empty)", []
    if tool == "inspect_file":
        p = (ws / str(args.get("path", ""))).resolve()
        if not p.is_relative_to(root) or not p.is_file():
            raise PipelineError(f"no file {args.get('path')!r} in the workspace")
        # inspecting a file is not using it as an input
        if p.name.endswith((".fq.gz", ".fastq.gz", ".fq", ".fastq")):
            return json.dumps(qc.fastq_summary(p, n=200)), []
        return (p.read_text(errors="replace")[:300] if p.suffix != ".gz" else "(binary)"), []
    if tool == "run_step":
        inputs = args.get("inputs") or {}
        if not isinstance(inputs, dict):
            raise PipelineError("inputs must be an object of role -> path")
        msg = pipe.run_step(str(args.get("step", "")), {str(k): str(v)
                                                        for k, v in inputs.items()})
        return msg, sorted(v for k, v in pipe.inputs.items() if k != "sample")
    if tool == "flag_input":
        reason = str(args.get("reason", "input flagged"))[:500]
        trace.flags.append(reason)
        (ws / "results" / ISSUES_FILE).write_text(reason + "\n")
        return "flag recorded", []
    if tool == "run_command" and shell:
        cmd = str(args.get("command", ""))
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(ws),
               "TMPDIR": str(ws / "outputs"), "OMP_NUM_THREADS": "1"}
        try:
            out = subprocess.run(["bash", "-c", cmd], cwd=ws, env=env, capture_output=True,
                                 text=True, timeout=shell_timeout_s)
        except subprocess.TimeoutExpired:
            return f"killed after {shell_timeout_s:g} s", []
        return f"exit {out.returncode}\n{(out.stdout + out.stderr)[-2000:]}", []
    raise PipelineError(f"unknown tool {tool!r}")
