"""Run traces: one event per model call, tool call, path outcome and aggregation decision,
written as JSONL and drawn as a Gantt chart (one row per replica and subtask)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class Trace:
    """Events of one ``solve``; times are seconds since the solve started."""

    def __init__(self, t0: float, task_id: str = "", enabled: bool = True) -> None:
        self.t0, self.task_id, self.enabled = t0, task_id, enabled
        self.events: list[dict[str, Any]] = []

    def add(self, kind: str, **fields: Any) -> None:
        if self.enabled:
            ev = {"kind": kind, **fields}
            for k in ("queued", "start", "end", "t"):
                if k in ev and ev[k] is not None:
                    ev[k] = ev[k] - self.t0
            self.events.append(ev)

    def calls(self, status: str | None = None) -> list[dict[str, Any]]:
        """Model-call events (optionally only those with ``status``)."""
        return [e for e in self.events if e["kind"] == "model"
                and (status is None or e["status"] == status)]

    def to_jsonl(self, path: str | Path, append: bool = False) -> Path:
        p = Path(path)
        with p.open("a" if append else "w") as f:
            for e in self.events:
                f.write(json.dumps({"task_id": self.task_id, **e}, default=str) + "\n")
        return p


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


_COLORS = {"planner": "#4C72B0", "worker": "#55A868", "synthesizer": "#C44E52",
           "judge": "#8172B2", "tool": "#CCB974"}


def gantt(events: Iterable[dict[str, Any]], path: str | Path, title: str = "") -> Path | None:
    """Draw model and tool calls as bars (rows: replica/subtask; hatched: cancelled or failed).
    Returns the PNG path, or None without matplotlib (through :func:`icml.report.figure`)."""
    from icml.report import figure

    events = list(events)
    evs = [e for e in events if e["kind"] in ("model", "tool") and e.get("start") is not None]
    rows: dict[tuple[int, str], int] = {}
    for e in sorted(evs, key=lambda e: (e.get("replica", 0), e["start"])):
        rows.setdefault((e.get("replica", 0), str(e.get("subtask", ""))), len(rows))
    p = Path(path)
    with figure(p, figsize=(9, max(2.5, 0.28 * len(rows) + 1))) as ax:
        if ax is None:
            return None
        _draw_gantt(ax, events, evs, rows, title)
    return p


def _draw_gantt(ax: Any, events: list[dict[str, Any]], evs: list[dict[str, Any]],
                rows: dict[tuple[int, str], int], title: str) -> None:
    for e in evs:
        y = rows[(e.get("replica", 0), str(e.get("subtask", "")))]
        role = "tool" if e["kind"] == "tool" else e.get("role", "worker")
        end = e["end"] if e.get("end") is not None else e["start"]
        bad = e.get("status", "ok") != "ok"
        if e.get("queued") is not None and e["queued"] < e["start"]:
            ax.barh(y, e["start"] - e["queued"], left=e["queued"], color="#dddddd", height=0.5)
        ax.barh(y, max(end - e["start"], 1e-3), left=e["start"], height=0.7,
                color=_COLORS.get(role, "#999999"), hatch="//" if bad else None,
                edgecolor="black" if bad else None, linewidth=0.4)
    for e in events:
        if e["kind"] == "decision":
            ax.axvline(e["t"], color="black", linestyle="--", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [f"r{r}:{s}" for r, s in rows], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("time since start (s)")
    ax.set_title(title or "TIPEX schedule")
    # legend proxies: empty filled areas in each colour (no matplotlib import needed)
    handles = [ax.fill_between([], [], color=c, label=k) for k, c in _COLORS.items()]
    handles.append(ax.fill_between([], [], color="#dddddd", label="waiting for K"))
    ax.legend(handles=handles, fontsize=6, loc="lower right")
