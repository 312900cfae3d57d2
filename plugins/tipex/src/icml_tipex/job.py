"""The default jobs behind the hooks: SynthGAIA tasks solved under one config against the bare
agent (infer), and the two-tier sweep per level (evaluate)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import icml
from icml_tipex.config import EvaluateConfig, Execution, InferConfig

if TYPE_CHECKING:
    from icml_tipex.runner import ExecutionConfig


class CountedModel:
    """A chat model whose calls are counted on the run context: ``ctx.call_ok()`` per reply,
    ``ctx.call_failed(err)`` per :class:`~icml_tipex.chat.ModelCallError` (an unreachable or
    broken endpoint). The core then marks a run whose every call failed as failed, instead of
    reporting accuracy 0 with the connection error only in traces.jsonl."""

    def __init__(self, model: Any, ctx: icml.RunContext) -> None:
        self.model, self.ctx = model, ctx

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def count_tokens(self, messages: list[Any]) -> int:
        return self.model.count_tokens(messages)

    async def generate(self, messages: list[Any], **kw: Any) -> Any:
        from icml_tipex.chat import ModelCallError

        try:
            out = await self.model.generate(messages, **kw)
        except ModelCallError as exc:
            self.ctx.call_failed(exc)
            raise
        self.ctx.call_ok()
        return out


def build(ctx: icml.RunContext, cfg: Execution) -> tuple[Any, Any, Any]:
    """(suite, model, runner) as configured."""
    from icml_tipex.runner import TipexRunner
    from icml_tipex.scripted import ScriptedModel, SimParams
    from icml_tipex.synthgaia import SynthGAIA

    scale = cfg.latency_scale
    suite = SynthGAIA(cfg.kb_entities, seed=ctx.seed,
                      tool_latency={"lookup": 0.5 * scale, "search": 0.3 * scale,
                                    "calc": 0.1 * scale})
    params = SimParams(eps0=cfg.eps0, beta=cfg.beta, plan_err=cfg.plan_err,
                       synth_err=cfg.synth_err, judge_skill=cfg.judge_skill)
    if cfg.engine == "des":  # the discrete-event engine: the structured scripted model
        from icml_tipex.des import DesRunner
        from icml_tipex.fast import StructuredModel, sync_tools

        smodel = StructuredModel(suite, params, seed=ctx.seed, latency_scale=scale)
        return suite, smodel, DesRunner(smodel, sync_tools(suite))
    if cfg.model == "scripted":
        model: Any = ScriptedModel(suite, params, seed=ctx.seed, latency_scale=scale)
    elif cfg.model == "http":
        from icml_tipex.openai_http import OpenAIChatModel

        model = CountedModel(OpenAIChatModel(cfg.base_url, cfg.http_model), ctx)
    else:
        from icml_tipex.hf import load_chat_model

        with ctx.step(f"loading the {cfg.model} transformers model"):
            model = load_chat_model(cfg.model, device=ctx.torch_device(),
                                    dtype=ctx.torch_dtype(), seed=ctx.seed,
                                    batch_size=cfg.batch_size, constrained=cfg.constrained,
                                    tool_first=cfg.tool_first,
                                    vocab=cfg.constrained_vocab)
    return suite, model, TipexRunner(model, suite.tools(), clock=cfg.clock,  # type: ignore[arg-type]
                                     engine=cfg.engine)  # type: ignore[arg-type]


def execution_config(cfg: Execution, seed: int, **over: Any) -> ExecutionConfig:
    """The runner's config: the ``execution.*`` section as it is, at the job's design point
    (``n_replicas``, ``width``, ``planner`` where the capability has them) and the run's seed."""
    from icml_tipex.runner import ExecutionConfig

    point = {k: getattr(cfg, k) for k in ("n_replicas", "width", "planner") if hasattr(cfg, k)}
    return ExecutionConfig.from_config(cfg.execution, seed=seed, **{**point, **over})


def _stats(results: list[Any]) -> tuple[float, float, float]:
    n = len(results)
    return (sum(bool(r.correct) for r in results) / n, sum(r.latency_s for r in results) / n,
            sum(r.tokens for r in results) / n)


def infer_job(ctx: icml.RunContext, cfg: InferConfig) -> icml.RunResult:
    from icml_tipex.trace import gantt

    suite, model, runner = build(ctx, cfg)
    ecfg = execution_config(cfg, ctx.seed)
    bare = execution_config(cfg, ctx.seed, n_replicas=1, width=1, planner="chain", quorum=None)
    rows, metrics, plots = [], {}, {}
    trace_path = ctx.path("traces.jsonl")
    trace_path.write_text("")
    for lvl in ctx.progress(cfg.levels, desc="levels"):
        tasks = suite.tasks(lvl, cfg.num_tasks)
        res = runner.run(tasks, ecfg, trace=True, shared_inflight=cfg.shared_inflight)
        base = runner.run(tasks, bare, shared_inflight=cfg.shared_inflight)
        (a, lat, tok), (a0, lat0, tok0) = _stats(res), _stats(base)
        failed = sum(1 for r in res for p in r.replicas if p.status != "ok")
        rows.append([lvl, "TIPEX", a, lat, tok, sum(r.calls for r in res) / len(res), failed])
        rows.append([lvl, "bare agent", a0, lat0, tok0, sum(r.calls for r in base) / len(base),
                     sum(1 for r in base for p in r.replicas if p.status != "ok")])
        metrics.update({f"L{lvl}_accuracy": a, f"L{lvl}_bare_accuracy": a0,
                        f"L{lvl}_latency_s": lat, f"L{lvl}_bare_latency_s": lat0,
                        f"L{lvl}_tokens": tok, f"L{lvl}_bare_tokens": tok0})
        for r in res[:cfg.trace_tasks]:
            r.trace.to_jsonl(trace_path, append=True)
        if cfg.trace_tasks and res:
            p = gantt(res[0].trace.events, ctx.path(f"gantt_L{lvl}.png"),
                      f"level {lvl}, task {res[0].task_id}: N={cfg.n_replicas}, w={cfg.width}, "
                      f"K={cfg.execution.max_inflight}")
            if p is not None:
                plots[f"gantt_L{lvl}"] = p.name
    return icml.RunResult(
        metrics=metrics,
        tables=[icml.Table(f"SynthGAIA, {cfg.num_tasks} tasks per level: TIPEX (N={cfg.n_replicas}"
                           f", w={cfg.width}, g={ecfg.granularity}, K={ecfg.max_inflight}, "
                           f"{ecfg.aggregator}) vs the bare agent; model {model.name}, "
                           f"{cfg.clock} clock", ["level", "method", "accuracy", "latency s",
                                                  "tokens", "model calls", "failed replicas"],
                           rows)],
        artifacts={"traces": trace_path.name, **plots},
        notes="Latency is the two-tier makespan on the run's clock; tokens are prompt + "
              "completion over all model calls. traces.jsonl holds every event of the first "
              f"{cfg.trace_tasks} task(s) per level.")


