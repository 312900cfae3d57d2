"""The default jobs behind the hooks: generate the suite, run the agents on every task and
perturbation, grade, and report the completion table, stability and timings."""

from __future__ import annotations

import time
from typing import Any

import icml
from icml_bioagent_bench.config import EvaluateConfig, InferConfig


def _llm_kwargs(ctx: icml.RunContext, cfg: EvaluateConfig | InferConfig) -> dict[str, Any]:
    return {"config": cfg.llm, "device": ctx.torch_device(), "dtype": ctx.torch_dtype(),
            "backend": cfg.backend}


def _agents(ctx: icml.RunContext, cfg: EvaluateConfig | InferConfig, names: list[str]) -> list[Any]:
    from icml_bioagent_bench.factory import make_agent

    out = []
    for n in names:
        kw = (_llm_kwargs(ctx, cfg) if n == "llm" else
              {"config": cfg.openai, "backend": cfg.backend} if n == "openai" else
              {"backend": cfg.backend})
        try:
            out.append(make_agent(n, **kw))
        except ValueError as exc:
            raise icml.ConfigError(str(exc)) from None
    return out


def _judge(ctx: icml.RunContext, cfg: EvaluateConfig | InferConfig) -> Any:
    from icml_bioagent_bench.judge import LLMJudge, RuleJudge, transformers_generator

    if cfg.judge == "rule":
        return RuleJudge()
    from icml_bioagent_bench.llm_agent import load_llm

    try:
        model, tok = load_llm(cfg.llm.model_name, device=ctx.torch_device(),
                              dtype=ctx.torch_dtype())
    except ValueError as exc:
        raise icml.ConfigError(f"judge=llm: {exc}") from None
    prefix = '{"steps_completed": ' if cfg.llm.json_prefix else ""
    return LLMJudge(transformers_generator(model, tok, prefix=prefix))


def _check_tools(cfg: EvaluateConfig | InferConfig) -> None:
    from icml_bioagent_bench.tools import TASK_STAGES, ToolMissingError, resolve

    tasks = cfg.tasks if isinstance(cfg, EvaluateConfig) else [cfg.task]
    stages = dict.fromkeys(s for t in tasks for s in TASK_STAGES[t])
    try:
        for stage in stages:
            if cfg.backend in ("auto", "builtin", "pypi") or stage != "de":
                resolve(stage, cfg.backend)
    except ToolMissingError as exc:
        raise icml.ConfigError(f"backend={cfg.backend}: {exc}") from None


def _count_calls(ctx: icml.RunContext, records: list[Any]) -> None:
    """One call per agent run: a run whose agent could not even start (a ``cli:`` command that
    does not exist) is a failed call, so a job where no agent started is a failed run, not a
    measured score of zero."""
    for r in records:
        if r.status == "not_started":
            ctx.call_failed(f"agent {r.agent}: {r.trace.get('error', 'not started')}")
        else:
            ctx.call_ok()


def _task_kwargs(cfg: EvaluateConfig | InferConfig) -> dict[str, dict[str, Any]]:
    return {"variant-calling": {"genome_len": cfg.genome_len, "coverage": cfg.coverage}}


