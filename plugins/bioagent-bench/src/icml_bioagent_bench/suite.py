"""The whole benchmark as a library: generate the tasks, perturb them, run every agent on every
(task, condition), grade, and summarise completion per agent and condition, plus stability."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from icml_bioagent_bench.agents import AgentHarness
from icml_bioagent_bench.harness import RunRecord, run_agent
from icml_bioagent_bench.perturbations import perturb, supports
from icml_bioagent_bench.task import BioTask
from icml_bioagent_bench.tasks import TASK_IDS, make_task
from icml_bioagent_bench.workspace import Limits


def make_suite(root: str | Path, *, tasks: Iterable[str] = TASK_IDS, seed: int = 0,
               conditions: Iterable[str] = ("clean", "corrupt", "decoy", "bloat"),
               bloat_words: int = 1000, task_kwargs: dict[str, dict[str, Any]] | None = None,
               timings: dict[str, float] | None = None) -> dict[tuple[str, str], BioTask]:
    """Generate each task (``root/tasks/<id>``) and its perturbed copies
    (``root/tasks/<id>-<kind>``). Returns ``{(task_id, condition): task}``."""
    root = Path(root) / "tasks"
    out: dict[tuple[str, str], BioTask] = {}
    for tid in tasks:
        t0 = time.perf_counter()
        clean = make_task(tid, root / tid, seed=seed, **(task_kwargs or {}).get(tid, {}))
        for cond in conditions:
            if cond == "clean":
                out[(tid, cond)] = clean
            elif not supports(clean, cond):
                continue  # e.g. no corruption for a task without reads or count tables
            else:
                out[(tid, cond)] = perturb(clean, cond, root, seed=seed, bloat_words=bloat_words)
                out[(tid, cond)].save()
        if timings is not None:
            timings[tid] = time.perf_counter() - t0
    return out


def evaluate_suite(suite: dict[tuple[str, str], BioTask], agents: list[AgentHarness],
                   sandbox_root: str | Path, *, limits: Limits = Limits(),  # noqa: B008
                   judge: Any = None, trials: int = 1,
                   progress: Callable[[Iterable], Iterable] = lambda x: x) -> list[RunRecord]:
    """Every agent on every task instance, ``trials`` times each (fresh workspace per run)."""
    jobs = [(key, a, t) for key in suite for a in agents for t in range(trials)]
    records = []
    for (tid, cond), agent, trial in progress(jobs):
        rid = f"{tid}-{cond}-{agent.name}-t{trial}"
        records.append(run_agent(suite[(tid, cond)], agent, sandbox_root, run_id=rid,
                                 limits=limits, judge=judge))
    return records


def _mean(v: list[float]) -> float:
    v = [x for x in v if not np.isnan(x)]
    return float(np.mean(v)) if v else float("nan")


def completion_table(records: list[RunRecord]) -> tuple[list[str], list[list[Any]]]:
    """Rows per (agent, condition): mean completion rate (%), mean adjusted completion (%),
    results_match rate (%), success rate (%) (condition's criterion), flagged, decoy used."""
    cols = ["agent", "condition", "runs", "completion %", "adjusted completion %",
            "results_match %", "success %", "flagged", "decoy used"]
    rows = []
    keys = sorted({(r.agent, r.condition) for r in records},
                  key=lambda k: (k[0], ["clean", "corrupt", "decoy", "bloat"].index(k[1])
                                 if k[1] in ("clean", "corrupt", "decoy", "bloat") else 9))
    for agent, cond in keys:
        rs = [r for r in records if r.agent == agent and r.condition == cond]
        rows.append([agent, cond, len(rs), 100 * _mean([r.completion_rate for r in rs]),
                     100 * _mean([r.adjusted_completion_rate for r in rs]),
                     100 * _mean([float(r.results_match) for r in rs]),
                     100 * _mean([float(r.success) for r in rs]),
                     sum(r.flagged for r in rs), sum(r.decoy_used for r in rs)])
    return cols, rows


def task_table(records: list[RunRecord]) -> tuple[list[str], list[list[Any]]]:
    """One row per run: task, condition, agent, status, rule, completion, success, metric."""
    cols = ["task", "condition", "agent", "status", "results_match", "steps",
            "completion %", "success", "key metric"]
    rows = []
    for r in records:
        a = r.assessment
        m = r.metrics
        key = next((f"{k}={m[k]:.3g}" for k in ("f1_score", "exact_count_fraction", "overlap",
                                                "matching_otu_phylum") if k in m), "")
        rows.append([r.task_id, r.condition, r.agent, r.status, r.results_match,
                     f"{a['steps_completed']}/{a['steps_to_completion']}",
                     100 * r.completion_rate, r.success, key])
    return cols, rows


def bloat_delta(records: list[RunRecord]) -> dict[str, float]:
    """Per agent: mean completion under bloat minus clean, in percentage points (the paper's
    prompt-bloat metric)."""
    out = {}
    for agent in sorted({r.agent for r in records}):
        c = [r.completion_rate for r in records if r.agent == agent and r.condition == "clean"]
        b = [r.completion_rate for r in records if r.agent == agent and r.condition == "bloat"]
        if c and b:
            out[agent] = 100 * (_mean(b) - _mean(c))
    return out
