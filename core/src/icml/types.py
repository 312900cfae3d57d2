"""Typed objects passed across the hook boundary: plugin metadata, the run context, the result.

Plain dataclasses, no heavy imports: the CLI builds them before any plugin code runs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from icml.hookspecs import CAPABILITY_HOOKS

T = TypeVar("T")


@dataclass(frozen=True)
class Paper:
    """The paper a plugin implements."""

    title: str
    url: str
    authors: str = ""
    venue: str = "ICML 2026"
    bibtex: str = ""


@dataclass(frozen=True)
class PluginInfo:
    """What a plugin says about itself through ``icml_plugin_info``.

    ``capabilities`` lists the capability hooks it implements, its primary one first (the one
    ``icml run <slug>`` runs when no capability is named). ``configs`` maps each capability to a
    config dataclass whose fields carry defaults and help (see :func:`icml.config.option`).
    ``version`` is filled in by the core from the plugin's distribution when left empty.
    ``default_threads`` is the torch CPU thread count ``icml run`` uses when the user gives no
    ``--threads`` (tiny models often run fastest on one thread); ``None`` leaves torch's own
    choice. The user's ``--threads`` always wins, so plugins need no thread key of their own.
    """

    name: str
    title: str
    summary: str
    paper: Paper
    capabilities: tuple[str, ...]
    configs: dict[str, type] = field(default_factory=dict)
    version: str = ""
    api_version: int = 1
    default_threads: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "capabilities", tuple(self.capabilities))

    @property
    def primary(self) -> str:
        return self.capabilities[0]

    def problems(self) -> list[str]:
        """Every way this metadata breaks the contract, as fix-it sentences (empty if valid)."""
        found = []
        for name in ("name", "title", "summary"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                found.append(f"PluginInfo.{name} is empty: give a non-empty string")
        if len(self.summary) > 120:
            found.append("PluginInfo.summary is longer than 120 characters: keep it to one line")
        if not isinstance(self.paper, Paper) or not self.paper.url.startswith("http"):
            found.append("PluginInfo.paper must be an icml.Paper with an http(s) url")
        if not self.capabilities:
            found.append("PluginInfo.capabilities is empty: name at least one capability")
        for cap in self.capabilities:
            if cap not in CAPABILITY_HOOKS:
                found.append(
                    f"unknown capability {cap!r}: use one of {', '.join(CAPABILITY_HOOKS)}"
                )
            elif cap not in self.configs:
                found.append(f"no config for capability {cap!r}: "
                             f"add configs={{{cap!r}: YourConfig}}")
            elif not dataclasses.is_dataclass(self.configs[cap]):
                found.append(f"configs[{cap!r}] is not a dataclass: decorate it with @dataclass")
        for cap in self.configs:
            if cap not in self.capabilities:
                found.append(f"configs has {cap!r}, which is not in capabilities")
        dt = self.default_threads
        if dt is not None and (isinstance(dt, bool) or not isinstance(dt, int) or dt < 1):
            found.append(f"PluginInfo.default_threads is {dt!r}: give an int >= 1, or None "
                         "for torch's own choice")
        return found


#: Seconds between progress lines when stderr is not a terminal (logs, CI).
LOG_EVERY_S = 5.0

#: The statuses the core writes (a plugin returns "ok", the default).
STATUSES = ("ok", "failed", "interrupted", "running")


@dataclass
class Table:
    """A small table for the terminal summary and ``report.md``."""

    title: str
    columns: list[str]
    rows: list[list[Any]]

    def to_markdown(self) -> str:
        def cell(v: Any) -> str:
            if isinstance(v, float):
                return f"{v:.4g}"
            return str(v).replace("|", "\\|")

        lines = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |"]
        lines.append("|" + "|".join("---" for _ in self.columns) + "|")
        lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in self.rows]
        return "\n".join(lines)


@dataclass
class RunResult:
    """What a capability hook returns. The plugin fills ``metrics``, ``tables``, ``artifacts``
    and ``notes``; the core fills the rest (config, versions, seed, device, threads, timings) before
    writing ``result.json`` and ``report.md``.

    ``metrics`` are flat ``name -> number`` pairs (``nan``/``inf`` allowed: a diverged arm is a
    result); ``artifacts`` map a label to a path relative to the run folder (or absolute);
    ``notes`` is Markdown for the report. ``status`` is ``ok``, ``failed``, ``interrupted`` or
    ``running`` (a result file written while the run goes on). ``partial`` is true when the
    metrics and tables are only those the plugin recorded (:meth:`RunContext.record`) before the
    run failed or was interrupted.
    """

    metrics: dict[str, float] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    artifacts: dict[str, str] = field(default_factory=dict)
    notes: str = ""
    plugin: str = ""
    plugin_version: str = ""
    capability: str = ""
    status: str = "ok"
    error: str = ""
    partial: bool = False
    seed: int | None = None
    device: str = ""
    dtype: str = ""
    threads: int | None = None
    config: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    run_dir: str = ""

    def problems(self) -> list[str]:
        """Every way this result breaks the contract (empty if valid)."""
        found = []
        for k, v in self.metrics.items():
            if not isinstance(k, str):
                found.append(f"metric name {k!r} is not a string")
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                found.append(f"metric {k!r} is {type(v).__name__}, not a number: use float(...)")
        for t in self.tables:
            if not isinstance(t, Table):
                found.append("tables must hold icml.Table objects")
            elif any(len(r) != len(t.columns) for r in t.rows):
                found.append(f"table {t.title!r} has a row whose length differs from its columns")
        try:
            self.to_json()
        except (TypeError, ValueError) as exc:
            found.append(f"result does not serialise to JSON: {exc}")
        return found

    def to_dict(self) -> dict[str, Any]:
        """Plain values, floats kept as floats (non-finite ones too)."""
        return dataclasses.asdict(self)

    def to_json(self, *, strict: bool = True) -> str:
        """Standard JSON; a non-finite float anywhere becomes ``{"$float": "nan"|"inf"|"-inf"}``
        (see :mod:`icml.jsonio`). ``strict=False`` writes an unserialisable value as its repr
        instead of raising, so the core never loses a finished run to one bad value."""
        from icml.jsonio import dumps

        return dumps(self.to_dict(), strict=strict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunResult:
        """The inverse of :meth:`to_dict`; also accepts the decoded or raw JSON form."""
        from icml.jsonio import decode

        d = decode(dict(d))
        d["tables"] = [t if isinstance(t, Table) else Table(**t) for t in d.get("tables", [])]
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def from_json(cls, text: str) -> RunResult:
        """Read the text of a ``result.json``."""
        return cls.from_dict(json.loads(text))

    def to_markdown(self) -> str:
        lines = [f"# {self.plugin} {self.capability}", ""]
        lines.append(f"- status: {self.status}" + (f" ({self.error})" if self.error else ""))
        threads = self.threads if self.threads is not None else "torch default"
        lines.append(f"- seed: {self.seed}, device: {self.device}, dtype: {self.dtype}, "
                     f"threads: {threads}")
        if self.timings:
            lines.append("- time: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.timings.items()))
        lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in self.versions.items()))
        lines.append("")
        if self.metrics:
            lines.append(Table("Metrics", ["metric", "value"],
                               [[k, v] for k, v in self.metrics.items()]).to_markdown())
            lines.append("")
        for t in self.tables:
            lines += [t.to_markdown(), ""]
        if self.notes:
            lines += [self.notes.strip(), ""]
        for label, path in self.artifacts.items():
            if str(path).endswith(".png"):
                lines.append(f"![{label}]({path})")
            else:
                lines.append(f"- {label}: `{path}`")
        from icml.jsonio import dumps

        lines += ["", "## Config", "", "```json", dumps(self.config, strict=False), "```", ""]
        return "\n".join(lines)


@dataclass
class RunContext:
    """Everything a capability hook needs from the host besides its config.

    ``out_dir`` is the run's fresh folder (write artifacts there); ``device`` is a string such as
    ``"auto"``, ``"cpu"`` or ``"cuda:0"`` (resolve it with :meth:`torch_device`); ``dtype`` is a
    string such as ``"float32"`` (:meth:`torch_dtype`). ``threads``, when set, is the number of
    CPU threads torch uses during the run (the core sets it and restores the caller's value);
    :func:`icml.run` fills it from ``--threads`` or else the plugin's
    :attr:`PluginInfo.default_threads`. :meth:`record`, :meth:`record_row` and
    :meth:`record_table` keep the results of finished arms in ``partial``, which the core writes
    if the run later fails or is interrupted (``on_record`` is the core's writer).
    """

    out_dir: Path
    seed: int = 0
    device: str = "auto"
    dtype: str = "float32"
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("icml.run"))
    show_progress: bool = True
    threads: int | None = None
    on_record: Callable[[RunResult], None] | None = field(default=None, repr=False)
    partial: RunResult = field(default_factory=lambda: RunResult(status="running", partial=True),
                               repr=False)
    calls: dict[str, Any] = field(default_factory=dict, repr=False)

    # -- partial results: what survives a failure or Ctrl-C ---------------------------------
    def record(self, metrics: Mapping[str, float] | None = None, *,
               artifacts: Mapping[str, str] | None = None, notes: str = "") -> None:
        """Record results of a finished part of the run (an arm, a method, a size) as soon as
        it finishes. When the run later fails or is interrupted, the core writes everything
        recorded into ``result.json``/``report.md`` (``partial: true``); when the hook returns,
        its returned :class:`RunResult` is what counts. Each call also rewrites ``result.json``
        with ``status: running``, so even a killed run leaves its finished arms on disk."""
        if metrics:
            self.partial.metrics.update(metrics)
        if artifacts:
            self.partial.artifacts.update(artifacts)
        if notes:
            self.partial.notes = (self.partial.notes + "\n\n" + notes).strip()
        self._recorded()

    def record_row(self, title: str, columns: Sequence[str], row: Sequence[Any]) -> None:
        """Append one row to the recorded table ``title`` (created with ``columns`` on first
        use; later calls must pass the same columns)."""
        cols = list(columns)
        if len(row) != len(cols):
            raise ValueError(f"record_row({title!r}): row has {len(row)} cells, columns "
                             f"{len(cols)}")
        for t in self.partial.tables:
            if t.title == title:
                if t.columns != cols:
                    raise ValueError(f"record_row({title!r}): columns {cols} differ from the "
                                     f"table's {t.columns}")
                t.rows.append(list(row))
                break
        else:
            self.partial.tables.append(Table(title, cols, [list(row)]))
        self._recorded()

    def record_table(self, table: Table) -> None:
        """Record a whole table (replacing a recorded one with the same title)."""
        self.partial.tables = [t for t in self.partial.tables if t.title != table.title]
        self.partial.tables.append(table)
        self._recorded()

    def _recorded(self) -> None:
        if self.on_record is not None:
            self.on_record(self.partial)

    def path(self, name: str) -> Path:
        """A path inside the run folder (parents created)."""
        p = self.out_dir / name
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def torch_device(self) -> Any:
        """The ``torch.device`` for ``self.device``; ``"auto"`` picks CUDA when available."""
        import torch

        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    def torch_dtype(self) -> Any:
        """The ``torch.dtype`` named by ``self.dtype`` (``float32``, ``bfloat16``, ...)."""
        import torch

        dt = getattr(torch, self.dtype, None)
        if not isinstance(dt, torch.dtype):
            raise ValueError(f"dtype {self.dtype!r} is not a torch dtype: use float32, "
                             "float64, bfloat16 or float16")
        return dt

    def progress(self, iterable: Iterable[T], total: int | None = None,
                 desc: str = "") -> Iterator[T]:
        """Iterate with a progress bar (on a terminal) and a log line at the end."""
        if total is None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        start = time.perf_counter()
        if self.show_progress and sys.stderr.isatty():
            from rich.progress import track

            yield from track(iterable, total=total, description=desc or "working",
                             transient=True)
        else:  # logs and CI: a line every LOG_EVERY_S seconds instead of a bar
            last = start
            for i, item in enumerate(iterable, 1):
                yield item
                now = time.perf_counter()
                if self.show_progress and now - last >= LOG_EVERY_S:
                    last = now
                    of = f"/{total} ({100 * i / total:.0f}%)" if total else ""
                    self.logger.info("%s: %d%s after %.0f s", desc or "working", i, of,
                                     now - start)
        self.logger.info("%s done in %.1f s", desc or "step", time.perf_counter() - start)

    @contextmanager
    def step(self, desc: str) -> Iterator[None]:
        """A spinner for a step without a natural loop, e.g. a solve or a model build."""
        start = time.perf_counter()
        if self.show_progress and sys.stderr.isatty():
            from rich.console import Console

            with Console(stderr=True).status(desc):
                yield
        elif self.show_progress:  # logs and CI: a heartbeat line every LOG_EVERY_S seconds
            import threading

            done = threading.Event()

            def beat() -> None:
                while not done.wait(LOG_EVERY_S):
                    self.logger.info("%s: still working after %.0f s", desc,
                                     time.perf_counter() - start)

            thread = threading.Thread(target=beat, name="icml-heartbeat", daemon=True)
            thread.start()
            try:
                yield
            finally:
                done.set()
                thread.join()
        else:
            yield
        self.logger.info("%s done in %.1f s", desc, time.perf_counter() - start)

    # -- calls to outside systems: a run whose every call failed is a failed run -------------
    def call_ok(self) -> None:
        """Count one successful call to a model endpoint, agent or tool."""
        self.calls["ok"] = self.calls.get("ok", 0) + 1

    def call_failed(self, error: str | BaseException) -> None:
        """Count one failed call (kept as the run's error if no call succeeds). The core marks
        a run whose calls all failed ``failed``: a setup error (an unreachable endpoint, a
        missing agent binary) is not a measurement of zero."""
        self.calls["failed"] = self.calls.get("failed", 0) + 1
        if "first_error" not in self.calls:
            text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
            self.calls["first_error"] = text

    def calls_problem(self) -> str:
        """Why the run cannot count as ok ('' when at least one call worked or none was made)."""
        failed, ok = self.calls.get("failed", 0), self.calls.get("ok", 0)
        if failed and not ok:
            return (f"every one of the {failed} call(s) to the system under test failed; the "
                    f"first: {self.calls['first_error']}")
        return ""