def evaluate_job(ctx: icml.RunContext, cfg: EvaluateConfig) -> icml.RunResult:
    from icml_bioagent_bench.robustness import stability
    from icml_bioagent_bench.suite import (
        bloat_delta,
        completion_table,
        evaluate_suite,
        make_suite,
        task_table,
    )
    from icml_bioagent_bench.tools import available
    from icml_bioagent_bench.workspace import remove_tree

    _check_tools(cfg)
    agents = _agents(ctx, cfg, cfg.agents)
    judge = _judge(ctx, cfg)
    gen_t: dict[str, float] = {}
    with ctx.step("generating tasks and perturbations"):
        suite = make_suite(ctx.out_dir, tasks=cfg.tasks, seed=ctx.seed,
                           conditions=cfg.conditions, bloat_words=cfg.bloat_words,
                           task_kwargs=_task_kwargs(cfg), timings=gen_t)
    sandbox = ctx.out_dir / "workspaces"
    t0 = time.perf_counter()
    records = evaluate_suite(suite, agents, sandbox, limits=cfg.limits, judge=judge,
                             progress=lambda it: ctx.progress(it, desc="agents x tasks"))
    run_t = time.perf_counter() - t0
    _count_calls(ctx, records)
    # stability: repeated clean runs in fresh workspaces
    stab_rows, stab_metrics = [], {}
    if cfg.trials > 1 and "clean" in cfg.conditions:
        for tid in cfg.tasks:
            for agent in agents:
                dirs = [r.workspace for r in records if r.task_id == tid and
                        r.condition == "clean" and r.agent == agent.name]
                for t in range(1, cfg.trials):
                    from icml_bioagent_bench.harness import run_agent

                    rec = run_agent(suite[(tid, "clean")], agent, sandbox,
                                    run_id=f"{tid}-clean-{agent.name}-t{t}", limits=cfg.limits,
                                    judge=judge)
                    dirs.append(rec.workspace)
                s = stability(tid, [f"{d}/results" for d in dirs])
                stab_rows.append([tid, agent.name, int(s["runs"]), s["jaccard"], s["pearson"]])
                stab_metrics[f"stability_{tid}_{agent.name}_jaccard"] = s["jaccard"]
    for r in records:
        ctx.record_row("Runs", ["task", "condition", "agent", "success"],
                       [r.task_id, r.condition, r.agent, r.success])
    cols, rows = completion_table(records)
    tcols, trows = task_table(records)
    per_task = {}
    for tid in cfg.tasks:
        rs = [r for r in records if r.task_id == tid]
        per_task[tid] = [gen_t.get(tid, 0.0), sum(r.seconds for r in rs), len(rs)]
    timing_rows = [[tid, g, s, n, (g + s)] for tid, (g, s, n) in per_task.items()]
    timing_rows.append(["total", sum(gen_t.values()), run_t, len(records),
                        sum(gen_t.values()) + run_t])
    metrics: dict[str, float] = {}
    for row in rows:
        a, c = row[0], row[1]
        metrics[f"{a}_{c}_completion"] = row[3] / 100
        metrics[f"{a}_{c}_success"] = row[6] / 100
    for a, d in bloat_delta(records).items():
        metrics[f"{a}_bloat_delta_pp"] = d
    metrics.update(stab_metrics)
    metrics["suite_seconds"] = sum(gen_t.values()) + run_t
    tools = available()
    tables = [
        icml.Table("Completion per agent and condition (rule judge; success = rule holds, "
                   "corrupt: flagged, decoy: rule holds and decoy unused)", cols, rows),
        icml.Table("Every run", tcols, trows),
        icml.Table("Time per task (generate = task + perturbations, run+grade = all its runs)",
                   ["task", "generate s", "run+grade s", "runs", "total s"], timing_rows),
    ]
    if stab_rows:
        tables.append(icml.Table(f"Stability over {cfg.trials} clean trials (official "
                                 "pairwise Jaccard / Pearson)",
                                 ["task", "agent", "runs", "Jaccard", "Pearson"], stab_rows))
    artifacts = {}
    png = _heatmap(ctx, rows)
    if png:
        artifacts["success heatmap"] = png
    import json

    (ctx.path("runs.json")).write_text(json.dumps([r.to_dict() for r in records], indent=1,
                                                  default=str))
    artifacts["runs"] = "runs.json"
    notes = _notes(records, tools)
    remove_tree(sandbox)  # the graded workspaces are summarised in runs.json
    return icml.RunResult(metrics=metrics, tables=tables, artifacts=artifacts, notes=notes)


