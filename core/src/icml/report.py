"""PNG plots for run reports. matplotlib is an optional extra (``icml-core[plots]``): when it is
missing, the plot functions log a warning and return ``None`` so a run still completes."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger("icml.report")


def _pyplot():  # noqa: ANN202
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed; skipping plot (pip install 'icml-core[plots]')")
        return None
    return plt


def line_plot(path: str | Path, series: dict[str, tuple[Sequence[float], Sequence[float]]], *,
              title: str = "", xlabel: str = "", ylabel: str = "", logx: bool = False,
              logy: bool = False) -> Path | None:
    """One line per ``name -> (xs, ys)``; returns the PNG path or None without matplotlib."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    for name, (xs, ys) in series.items():
        ax.plot(list(xs), list(ys), marker="o", markersize=3, label=name)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    return _save(fig, plt, path)


def bar_plot(path: str | Path, values: dict[str, float], *, title: str = "",
             ylabel: str = "", logy: bool = False) -> Path | None:
    """One bar per ``name -> value``; returns the PNG path or None without matplotlib."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    ax.bar(list(values), list(values.values()), color="#4C72B0")
    ax.set(title=title, ylabel=ylabel)
    if logy:
        ax.set_yscale("log")
    ax.tick_params(axis="x", labelrotation=20)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, plt, path)


def _save(fig, plt, path: str | Path) -> Path:  # noqa: ANN001
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(p)
    plt.close(fig)
    return p
