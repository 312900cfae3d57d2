"""Sweeps over the two tiers (N, w, g, K, ...) per difficulty level, their summary (gains of
replica vs structural parallelism and their interaction) and the interaction plot."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from icml_tipex.runner import ExecutionConfig, SolveResult, TipexRunner


def summarize(level: int, cfg: ExecutionConfig, results: Sequence[SolveResult]) -> dict[str, Any]:
    """One sweep row: the config's knobs and mean accuracy, latency, tokens and calls."""
    n = len(results)
    return {"level": level, "planner": cfg.planner, "n_replicas": cfg.n_replicas,
            "width": cfg.width, "granularity": cfg.granularity,
            "max_inflight": cfg.max_inflight, "aggregator": cfg.aggregator,
            "quorum": cfg.quorum,
            "accuracy": sum(bool(r.correct) for r in results) / n,
            "latency_s": sum(r.latency_s for r in results) / n,
            "tokens": sum(r.tokens for r in results) / n,
            "calls": sum(r.calls for r in results) / n}


def _canonical(cfg: ExecutionConfig) -> ExecutionConfig:
    # width and granularity mean nothing without a planner
    return replace(cfg, width=1, granularity=1) if cfg.planner == "chain" else cfg


def configs_of(base: ExecutionConfig, grid: Mapping[str, Sequence[Any]]) -> list[ExecutionConfig]:
    """The distinct configs of the grid's cartesian product (keys: ExecutionConfig fields)."""
    names = {f.name for f in fields(ExecutionConfig)}
    unknown = sorted(set(grid) - names)
    if unknown:
        raise ValueError(f"grid keys {unknown} are not ExecutionConfig fields; known: "
                         f"{sorted(names)}")
    out, seen = [], set()
    for values in itertools.product(*grid.values()):
        cfg = _canonical(replace(base, **dict(zip(grid, values))))
        key = repr(cfg)
        if key not in seen:
            seen.add(key)
            out.append(cfg)
    return out


def sweep(runner: TipexRunner, tasks_by_level: Mapping[int, Sequence[Any]],
          base: ExecutionConfig, grid: Mapping[str, Sequence[Any]] | None = None, *,
          configs: Iterable[ExecutionConfig] | None = None,
          progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
          on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """Run every config (``grid`` over ``base``, or ``configs``) on every level's tasks and
    return one :func:`summarize` row per (config, level); ``on_row`` receives each row as soon
    as it is done (so a run can keep it if interrupted)."""
    cfgs = list(configs) if configs is not None else configs_of(base, grid or {})
    jobs = [(c, lvl) for c in cfgs for lvl in tasks_by_level]
    rows = []
    for cfg, lvl in (progress(jobs) if progress else jobs):
        rows.append(summarize(lvl, cfg, runner.run(tasks_by_level[lvl], cfg)))
        if on_row is not None:
            on_row(rows[-1])
    return rows


def find(rows: Sequence[dict], **match: Any) -> dict | None:
    for r in rows:
        if all(r.get(k) == v for k, v in match.items()):
            return r
    return None


def complementarity(rows: Sequence[dict], level: int, n: int, w: int) -> dict[str, float]:
    """Accuracy gains over the bare agent (chain, N=1) at one level: replica parallelism alone
    (chain, N=n), structural alone (dag, w, N=1), both (dag, w, N=n), and their interaction
    (both minus the two alone)."""
    base = find(rows, level=level, planner="chain", n_replicas=1)
    rp = find(rows, level=level, planner="chain", n_replicas=n)
    sp = find(rows, level=level, planner="dag", width=w, n_replicas=1)
    both = find(rows, level=level, planner="dag", width=w, n_replicas=n)
    if None in (base, rp, sp, both):
        raise ValueError(f"the sweep lacks a row for level {level}, N={n}, w={w} or the bare "
                         "agent (include_chain)")
    a = base["accuracy"]
    g_rp, g_sp, g_both = rp["accuracy"] - a, sp["accuracy"] - a, both["accuracy"] - a
    return {"base_acc": a, "gain_rp": g_rp, "gain_sp": g_sp, "gain_both": g_both,
            "interaction": g_both - g_rp - g_sp,
            "speedup": base["latency_s"] / both["latency_s"],
            "token_ratio": both["tokens"] / base["tokens"]}


def interaction_plot(rows: Sequence[dict], path: str | Path, title: str = "") -> Path | None:
    """Accuracy and latency against N, one line per structure, one column per level (through
    :func:`icml.report.figure`; None without matplotlib)."""
    from icml.report import figure

    levels = sorted({r["level"] for r in rows})
    p = Path(path)
    with figure(p, 2, len(levels), figsize=(4 * len(levels), 6.5)) as grid:
        if grid is None:
            return None
        _draw_interaction(grid, rows, levels, title)
    return p


def _draw_interaction(grid: Any, rows: Sequence[dict], levels: list[Any], title: str) -> None:
    # figure() squeezes a 2 x 1 grid to two axes: index it as rows x columns either way
    axes = [[grid[0]], [grid[1]]] if len(levels) == 1 else grid
    fig = axes[0][0].figure
    structs = sorted({(r["planner"], r["width"]) for r in rows}, key=lambda s: (s[0], s[1]))
    for j, lvl in enumerate(levels):
        for planner, w in structs:
            pts = sorted((r["n_replicas"], r["accuracy"], r["latency_s"]) for r in rows
                         if r["level"] == lvl and r["planner"] == planner and r["width"] == w)
            label = "bare agent (chain)" if planner == "chain" else f"DAG w={w}"
            style = "k--" if planner == "chain" else "-"
            axes[0][j].plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o",
                            markersize=3, label=label)
            axes[1][j].plot([p[0] for p in pts], [p[2] for p in pts], style, marker="o",
                            markersize=3, label=label)
        axes[0][j].set(title=f"level {lvl}", ylabel="accuracy", xscale="log")
        axes[1][j].set(xlabel="N (replicas)", ylabel="latency (virtual s)", xscale="log")
        for ax in (axes[0][j], axes[1][j]):
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
