"""PNG plots for run reports. matplotlib is an optional extra (``icml-core[plots]``): when it is
missing, the plot functions log a warning and return ``None`` so a run still completes."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


@contextmanager
def figure(path: str | Path, nrows: int = 1, ncols: int = 1, *,
           figsize: tuple[float, float] | None = None, **subplots: Any) -> Iterator[Any]:
    """A figure for any plot the helpers below do not cover: yields the axes (an array when
    ``nrows * ncols > 1``, as ``plt.subplots``) and saves a PNG to ``path`` on exit, closing the
    figure (``squeeze=False`` keeps a 2-D array of axes, as in ``plt.subplots``). Yields ``None``
    without matplotlib (a warning is logged), so::

        with icml.report.figure(ctx.path("heat.png"), 1, 2) as axes:
            if axes is not None:
                axes[0].imshow(...)

    keeps a run going where plots are optional. The backend is Agg (no display needed)."""
    plt = _pyplot()
    if plt is None:
        yield None
        return
    size = figsize or (6 * ncols, 4 * nrows)
    subplots.setdefault("squeeze", True)
    fig, axes = plt.subplots(nrows, ncols, figsize=size, dpi=110, **subplots)
    try:
        yield axes
    except BaseException:
        plt.close(fig)
        raise
    _save(fig, plt, path)


def line_plot(path: str | Path, series: dict[str, tuple[Sequence[float], Sequence[float]]], *,
              title: str = "", xlabel: str = "", ylabel: str = "", logx: bool = False,
              logy: bool = False,
              bands: dict[str, tuple[Sequence[float], Sequence[float]]] | None = None,
              ) -> Path | None:
    """One line per ``name -> (xs, ys)``, with an optional shaded band per name
    (``bands[name] = (lows, highs)``, e.g. a CI from :mod:`icml.stats`); returns the PNG path
    or None without matplotlib."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    for name, (xs, ys) in series.items():
        (line,) = ax.plot(list(xs), list(ys), marker="o", markersize=3, label=name)
        if bands and name in bands:
            lo, hi = bands[name]
            ax.fill_between(list(xs), list(lo), list(hi), color=line.get_color(), alpha=0.2)
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


def heatmap(path: str | Path, values: Sequence[Sequence[float]], *, rows: Sequence[str],
            cols: Sequence[str], title: str = "", label: str = "", fmt: str = ".2g",
            cmap: str = "viridis") -> Path | None:
    """A labelled heat map (each cell annotated with ``fmt``) with a colour bar; returns the
    PNG path or None without matplotlib."""
    if len(values) != len(rows) or any(len(r) != len(cols) for r in values):
        raise ValueError(f"heatmap: values must be {len(rows)} x {len(cols)} (rows x cols)")
    with figure(path, figsize=(1.0 + 0.9 * len(cols), 1.0 + 0.5 * len(rows))) as ax:
        if ax is None:
            return None
        im = ax.imshow([list(map(float, r)) for r in values], cmap=cmap, aspect="auto")
        ax.set_xticks(range(len(cols)), labels=list(cols), rotation=30, ha="right")
        ax.set_yticks(range(len(rows)), labels=list(rows))
        for i, r in enumerate(values):
            for j, v in enumerate(r):
                ax.text(j, i, format(float(v), fmt), ha="center", va="center", fontsize=8,
                        color="white")
        ax.figure.colorbar(im, ax=ax, label=label)
        ax.set_title(title)
    return Path(path)


def _save(fig, plt, path: str | Path) -> Path:  # noqa: ANN001
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    engine = getattr(fig, "get_layout_engine", lambda: None)()
    if engine is None:  # a figure made with layout="constrained" keeps its own engine
        fig.tight_layout()
    fig.savefig(p)
    plt.close(fig)
    return p
