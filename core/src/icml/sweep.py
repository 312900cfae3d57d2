"""Grids and seeds over any plugin: ``icml sweep`` and :func:`sweep`.

A sweep is the cartesian product of a grid of config values and a list of seeds. Each *cell*
(one grid point, one seed) is one ordinary run through :func:`icml.runner.run` -- the same config
validation and the same ``result.json``/``report.md``/``run.log`` as ``icml run`` -- in its own
folder ``DIR/<cell>/<run folder>/``. Cell names are deterministic and readable, the grid keys in
the order given and the seed last (``schedule.lr=0.1,steps=20,seed=3``); a value with characters
a file name should not hold is sanitised and tagged with a short hash of the original.

Semantics

* **Validated first.** Every cell's config is built and checked before any cell starts; a bad
  key, value, seed, device or folder is one :class:`~icml.config.ConfigError` line naming the
  cell. A finished cell already in ``DIR`` whose config differs from the one asked for is an
  error too (use another ``--out``), so results are never silently mixed.
* **Resumable.** A cell is *finished* when one of its run folders holds a ``result.json`` with
  status ``ok`` or ``failed``; a finished cell is never rerun or overwritten. Rerunning the same
  command resumes an interrupted sweep: interrupted or half-written runs are run again (in a new
  run folder beside the old one).
* **Failures are isolated.** A cell whose run fails is recorded as ``failed`` and the sweep goes
  on; the aggregate lists the failed seeds of each grid point.
* **Ctrl-C** (or SIGTERM) interrupts the running cells (their finished arms are kept, as with
  ``icml run``), keeps every finished cell, writes ``sweep.json`` marked incomplete and raises
  :class:`SweepInterrupted` (the CLI prints the command that resumes, exit status 130).
* **Safe to share.** Before a sweep runs a cell it creates ``DIR/<cell>/.claim`` with
  ``O_CREAT | O_EXCL``; a second sweep into the same ``DIR`` skips claimed cells, runs the rest,
  then waits for the other sweep's cells. A claim left by a killed sweep on this host (its
  process is gone) is broken under a lock; ``sweep.json`` and ``report.md`` are written
  atomically (temporary file, then rename).

Backends (no scheduler beyond these)

* ``local`` (default): a :class:`concurrent.futures.ProcessPoolExecutor` with the ``spawn``
  context and ``workers`` processes (default: the cores this process may use). Each run gets
  ``threads`` torch threads (default ``max(1, cores // workers)``) so the machine is not
  oversubscribed; ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` are set to the same in each worker.
* ``ray`` (``pip install 'icml-core[ray]'``): ``ray.init(address=...)`` joins a running cluster
  (or ``RAY_ADDRESS``), else starts a local one (``include_dashboard=False``, ``workers *
  threads`` CPUs). Each cell is a task declaring ``num_cpus=threads`` and, with a ``cuda``
  device, ``num_gpus=1``. ``DIR`` must be visible at the same path on every node.

Aggregate

``DIR/sweep.json`` (schema ``icml.sweep/1``) and ``DIR/report.md``: per grid point and per
numeric metric of ``result.metrics``, the mean over the seeds that finished ``ok`` with a
percentile bootstrap CI from :func:`icml.stats.hierarchical_ci` (one value per seed: a
bootstrap over seeds; ``level``, ``n_boot`` and bootstrap ``seed`` recorded). A metric with a
non-finite value (a diverged seed) gets no CI, and says so.

*Per-item results.* A run that also reports per-item scores declares the artifact
``"items"`` (:data:`ITEMS_ARTIFACT`): a JSON file in the run folder mapping a metric name to a
list of per-item numbers (:func:`write_items` writes it). The aggregate then has
``items/<metric>``: the mean over seeds x items with :func:`icml.stats.hierarchical_ci`'s
two-level bootstrap (crossed when every seed scored the same number of items).

With one numeric grid key, a PNG per metric (up to four; ``icml-core[plots]``) shows the mean
and the CI bounds against that key.

Light: importing this module imports neither numpy nor torch (the aggregate imports
:mod:`icml.stats` when it runs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import itertools
import json
import os
import re
import socket
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from icml import jsonio
from icml.config import ConfigError

SCHEMA = "icml.sweep/1"
CLAIM = ".claim"
ITEMS_ARTIFACT = "items"
BACKENDS = ("local", "ray")
_NAME_MAX = 180
_SAFE = re.compile(r"[^A-Za-z0-9._+\-]")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a sweep, after every finished cell was kept and ``sweep.json``
    written (incomplete); ``result`` is the :class:`SweepResult` so far."""

    def __init__(self, message: str, result: SweepResult) -> None:
        super().__init__(message)
        self.result = result


