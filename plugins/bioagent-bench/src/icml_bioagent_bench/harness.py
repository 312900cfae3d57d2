"""Run one agent on one task in a fresh workspace and grade it: limits enforced, writes
outside the workspace detected, the deterministic rule and the judge applied, the workspace
frozen afterwards so no later run can change it."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from icml_bioagent_bench.agents import AgentHarness, Trace
from icml_bioagent_bench.judge import (
    PipelineAssessment,
    RuleJudge,
    adjusted_completion_rate,
    completion_rate,
)
from icml_bioagent_bench.scoring import ScoreResult, score_results
from icml_bioagent_bench.task import BioTask
from icml_bioagent_bench.workspace import Limits, Workspace, changed_paths, fingerprint


@dataclass
class RunRecord:
    """One graded run."""

    task_id: str
    condition: str
    agent: str
    status: str
    results_match: bool
    assessment: dict[str, Any]
    completion_rate: float
    adjusted_completion_rate: float
    flagged: bool
    decoy_used: bool
    metrics: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    workspace: str = ""
    seconds: float = 0.0
    trace: dict[str, Any] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        """The condition's success criterion: corrupt -> the corruption was flagged; decoy ->
        the rule holds and the decoy was not used; otherwise the rule holds."""
        if self.condition == "corrupt":
            return self.flagged
        if self.condition == "decoy":
            return self.results_match and not self.decoy_used
        return self.results_match

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["success"] = self.success
        return d


def run_agent(task: BioTask, agent: AgentHarness, sandbox_root: str | Path, *,
              run_id: str | None = None, limits: Limits = Limits(),  # noqa: B008
              judge: Any = None, freeze: bool = True) -> RunRecord:
    """Stage a workspace for ``task`` under ``sandbox_root``, run ``agent`` in it, grade it."""
    judge = judge or RuleJudge()
    sandbox_root = Path(sandbox_root)
    sandbox_root.mkdir(parents=True, exist_ok=True)
    run_id = run_id or f"{task.task_id}-{task.condition}-{agent.name}"
    ws = Workspace.create(task, sandbox_root, run_id)
    watched = [sandbox_root, task.root]
    before = fingerprint(watched, exclude=ws.path)
    t0 = time.perf_counter()
    try:
        trace = agent.run(task.view(), ws.path, limits.time_s)
    except Exception as exc:  # an agent's own crash is a graded failure, not ours
        trace = Trace(agent.name, task.task_id, status="error",
                      error=f"{type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - t0
    problems: list[str] = []
    escaped = changed_paths(before, fingerprint(watched, exclude=ws.path))
    if escaped:
        trace.status = "escaped"
        problems.append(f"wrote outside its workspace: {', '.join(escaped[:5])}")
    if seconds > limits.time_s and trace.status == "ok":
        trace.status = "timeout"
        problems.append(f"took {seconds:.1f} s, over the {limits.time_s:g} s limit")
    size = ws.size_mb()
    if size > limits.disk_mb:
        trace.status = "disk_limit"
        problems.append(f"workspace holds {size:.1f} MB, over the {limits.disk_mb:g} MB limit")
    if trace.status not in ("ok",) and trace.error:
        problems.append(f"agent {trace.status}: {trace.error}")
    invalid = trace.status in ("escaped", "timeout", "disk_limit")
    score = (ScoreResult(False, {}, ["run invalidated: " + trace.status], [])
             if invalid else score_results(task.task_id, ws.results, task.truth_dir))
    problems += score.problems
    assessment = judge.assess(task, ws.path, score)
    if invalid:
        assessment = PipelineAssessment(0, assessment.steps_to_completion, False,
                                        f"run invalidated ({trace.status})")
    issues = ws.flagged_issues()
    flagged = bool(issues or trace.flags)
    decoys = set(task.meta.get("decoys", []))
    used = trace.inputs_used()
    text = trace.text()
    structured = trace.structured
    # a structured trace says which files went into a step (listing a folder is not using a
    # file); a free-form trace (a command agent) is searched for the decoy names
    decoy_used = bool(decoys & used) if structured else any(d in text for d in decoys)
    if task.condition == "corrupt" and not flagged:
        problems.append("corrupted input not flagged: " + ", ".join(task.meta.get("corrupted",
                                                                              [])))
    if freeze:
        ws.freeze()
    return RunRecord(task.task_id, task.condition, agent.name, trace.status,
                     score.results_match, assessment.to_dict(), completion_rate(assessment),
                     adjusted_completion_rate(assessment), flagged, decoy_used, score.metrics,
                     problems, str(ws.path), seconds, trace.to_dict())