def evaluate_job(ctx: icml.RunContext, cfg: EvaluateConfig) -> icml.RunResult:
    from icml_tipex.sweep import complementarity, configs_of, interaction_plot, sweep

    suite, model, runner = build(ctx, cfg)
    base = execution_config(cfg, ctx.seed)
    tasks = {lvl: suite.tasks(lvl, cfg.num_tasks) for lvl in cfg.levels}
    n_max, w_max = max(cfg.replicas), max(cfg.widths)
    configs = configs_of(base, {"planner": ["dag"], "n_replicas": cfg.replicas,
                                "width": cfg.widths})
    if cfg.include_chain:
        configs = configs_of(base, {"planner": ["chain"], "n_replicas": cfg.replicas}) + configs
    extra = [replace(base, planner="dag", n_replicas=n_max, width=w_max, granularity=g)
             for g in cfg.granularities if g != cfg.execution.granularity]
    extra += [replace(base, planner="dag", n_replicas=n_max, width=w_max, max_inflight=k or None)
              for k in cfg.inflight_limits if (k or None) != cfg.execution.max_inflight]
    keys = ["level", "planner", "n_replicas", "width", "granularity", "max_inflight",
            "accuracy", "latency_s", "tokens"]
    rows = sweep(runner, tasks, base, configs=configs + extra,
                 progress=lambda it: ctx.progress(it, desc="sweep"),
                 on_row=lambda r: ctx.record_row("sweep rows (as they finished)", keys,
                                                 [r[k] for k in keys]))
    ex = cfg.execution
    main = [r for r in rows if r["granularity"] in (ex.granularity, 1)
            and r["max_inflight"] == ex.max_inflight]
    main = [r for r in main if r["planner"] == "chain" or r["granularity"] == ex.granularity]
    tables = [icml.Table(
        f"Sweep over N and w per level (g={ex.granularity}, K={ex.max_inflight}, "
        f"{ex.aggregator}, {cfg.num_tasks} tasks per level, virtual clock)",
        ["level", "structure", "N", "accuracy", "latency s", "tokens"],
        [[r["level"], "bare agent" if r["planner"] == "chain" else f"DAG w={r['width']}",
          r["n_replicas"], r["accuracy"], r["latency_s"], r["tokens"]] for r in main])]
    metrics: dict[str, Any] = {}
    if cfg.include_chain and n_max > 1:
        comp_rows = []
        for lvl in cfg.levels:
            c = complementarity(rows, lvl, n_max, w_max)
            comp_rows.append([lvl, c["base_acc"], c["gain_rp"], c["gain_sp"], c["gain_both"],
                              c["interaction"], c["speedup"], c["token_ratio"]])
            metrics.update({f"L{lvl}_{k}": v for k, v in c.items()})
        tables.insert(0, icml.Table(
            f"Complementarity: accuracy gain over the bare agent (N=1, no planner) from "
            f"replicas alone (N={n_max}), structure alone (DAG w={w_max}) and both",
            ["level", "bare accuracy", "gain RP", "gain SP", "gain both", "interaction",
             "latency speed-up (both)", "token ratio (both)"], comp_rows))
        best = max(comp_rows, key=lambda r: r[4])
        metrics["level_with_largest_gain"] = best[0]
    gk = [r for r in rows if r["planner"] == "dag" and r["n_replicas"] == n_max
          and r["width"] == w_max]
    tables.append(icml.Table(
        f"Granularity and in-flight limit at N={n_max}, w={w_max}",
        ["level", "g", "K", "accuracy", "latency s", "tokens"],
        [[r["level"], r["granularity"], r["max_inflight"] or "none", r["accuracy"],
          r["latency_s"], r["tokens"]] for r in sorted(
              gk, key=lambda r: (r["level"], r["granularity"], r["max_inflight"] or 10**9))]))
    p = interaction_plot(main, ctx.path("interaction.png"),
                         f"TIPEX on SynthGAIA (g={ex.granularity}, K={ex.max_inflight})")
    return icml.RunResult(
        metrics=metrics, tables=tables,
        artifacts={"interaction": p.name} if p is not None else {},
        notes="Scripted stochastic model on the virtual clock (latency in simulated seconds). "
              "Gains are accuracy differences to the bare ReAct agent; interaction = gain(both) "
              "- gain(RP) - gain(SP) (> 0: the tiers are complementary).")