# -- grid, seeds and cell names -----------------------------------------------------------------
def _split_values(text: str) -> list[str]:
    """``"0.1,0.2"`` -> ``["0.1", "0.2"]``; commas inside brackets or quotes do not split, so a
    list value can be given as ``[1,2],[3,4]``."""
    out, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[({":
            depth += 1
        elif ch in "])}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur).strip())
    return out


def parse_grid(specs: Sequence[str] | Mapping[str, Sequence[Any]]) -> dict[str, list[str]]:
    """``["lr=0.1,0.2", "steps=20"]`` (or a dict of lists) -> ``{"lr": ["0.1", "0.2"],
    "steps": ["20"]}``. Values stay strings, converted by the config like ``--set`` values."""
    if isinstance(specs, Mapping):
        items = [(str(k), list(v) if isinstance(v, (list, tuple)) else [v])
                 for k, v in specs.items()]
    else:
        items = []
        for spec in specs:
            key, sep, values = str(spec).partition("=")
            if not sep:
                raise ConfigError(f"--grid {spec!r}: expected key=v1,v2,... "
                                  "(e.g. --grid lr=0.1,0.01)")
            items.append((key.strip(), _split_values(values)))
    grid: dict[str, list[str]] = {}
    for key, values in items:
        if not _KEY.match(key):
            raise ConfigError(f"--grid {key!r}: not a config key (letters, digits, _ and dots "
                              "for nested keys)")
        if key == "seed":
            raise ConfigError("--grid seed=...: give seeds with --seeds (e.g. --seeds 0-4)")
        if key in grid:
            raise ConfigError(f"--grid {key}: given twice; list all its values in one --grid")
        vals = [_grid_value(v) for v in values]
        if not vals or any(v == "" for v in vals):
            raise ConfigError(f"--grid {key}: empty value; expected {key}=v1,v2,...")
        if len(set(vals)) != len(vals):
            raise ConfigError(f"--grid {key}: a value repeats ({', '.join(vals)})")
        grid[key] = vals
    return grid


def _grid_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_grid_value(x) for x in v) + "]"
    return str(v).strip()


def parse_seeds(spec: str | int | Sequence[int]) -> list[int]:
    """``"0-4"`` -> ``[0, 1, 2, 3, 4]``; ``"0,3,7"`` and ``"0-2,9"`` work too; a list of ints
    is checked and returned. Seeds must be distinct integers from 0 to 2**32-1."""
    from icml.runner import check_seed

    if isinstance(spec, bool):
        raise ConfigError(f"--seeds {spec!r}: expected e.g. 0-4 or 0,1,2")
    if isinstance(spec, int):
        seeds = [spec]
    elif isinstance(spec, str):
        seeds = []
        for part in spec.split(","):
            part = part.strip()
            m = re.fullmatch(r"(\d+)\s*-\s*(\d+)", part)
            if m:
                lo, hi = int(m.group(1)), int(m.group(2))
                if hi < lo:
                    raise ConfigError(f"--seeds {spec!r}: range {part} is empty (use lo-hi)")
                if hi - lo > 100_000:
                    raise ConfigError(f"--seeds {spec!r}: range {part} is too long")
                seeds += range(lo, hi + 1)
            elif part.isdigit():
                seeds.append(int(part))
            else:
                raise ConfigError(f"--seeds {spec!r}: expected e.g. 0-4 or 0,1,2 "
                                  f"(non-negative integers), got {part!r}")
    else:
        seeds = list(spec)
    if not seeds:
        raise ConfigError("--seeds: no seeds given (e.g. --seeds 0-4)")
    for s in seeds:
        try:
            check_seed(s)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("--seed ", "--seeds: seed ", 1)) from None
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds: a seed repeats ({', '.join(map(str, seeds))})")
    return seeds


def _safe_value(value: str) -> str:
    safe = _SAFE.sub("_", value)
    if safe != value or not safe:
        safe += "~" + hashlib.sha1(value.encode()).hexdigest()[:6]
    return safe


def point_name(params: Mapping[str, str]) -> str:
    """The readable name of a grid point: ``lr=0.1,steps=20`` (``all`` for an empty grid)."""
    name = ",".join(f"{k}={_safe_value(v)}" for k, v in params.items()) or "all"
    if len(name) > _NAME_MAX:
        name = name[:_NAME_MAX] + "~" + hashlib.sha1(name.encode()).hexdigest()[:8]
    return name


def cell_name(params: Mapping[str, str], seed: int) -> str:
    """A cell's folder name: the grid point's name with the seed last,
    ``lr=0.1,steps=20,seed=3`` (``seed=3`` for a seeds-only sweep)."""
    head = ",".join(f"{k}={_safe_value(v)}" for k, v in params.items())
    name = f"{head},seed={seed}" if head else f"seed={seed}"
    if len(name) > _NAME_MAX:
        name = name[:_NAME_MAX] + "~" + hashlib.sha1(name.encode()).hexdigest()[:8] + \
            f",seed={seed}"
    return name


@dataclasses.dataclass(frozen=True)
class Cell:
    """One grid point and one seed."""

    params: dict[str, str]
    seed: int

    @property
    def name(self) -> str:
        return cell_name(self.params, self.seed)

    @property
    def point(self) -> str:
        return point_name(self.params)

    def overrides(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.params.items()]


def expand(grid: Mapping[str, Sequence[str]], seeds: Sequence[int]) -> list[Cell]:
    """The cartesian product, grid points in the order of the grid's keys and values (the last
    key varying fastest), seeds innermost. Names are unique (checked)."""
    keys = list(grid)
    cells = [Cell(dict(zip(keys, combo)), int(seed))
             for combo in itertools.product(*(grid[k] for k in keys)) for seed in seeds]
    seen: dict[str, Cell] = {}
    for c in cells:
        if c.name in seen:  # pragma: no cover - hashes make this practically impossible
            raise ConfigError(f"cells {seen[c.name].params} and {c.params} share the folder "
                              f"name {c.name!r}")
        seen[c.name] = c
    return cells


# -- results ------------------------------------------------------------------------------------
@dataclasses.dataclass
class CellResult:
    """What became of one cell: ``status`` is ``ok`` or ``failed`` (finished: a complete
    ``result.json``), ``interrupted``, ``error`` (the run left no result, e.g. its worker
    died) or ``pending`` (not run, e.g. the sweep was interrupted first). ``reused``: it was
    finished before this sweep started (or by another sweep), not run by this one."""

    name: str
    params: dict[str, str]
    seed: int
    status: str = "pending"
    run_dir: str = ""
    error: str = ""
    reused: bool = False
    wall_s: float | None = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    items: dict[str, list[float]] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def finished(self) -> bool:
        return self.status in ("ok", "failed")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "params": dict(self.params), "seed": self.seed,
                "status": self.status, "run_dir": self.run_dir, "error": self.error,
                "reused": self.reused, "wall_s": self.wall_s, "metrics": dict(self.metrics)}