def _notes(records: list[Any], tools: dict[str, bool]) -> str:
    def ok(agent: str, cond: str) -> str:
        rs = [r for r in records if r.agent == agent and r.condition == cond]
        return f"{sum(r.success for r in rs)}/{len(rs)}" if rs else "-"

    lines = [f"Tools here: {', '.join(k for k, v in tools.items() if v) or 'none'}; missing: "
             f"{', '.join(k for k, v in tools.items() if not v) or 'none'}."]
    agents = sorted({r.agent for r in records})
    for a in agents:
        lines.append(f"- {a}: clean {ok(a, 'clean')}, corruption flagged {ok(a, 'corrupt')}, "
                     f"decoy ignored and rule met {ok(a, 'decoy')}, bloat {ok(a, 'bloat')}")
    bad = [r for r in records if r.condition == "corrupt" and not r.flagged]
    if bad:
        lines.append(f"- {len(bad)} corrupted-input runs were not flagged by their agent "
                     "(reported as failures).")
    return "\n".join(lines)


def _heatmap(ctx: icml.RunContext, rows: list[list[Any]]) -> str | None:
    from icml.report import heatmap

    agents = sorted({r[0] for r in rows})
    conds = [c for c in ("clean", "corrupt", "decoy", "bloat") if any(r[1] == c for r in rows)]
    cells = [[float("nan")] * len(conds) for _ in agents]
    for r in rows:
        if r[1] in conds:
            cells[agents.index(r[0])][conds.index(r[1])] = r[6]
    png = heatmap(ctx.path("success_heatmap.png"), cells, rows=agents, cols=conds,
                  title="success % per agent and condition", label="success %", fmt=".0f")
    return "success_heatmap.png" if png else None


def infer_job(ctx: icml.RunContext, cfg: InferConfig) -> icml.RunResult:
    from icml_bioagent_bench.harness import run_agent
    from icml_bioagent_bench.suite import make_suite
    from icml_bioagent_bench.workspace import Workspace

    _check_tools(cfg)
    (agent,) = _agents(ctx, cfg, [cfg.agent])
    judge = _judge(ctx, cfg)
    conds = ["clean"] if cfg.condition == "clean" else ["clean", cfg.condition]
    with ctx.step(f"generating {cfg.task}"):
        suite = make_suite(ctx.out_dir, tasks=[cfg.task], seed=ctx.seed, conditions=conds,
                           bloat_words=cfg.bloat_words, task_kwargs=_task_kwargs(cfg))
    task = suite[(cfg.task, cfg.condition)]
    with ctx.step(f"running {agent.name}"):
        rec = run_agent(task, agent, ctx.out_dir / "workspaces", limits=cfg.limits,
                        judge=judge)
    _count_calls(ctx, [rec])
    Workspace(rec.workspace, task).unfreeze()  # kept for inspection
    a = rec.assessment
    rows = [["status", rec.status], ["results_match", rec.results_match],
            ["steps", f"{a['steps_completed']}/{a['steps_to_completion']}"],
            ["final_result_reached", a["final_result_reached"]],
            ["completion rate", rec.completion_rate],
            ["adjusted completion rate", rec.adjusted_completion_rate],
            ["flagged inputs", rec.flagged], ["decoy used", rec.decoy_used],
            ["success", rec.success], ["judge notes", a["notes"]],
            ["problems", "; ".join(rec.problems) or "none"]]
    steps = [[i, s["action"][:90], s["returncode"], s["output"][:90]]
             for i, s in enumerate(rec.trace["steps"])]
    metrics = {"results_match": float(rec.results_match), "completion_rate":
               rec.completion_rate, "adjusted_completion_rate": rec.adjusted_completion_rate,
               "success": float(rec.success), "seconds": rec.seconds,
               **{f"result_{k}": float(v) for k, v in rec.metrics.items()}}
    from pathlib import Path

    ws = Path(rec.workspace)
    files = [[f] for f in Workspace(ws, task).files("outputs", "results")]
    return icml.RunResult(
        metrics=metrics,
        tables=[icml.Table(f"{agent.name} on {cfg.task} ({cfg.condition})", ["item", "value"],
                           rows),
                icml.Table("Trace", ["#", "action", "rc", "output"], steps),
                icml.Table("Artifacts", ["file"], files)],
        artifacts={"workspace": str(ws.relative_to(ctx.out_dir))},
        notes=f"Workspace kept at `{ws}`.")