@dataclasses.dataclass
class SweepResult:
    """A sweep's cells and aggregate; ``path`` is ``sweep.json``, ``report`` is ``report.md``."""

    plugin: str
    capability: str
    out: Path
    grid: dict[str, list[str]]
    seeds: list[int]
    cells: list[CellResult]
    points: list[dict[str, Any]]
    path: Path
    report: Path
    plots: list[Path] = dataclasses.field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every cell finished (ok or failed)."""
        return all(c.finished for c in self.cells)

    @property
    def ok(self) -> bool:
        """Every cell finished ok."""
        return all(c.status == "ok" for c in self.cells)

    def count(self, status: str) -> int:
        return sum(c.status == status for c in self.cells)

    @property
    def ran(self) -> list[CellResult]:
        """The cells this sweep ran itself (not reused)."""
        return [c for c in self.cells if not c.reused and c.status != "pending"]

    def cell(self, name: str) -> CellResult:
        for c in self.cells:
            if c.name == name:
                return c
        raise KeyError(name)


def write_items(out_dir: str | Path, values: Mapping[str, Sequence[float]],
                name: str = "items.json") -> str:
    """Write per-item scores (``{"accuracy": [1, 0, 1, ...]}``) into a run folder and return
    the file name, to be declared as ``artifacts={icml.sweep.ITEMS_ARTIFACT: name}``::

        return icml.RunResult(metrics={"accuracy": acc},
                              artifacts={"items": write_items(ctx.out_dir, {"accuracy": hits})})
    """
    data = {str(k): [float(x) for x in v] for k, v in values.items()}
    path = Path(out_dir) / name
    path.write_text(jsonio.dumps(data, indent=None) + "\n", encoding="utf-8")
    return name


def _read_json(path: Path) -> Any:
    try:
        return jsonio.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def finished_run(cell_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """The run folder of a finished cell (a complete ``result.json`` with status ``ok`` or
    ``failed``) and its parsed result, or None. The first by name when there are several."""
    if not cell_dir.is_dir():
        return None
    for run_dir in sorted(p for p in cell_dir.iterdir() if p.is_dir()):
        data = _read_json(run_dir / "result.json")
        if isinstance(data, dict) and data.get("status") in ("ok", "failed"):
            return run_dir, data
    return None


def _numeric(metrics: Any) -> dict[str, float]:
    if not isinstance(metrics, dict):
        return {}
    return {str(k): float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _items_of(run_dir: Path, data: Mapping[str, Any]) -> dict[str, list[float]]:
    rel = (data.get("artifacts") or {}).get(ITEMS_ARTIFACT)
    if not isinstance(rel, str):
        return {}
    loaded = _read_json(run_dir / rel)
    if not isinstance(loaded, dict):
        return {}
    out = {}
    for k, v in loaded.items():
        if isinstance(v, list) and v and all(isinstance(x, (int, float))
                                             and not isinstance(x, bool) for x in v):
            out[str(k)] = [float(x) for x in v]
    return out


def _fill_from_disk(cr: CellResult, out: Path) -> bool:
    found = finished_run(out / cr.name)
    if found is None:
        return False
    run_dir, data = found
    cr.status, cr.error = data["status"], str(data.get("error") or "")
    cr.run_dir = str(run_dir.relative_to(out))
    cr.metrics = _numeric(data.get("metrics"))
    cr.items = _items_of(run_dir, data)
    total = (data.get("timings") or {}).get("total_s")
    cr.wall_s = float(total) if isinstance(total, (int, float)) else cr.wall_s
    return True


# -- aggregate ----------------------------------------------------------------------------------
def _estimate(per_seed: list[list[float]], level: float, n_boot: int,
              boot_seed: int) -> tuple[dict[str, Any] | None, str]:
    import math

    from icml import stats

    bad = [i for i, row in enumerate(per_seed) if any(not math.isfinite(x) for x in row)]
    if bad:
        return None, "non-finite value"
    est = stats.hierarchical_ci(per_seed, level=level, n_boot=n_boot, seed=boot_seed)
    return est.to_dict(), ""


def aggregate(cells: Sequence[CellResult], grid: Mapping[str, Sequence[str]], *,
              level: float = 0.95, n_boot: int = 2000, boot_seed: int = 0
              ) -> list[dict[str, Any]]:
    """One entry per grid point (grid order): the seeds that finished ok and failed, and per
    metric the per-seed values and ``icml.stats.hierarchical_ci`` over seeds (``ci``; None with
    a ``note`` when a value is not finite). Per-item metrics are ``items/<metric>``, over seeds
    x items. Depends only on the numbers in the cells' ``result.json`` files."""
    by_point: dict[str, list[CellResult]] = {}
    params_of: dict[str, dict[str, str]] = {}
    for c in cells:
        p = point_name(c.params)
        by_point.setdefault(p, []).append(c)
        params_of[p] = dict(c.params)
    points = []
    for p, members in by_point.items():
        ok = [c for c in members if c.status == "ok"]
        metrics: dict[str, Any] = {}
        for m in sorted({k for c in ok for k in c.metrics}):
            have = [c for c in ok if m in c.metrics]
            values = [c.metrics[m] for c in have]
            ci, note = _estimate([[v] for v in values], level, n_boot, boot_seed)
            metrics[m] = {"seeds": [c.seed for c in have], "values": values, "ci": ci,
                          **({"note": note} if note else {})}
        for m in sorted({k for c in ok for k in c.items}):
            have = [c for c in ok if m in c.items]
            rows = [c.items[m] for c in have]
            ci, note = _estimate(rows, level, n_boot, boot_seed)
            metrics[f"{ITEMS_ARTIFACT}/{m}"] = {
                "seeds": [c.seed for c in have], "items": [len(r) for r in rows],
                "values": [sum(r) / len(r) for r in rows], "ci": ci,
                **({"note": note} if note else {})}
        points.append({"name": p, "params": params_of[p],
                       "seeds_ok": [c.seed for c in ok],
                       "seeds_failed": [c.seed for c in members if c.status == "failed"],
                       "seeds_missing": [c.seed for c in members if not c.finished],
                       "metrics": metrics})
    return points


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def render_report(data: Mapping[str, Any]) -> str:
    """``report.md`` for a ``sweep.json`` dict."""
    keys = list(data["grid"])
    lines = [f"# Sweep: {data['plugin']} {data['capability']}", ""]
    n = len(data["cells"])
    done = sum(c["status"] in ("ok", "failed") for c in data["cells"])
    failed = [c for c in data["cells"] if c["status"] == "failed"]
    grid = "; ".join(f"{k} = {', '.join(v)}" for k, v in data["grid"].items())
    lines += [f"- grid: {grid or '(none)'}",
              f"- seeds: {', '.join(map(str, data['seeds']))}",
              f"- overrides: {' '.join(data['overrides']) or '(none)'}",
              f"- cells: {n} ({done} finished, {len(failed)} failed)"
              + ("" if data["complete"] else " -- INCOMPLETE: rerun the command to resume"),
              f"- CIs: {data['level']:.0%} percentile bootstrap over seeds "
              f"(icml.stats.hierarchical_ci, B={data['n_boot']}, seed={data['boot_seed']}); "
              "items/<metric>: over seeds x items", ""]
    lines += ["| point | metric | mean | CI | seeds |", "|---|---|---|---|---|"]
    for pt in data["points"]:
        label = pt["name"] if keys else "(all)"
        if not pt["metrics"]:
            lines.append(f"| {label} | - | - | - | 0 ok |")
        for m, v in pt["metrics"].items():
            ci = v["ci"]
            mean = _fmt(ci["value"]) if ci else "-"
            interval = f"[{_fmt(ci['lo'])}, {_fmt(ci['hi'])}]" if ci else v.get("note", "-")
            seeds = f"{len(v['seeds'])}" + (f" x {sum(v['items'])} items" if "items" in v
                                            else "")
            lines.append(f"| {label} | {m} | {mean} | {interval} | {seeds} |")
    if failed:
        lines += ["", "Failed cells:", ""]
        lines += [f"- {c['name']}: {c['error'] or 'failed'} ({c['run_dir']}/run.log)"
                  for c in failed]
    for plot in data.get("plots", []):
        lines += ["", f"![{plot}]({plot})"]
    return "\n".join(lines) + "\n"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _plots(out: Path, grid: Mapping[str, Sequence[str]],
           points: list[dict[str, Any]]) -> list[Path]:
    if len(grid) != 1:
        return []
    (key, values), = grid.items()
    try:
        xs = [float(v) for v in values]
    except ValueError:
        return []
    if len(xs) < 2:
        return []
    names = sorted({m for p in points for m, v in p["metrics"].items() if v["ci"]})[:4]
    if not names:
        return []
    from icml import report

    made = []
    for m in names:
        series: dict[str, tuple[list[float], list[float]]] = {"mean": ([], []), "lo": ([], []),
                                                               "hi": ([], [])}
        for x, p in zip(xs, points):
            ci = (p["metrics"].get(m) or {}).get("ci")
            if ci:
                for s in series:
                    series[s][0].append(x)
                    series[s][1].append(ci["value" if s == "mean" else s])
        path = report.line_plot(out / f"sweep_{_SAFE.sub('_', m)}.png", series,
                                title=f"{m}: mean and CI over seeds", xlabel=key, ylabel=m)
        if path is None:
            return made
        made.append(path)
    return made


def write_aggregate(result: SweepResult, *, overrides: Sequence[str], settings: Mapping[str, Any],
                    level: float, n_boot: int, boot_seed: int, plot: bool = True) -> None:
    """Compute the aggregate and write ``sweep.json`` and ``report.md`` (atomically)."""
    result.points = aggregate(result.cells, result.grid, level=level, n_boot=n_boot,
                              boot_seed=boot_seed)
    if plot and result.complete:
        try:
            result.plots = _plots(result.out, result.grid, result.points)
        except Exception:  # noqa: BLE001 - a plot must never lose the aggregate
            result.plots = []
    data = {
        "schema": SCHEMA, "plugin": result.plugin, "capability": result.capability,
        "grid": result.grid, "seeds": result.seeds, "overrides": list(overrides),
        **settings, "level": level, "n_boot": n_boot, "boot_seed": boot_seed,
        "complete": result.complete,
        "counts": {s: result.count(s) for s in ("ok", "failed", "interrupted", "error",
                                                "pending")},
        "cells": [c.to_dict() for c in result.cells], "points": result.points,
        "plots": [p.name for p in result.plots],
        "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    }
    _atomic_write(result.path, jsonio.dumps(data, strict=False) + "\n")
    _atomic_write(result.report, render_report(data))


def load(out: str | Path) -> dict[str, Any]:
    """Read a sweep's ``sweep.json`` back (non-finite floats restored)."""
    p = Path(out)
    p = p / "sweep.json" if p.is_dir() else p
    return jsonio.loads(p.read_text(encoding="utf-8"))


# -- claims -------------------------------------------------------------------------------------
_HOST = socket.gethostname()
_LIVE: set[str] = set()  # tokens of the sweeps running in this process


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _dir_lock(out: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: break claims without a lock
        yield
        return
    with open(out / ".sweep.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class Claims:
    """Exclusive per-cell claim files (``O_CREAT | O_EXCL``) held by this sweep."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.token = uuid.uuid4().hex
        self.held: set[str] = set()
        _LIVE.add(self.token)

    def _path(self, name: str) -> Path:
        return self.out / name / CLAIM

    def _create(self, path: Path) -> bool:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"host": _HOST, "pid": os.getpid(), "token": self.token,
                       "since": time.time()}, fh)
        return True

    def _stale(self, path: Path) -> bool:
        """Left by a sweep on this host whose process is gone (or by an earlier sweep of this
        process that has ended)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return True
        except (OSError, ValueError):  # being written right now, or garbage from long ago
            try:
                return time.time() - path.stat().st_mtime > 60
            except OSError:
                return True
        if not isinstance(data, dict) or data.get("host") != _HOST:
            return False
        pid = data.get("pid")
        if not isinstance(pid, int):
            return False
        if pid == os.getpid():
            return data.get("token") not in _LIVE
        return not _alive(pid)

    def acquire(self, name: str) -> bool:
        path = self._path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self._create(path):
            self.held.add(name)
            return True
        with _dir_lock(self.out):  # break a stale claim: re-check and replace under the lock
            if not self._stale(path):
                return False
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            if self._create(path):
                self.held.add(name)
                return True
        return False

    def release(self, name: str) -> None:
        if name not in self.held:
            return
        self.held.discard(name)
        path = self._path(name)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(data, dict) and data.get("token") == self.token:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def release_all(self) -> None:
        for name in list(self.held):
            self.release(name)

    def close(self) -> None:
        """Release every claim; claims of this object left behind count as stale from now."""
        self.release_all()
        _LIVE.discard(self.token)


# -- running one cell (in a worker process) ----------------------------------------------------
_HOSTS: dict[tuple[str, tuple[str, ...]], Any] = {}


def _limit_threads(threads: int | None) -> None:
    """Set the BLAS/OpenMP thread counts before torch or numpy load in a worker."""
    if threads is None:
        return
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)


def _die_with_parent() -> None:
    """Linux: a worker gets SIGTERM (written as ``interrupted``) when the sweep process dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort
        pass


_IN_POOL = False
_PARENT = 0


def _init_worker(threads: int | None) -> None:
    """A local pool worker: thread limits, death with the sweep, and Ctrl-C ignored while idle
    (a running cell is interrupted by it: :func:`run_cell` restores the handler)."""
    import signal

    global _IN_POOL, _PARENT
    _IN_POOL, _PARENT = True, os.getppid()
    _limit_threads(threads)
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    if not _IN_POOL:
        yield
        return
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_cell(task: Mapping[str, Any]) -> dict[str, Any]:
    """Run one cell (in whatever process the backend chose) and say how it ended:
    ``{"status", "run_dir", "error", "wall_s"}``. Never raises for a failed run."""
    from icml.runner import RunFailed, run

    for entry in reversed(task.get("sys_path") or ()):
        if entry not in sys.path and os.path.isdir(entry):
            sys.path.insert(0, entry)
    if "torch" not in sys.modules:
        _limit_threads(task.get("threads"))
    start = time.perf_counter()
    run_dir: list[Path] = []
    out: dict[str, Any] = {"name": task["name"], "status": "ok", "run_dir": "", "error": ""}
    try:
        key = (task["slug"], tuple(task.get("modules") or ()))
        host = _HOSTS.get(key)
        if host is None:
            from icml.loader import load_plugins

            host = _HOSTS[key] = load_plugins(only=[task["slug"]], modules=key[1])
        with _interruptible():
            run(task["slug"], task["capability"], config_file=task.get("config_file"),
                overrides=list(task["overrides"]), out=task["cell_dir"], seed=task["seed"],
                device=task["device"], dtype=task["dtype"], host=host, show_progress=False,
                threads=task.get("threads"), on_run_dir=run_dir.append)
    except RunFailed as exc:
        out.update(status="failed", error=str(exc.result.error or exc))
    except KeyboardInterrupt:
        out.update(status="interrupted", error="interrupted")
    except ConfigError as exc:  # a setting only the plugin could check: a failed result
        out.update(status="failed" if run_dir else "error", error=str(exc))
    except Exception as exc:  # noqa: BLE001 - the sweep goes on
        out.update(status="error", error=f"{type(exc).__name__}: {exc}")
    out["run_dir"] = str(run_dir[0]) if run_dir else ""
    out["wall_s"] = round(time.perf_counter() - start, 3)
    if _IN_POOL and os.getppid() != _PARENT:  # the sweep died: nobody waits for this worker
        os._exit(1)
    return out


# -- backends -----------------------------------------------------------------------------------
def cores() -> int:
    """CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


class _Local:
    name = "local"

    def __init__(self, workers: int, threads: int | None) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self._make = lambda: ProcessPoolExecutor(  # noqa: E731
            max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker, initargs=(threads,))
        self.pool = self._make()
        self.capacity = workers

    def submit(self, task: dict[str, Any]) -> Any:
        return self.pool.submit(run_cell, task)

    def wait(self, handles: Sequence[Any], timeout: float) -> list[Any]:
        from concurrent.futures import FIRST_COMPLETED, wait

        done, _ = wait(handles, timeout=timeout, return_when=FIRST_COMPLETED)
        return list(done)

    def result(self, handle: Any) -> dict[str, Any] | str:
        from concurrent.futures.process import BrokenProcessPool

        try:
            return handle.result()
        except BrokenProcessPool:
            if getattr(self.pool, "_broken", False):  # replace it once, not per lost future
                self.pool.shutdown(wait=False, cancel_futures=True)
                self.pool = self._make()
            return "its worker process died (killed, or out of memory)"
        except Exception as exc:  # noqa: BLE001
            return f"{type(exc).__name__}: {exc}"

    def interrupt(self, handles: Sequence[Any]) -> None:
        """Ctrl-C the workers (each running cell writes ``interrupted``), wait briefly."""
        import signal
        from concurrent.futures import wait

        procs = list((getattr(self.pool, "_processes", None) or {}).values())
        _, running = wait(handles, timeout=2)  # a terminal's Ctrl-C reached them already
        # No handles: Ctrl-C landed between a submit and its bookkeeping, so a cell may run
        # untracked; interrupt every worker (idle ones ignore SIGINT), then terminate them, or
        # the pool's shutdown would wait for that cell for ever.
        if running or not handles:
            for p in procs:
                with contextlib.suppress(OSError):
                    os.kill(p.pid, signal.SIGINT)
            if running:
                wait(running, timeout=30)
        for p in procs:
            with contextlib.suppress(Exception):
                if p.is_alive():
                    p.terminate()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class _Ray:
    name = "ray"

    def __init__(self, workers: int | None, threads: int, device: str,
                 address: str | None) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("--backend ray needs Ray: pip install 'icml-core[ray]'") from None
        import warnings

        warnings.filterwarnings("ignore", message=".*override accelerator visible devices",
                                category=FutureWarning)  # num_gpus=0 hides GPUs: intended
        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            if address and address.startswith("ray://"):  # Ray Client: few init options
                ray.init(address=address)
            elif address or os.environ.get("RAY_ADDRESS"):
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         logging_level="WARNING")
            else:
                ray.init(num_cpus=(workers or cores()) * threads, include_dashboard=False,
                         log_to_driver=False, logging_level="WARNING")
                self.started = True
        gpus = 1 if device.startswith("cuda") else 0
        self.remote = ray.remote(run_cell).options(num_cpus=threads, num_gpus=gpus,
                                                   max_retries=0)
        if workers is None:
            total = int(ray.cluster_resources().get("CPU", 1))
            workers = max(1, total // threads)
        self.capacity = workers

    def submit(self, task: dict[str, Any]) -> Any:
        return self.remote.remote(task)

    def wait(self, handles: Sequence[Any], timeout: float) -> list[Any]:
        done, _ = self.ray.wait(list(handles), num_returns=1, timeout=timeout)
        return list(done)

    def result(self, handle: Any) -> dict[str, Any] | str:
        try:
            return self.ray.get(handle)
        except Exception as exc:  # noqa: BLE001 - a dead worker or node
            return f"ray: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

    def interrupt(self, handles: Sequence[Any]) -> None:
        for h in handles:
            with contextlib.suppress(Exception):
                self.ray.cancel(h)
        with contextlib.suppress(Exception):
            self.ray.wait(list(handles), num_returns=len(handles), timeout=30)

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()


# -- the sweep ----------------------------------------------------------------------------------
def _check_out(out: Path) -> None:
    where = f"output folder {str(out)!r} (--out)"
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{where} is a file, not a folder: pass a folder path")
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            raise ConfigError(f"{where} lies under {str(parent)!r}, which is a file")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".probe.{os.getpid()}.{uuid.uuid4().hex[:6]}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"{where} is not writable: {exc.strerror or exc}") from None


def _same(a: Any, b: Any) -> bool:
    return json.dumps(jsonio.encode(a, strict=False), sort_keys=True) == \
        json.dumps(jsonio.encode(b, strict=False), sort_keys=True)


def sweep(slug: str, capability: str | None = None, *,
          grid: Mapping[str, Sequence[Any]] | Sequence[str] | None = None,
          seeds: Sequence[int] | str | int = (0,), out: str | Path = "sweeps",
          backend: str = "local", workers: int | None = None, threads: int | None = None,
          device: str = "auto", dtype: str = "float32", overrides: Sequence[str] = (),
          config_file: str | Path | None = None, address: str | None = None,
          modules: Sequence[str] = (), level: float = 0.95, n_boot: int = 2000,
          boot_seed: int = 0, plot: bool = True,
          on_cell: Callable[[CellResult, int, int], None] | None = None) -> SweepResult:
    """Run ``capability`` (default: the primary one) of plugin ``slug`` for every grid point and
    seed, each cell an ordinary run in ``out/<cell>/``, then write ``out/sweep.json`` and
    ``out/report.md`` and return the :class:`SweepResult`.

    ``grid`` maps config keys (dotted for nested) to values (``{"schedule.lr": [0.1, 0.2]}``)
    or is a list of ``"key=v1,v2"`` strings; ``seeds`` a list or ``"0-4"``; ``overrides`` are
    ``--set`` strings applied to every cell (the grid wins on the same key). See the module
    docstring for resuming, claims and the backends. ``on_cell(cell, done, total)`` is called as
    each cell ends (in this process). Raises :class:`~icml.config.ConfigError` (and the
    loader's errors) before any cell starts, and :class:`SweepInterrupted` on Ctrl-C/SIGTERM.
    Failed cells do not raise: check ``result.ok`` / ``result.count("failed")``.
    """
    from icml.config import to_dict
    from icml.loader import load_plugins
    from icml.runner import (
        DTYPES,
        _sigterm_as_interrupt,
        check_device,
        make_config,
        resolve_capability,
    )

    # 1. validate everything before anything runs
    if backend not in BACKENDS:
        raise ConfigError(f"--backend {backend!r}: use one of {', '.join(BACKENDS)}")
    for flag, value in (("--workers", workers), ("--threads", threads)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ConfigError(f"{flag} must be an integer >= 1, got {value!r}")
    if dtype not in DTYPES:
        raise ConfigError(f"dtype {dtype!r} is not supported: use one of {', '.join(DTYPES)}")
    check_device(device)
    grid_ = parse_grid(grid or {})
    seeds_ = parse_seeds(seeds)
    cells = expand(grid_, seeds_)
    out_ = Path(out)
    host = load_plugins(only=[slug], modules=list(modules))
    host.loaded(slug)
    capability = resolve_capability(host, slug, capability)
    base = [str(o) for o in overrides]
    configs: dict[str, dict[str, Any]] = {}
    for point in {c.point: c for c in cells}.values():
        try:
            cfg = make_config(host, slug, capability, None, config_file,
                              base + point.overrides())
        except ConfigError as exc:
            where = f"grid point {point.point}: " if grid_ else ""
            raise ConfigError(f"{where}{exc}") from None
        configs[point.point] = to_dict(cfg)
    _check_out(out_)
    if backend == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError("--backend ray needs Ray: pip install 'icml-core[ray]'") from None
    n_cores = cores()
    results = [CellResult(c.name, dict(c.params), c.seed) for c in cells]
    by_name = {r.name: r for r in results}

    def mismatch(r: CellResult) -> str:
        """Why the finished run in ``r``'s folder is not the run this sweep asks for."""
        data = _read_json(out_ / r.run_dir / "result.json") or {}
        if data.get("plugin") != slug or data.get("capability") != capability or \
                data.get("seed") != r.seed or \
                not _same(data.get("config"), configs[point_name(r.params)]):
            return (f"{out_ / r.run_dir} is a finished run with another plugin, capability, "
                    f"seed or config than this sweep's cell {r.name}: use another --out")
        return ""

    def reused(r: CellResult) -> None:
        r.reused = True
        problem = mismatch(r)
        if problem:
            r.status, r.error = "error", problem

    used: set[Any] = set()
    for r in results:  # a finished cell must be the run asked for, or nothing is mixed
        if _fill_from_disk(r, out_):
            r.reused = True
            problem = mismatch(r)
            if problem:
                raise ConfigError(problem)
            used.add((_read_json(out_ / r.run_dir / "result.json") or {}).get("threads"))
    if threads is None:  # a resumed sweep keeps its cells' thread count (comparable numbers)
        recorded = [t for t in used if isinstance(t, int) and t >= 1]
        threads = recorded[0] if len(used) == 1 and recorded else \
            max(1, n_cores // (workers or n_cores))
    result = SweepResult(slug, capability, out_, grid_, seeds_, results, [],
                         out_ / "sweep.json", out_ / "report.md")
    settings = {"backend": backend, "device": device, "dtype": dtype, "threads": threads,
                "config_file": str(config_file) if config_file else None}

    def finish() -> None:
        write_aggregate(result, overrides=base, settings=settings, level=level, n_boot=n_boot,
                        boot_seed=boot_seed, plot=plot)

    todo = deque(c for c in cells if not by_name[c.name].finished)
    total, done = len(cells), sum(r.finished for r in results)
    if not todo:
        finish()
        return result

    # 2. run what is left
    claims = Claims(out_)
    sys_path = [p for p in sys.path if p and os.path.isdir(p)]

    def task(c: Cell) -> dict[str, Any]:
        return {"name": c.name, "slug": slug, "capability": capability,
                "overrides": base + c.overrides(), "config_file": str(config_file)
                if config_file else None, "cell_dir": str(out_ / c.name), "seed": c.seed,
                "device": device, "dtype": dtype, "threads": threads,
                "modules": list(modules), "sys_path": sys_path}

    runner: _Local | _Ray | None = None
    in_flight: dict[Any, Cell] = {}
    waiting: list[Cell] = []
    try:
        with _sigterm_as_interrupt():
            if backend == "local":
                runner = _Local(min(workers or n_cores, len(todo)), threads)
            else:
                runner = _Ray(workers, threads, device, address)
            last_poll = time.monotonic()
            while todo or in_flight or waiting:
                while todo and len(in_flight) < runner.capacity:
                    c = todo.popleft()
                    r = by_name[c.name]
                    if _fill_from_disk(r, out_):  # finished meanwhile by another sweep
                        reused(r)
                        done += 1
                        if on_cell:
                            on_cell(r, done, total)
                        continue
                    if not claims.acquire(c.name):
                        waiting.append(c)
                        continue
                    if _fill_from_disk(r, out_):
                        claims.release(c.name)
                        reused(r)
                        done += 1
                        if on_cell:
                            on_cell(r, done, total)
                        continue
                    in_flight[runner.submit(task(c))] = c
                if in_flight:
                    finished = runner.wait(list(in_flight), timeout=0.5)
                else:
                    finished = []
                    time.sleep(0.25)
                for h in finished:
                    c = in_flight.pop(h)
                    r = by_name[c.name]
                    outcome = runner.result(h)
                    if not _fill_from_disk(r, out_):
                        if isinstance(outcome, str):
                            r.status, r.error = "error", outcome
                        else:
                            r.status = outcome["status"] if outcome["status"] in (
                                "interrupted", "error") else "error"
                            r.error = outcome.get("error") or "the run left no result.json"
                            r.run_dir = os.path.relpath(outcome["run_dir"], out_) \
                                if outcome.get("run_dir") else ""
                    if not isinstance(outcome, str):
                        r.wall_s = outcome.get("wall_s")
                    claims.release(c.name)
                    done += 1
                    if on_cell:
                        on_cell(r, done, total)
                if waiting and (not todo or time.monotonic() - last_poll > 2):
                    last_poll = time.monotonic()  # cells another sweep holds: look again
                    todo.extend(waiting)
                    waiting.clear()
                    if not in_flight:
                        time.sleep(0.25)
    except KeyboardInterrupt:
        handles = list(in_flight)
        if runner is not None:  # even without handles: see _Local.interrupt
            with contextlib.suppress(BaseException):
                runner.interrupt(handles)
        for c in in_flight.values():
            r = by_name[c.name]
            if not _fill_from_disk(r, out_):
                r.status, r.error = "interrupted", "interrupted"
        claims.release_all()
        with contextlib.suppress(Exception):
            finish()
        kept = sum(r.finished for r in results)
        raise SweepInterrupted(f"interrupted: {kept} of {total} cells finished and kept in "
                               f"{out_}; rerun the same sweep to resume", result) from None
    finally:
        claims.close()
        if runner is not None:
            with contextlib.suppress(Exception):
                runner.close()
    finish()
    return result


__all__ = ["BACKENDS", "CLAIM", "Cell", "CellResult", "Claims", "ITEMS_ARTIFACT", "SCHEMA",
           "SweepInterrupted", "SweepResult", "aggregate", "cell_name", "cores", "expand",
           "finished_run", "load", "parse_grid", "parse_seeds", "point_name", "render_report",
           "run_cell", "sweep", "write_items"]
