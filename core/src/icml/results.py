"""Results files: the committed evidence behind every README table, and how it is checked.

A plugin's README never carries a typed number. Each table is rendered from a JSON file under
``plugins/<slug>/results/`` that the command printed beside the table wrote; ``icml reproduce``
reruns that command and compares. The file records what a reader needs to judge the numbers::

    {"schema": "icml.results/1", "plugin": "dxpp", "name": "default",
     "command": "icml run dxpp --save-results plugins/dxpp/results/default.json",
     "quick": true,                       # part of `icml reproduce --quick`
     "tolerance": {"*": {"abs": 0.0}},     # declared before the rerun; see below
     "tables": [{"name": ..., "title": ..., "columns": [...], "rows": [[...]],
                 "formats": {"column": ".3f"}}],
     "seeds": [0], "threads": 1, "cpu": "AMD EPYC", "cpu_flags": ["avx2", "avx512_bf16", ...],
     "cpu_capability": "AVX512", "versions": {...},
     "wall_s": 38.2, "cpu_s": 37.9, "load": {"start": 1.2, "end": 2.4},
     "created": "2026-12-05T01:02:03+00:00"}

``cpu_flags`` lists the instruction-set extensions that decide which BLAS/oneDNN kernels run
(:data:`KERNEL_FLAGS`): machines with one CPU model name can differ there, and float results
with them (bfloat16 is fast only with ``avx512_bf16``/``amx_bf16``, emulated and slow without).
``cpu_capability`` is the kernel set torch actually dispatched to (``AVX512``, ``AVX2``,
``DEFAULT``; ``ATEN_CPU_CAPABILITY`` can force a lower one), recorded when the writing process had
imported torch, else ``None``.

``load`` is the machine's 1-minute load average when the work started (the :class:`Clock`) and
when the file was written: clock readings and CPU-time budgets depend on it on a shared machine.

Cells are numbers, strings, ``None`` or an estimate ``{"value", "lo", "hi", ...}`` (what
:meth:`icml.stats.Estimate.to_dict` gives), rendered ``value [lo, hi]``.

**What a rerun must give.** A column without a declared tolerance is *exact at the precision
the README shows*: the rerun's rendered cell must be the same text. (Raw values are kept at full
precision; ``icml reproduce --raw`` compares them bit for bit, the check for 1 vs 2 threads on one
machine.) A column with a tolerance ``{"abs": a, "rel": r, "why": "..."}`` (or ``"*"`` for every
numeric column) passes when ``|rerun - committed| <= a + r * |committed|`` for the value and, for
estimates, both CI bounds. ``{"timing": true, "why": "..."}`` marks a clock reading (ms, tokens/s):
it depends on the machine and its load, so it is shown but never compared; speed claims rest on
ratios measured in one run, in benchmarks. Tolerances come from seed spread and are justified
in ``why``; a file rewritten by its command keeps the tolerance it declared.

**Where files go.** :func:`write` writes to the path it is given unless ``ICML_RESULTS_DIR`` is
set: then to that folder under the same file name. ``icml reproduce`` sets it, so a rerun never
touches the committed file. ``ICML_THREADS`` (set by ``icml reproduce --threads N``) is the torch
thread count for commands that do not name one: :func:`apply_threads` and ``icml run`` honour it.

**Pending tables.** A typed table whose command has not been rerun yet sits right under
``<!-- pending: what is missing, how long the rerun takes -->`` with visible prose saying so;
the check lists it as pending, not as rendered. ``icml render --check`` prints every pending
table, so the list is visible and can only shrink by rerunning.

**README blocks.** A rendered table sits between two comments::

    <!-- results: default.json -->            (or: <!-- results: bench.json table=main -->)
    | ... |
    <!-- /results -->

:func:`render_readme` rewrites every block from its file; :func:`readme_problems` lists blocks
that differ from their file and numeric tables outside any block (sections about components,
configuration, installation, the CLI and examples are exempt: their numbers are settings).

Light: no torch, numpy or typer at import time.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib.metadata as md
import importlib.util
import math
import os
import platform
import re
import resource
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from icml import jsonio

SCHEMA = "icml.results/1"
RESULTS_DIR_ENV = "ICML_RESULTS_DIR"
THREADS_ENV = "ICML_THREADS"
DEFAULT_FORMAT = ".4g"
_BLOCK = re.compile(r"<!-- results: (?P<file>[\w.\-/]+)(?: table=(?P<table>[\w.\-]+))? -->\n"
                    r"(?P<body>.*?)<!-- /results -->", re.S)
#: The longest wall time (s) of a job whose file `icml run --save-results` marks quick.
QUICK_WALL_S = 120.0
# A section is exempt when one of these words opens its heading (after at most four words:
# "Using the CLI", "Exit statuses of the CLI"); a word deep inside a results heading ("additions
# with 4 options") or a substring ("Euclidean", "multikey", "unchanged") does not exempt it.
_EXEMPT_WORDS = (r"(?:components?|config\w*|install\w*|examples?|cli|choices?|deviations?|"
                 r"usage|keys?|options?|tests?|testing|citation|changes|changelog)")
_EXEMPT_SECTION = re.compile(rf"^(?:\S+\s+){{0,4}}?\(?{_EXEMPT_WORDS}\b", re.I)
_NUMERIC = re.compile(r"^[~<>≈±+\-−]?\s*\d[\d,]*(\.\d+)?(e[-+]?\d+)?\s*(%|x|×|s|ms)?"
                      r"(\s*\[.*\])?(\s*±.*)?$", re.I)


class ResultsError(ValueError):
    """A results file or README block that is malformed, missing or out of date."""


# -- tables --------------------------------------------------------------------------------------
def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:32].rstrip("-") or "table"


def make_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], *,
               name: str | None = None, formats: Mapping[str, str] | None = None,
               ) -> dict[str, Any]:
    """One table of a results file. ``formats`` maps a column to a format spec (default
    ``.4g``) applied to its numbers and estimates when the table is rendered."""
    columns = [str(c) for c in columns]
    rows = [list(r) for r in rows]
    for i, row in enumerate(rows):
        if len(row) != len(columns):
            raise ResultsError(f"table {title!r} row {i} has {len(row)} cells, "
                               f"{len(columns)} columns")
    unknown = set(formats or {}) - set(columns)
    if unknown:
        raise ResultsError(f"table {title!r}: formats name unknown columns {sorted(unknown)}")
    return {"name": name or _slug(title), "title": title, "columns": columns,
            "rows": [[_plain(c) for c in row] for row in rows],
            "formats": dict(formats or {})}


def _plain(cell: Any) -> Any:
    if dataclasses.is_dataclass(cell) and not isinstance(cell, type):
        to_dict = getattr(cell, "to_dict", None)
        return to_dict() if callable(to_dict) else dataclasses.asdict(cell)
    return cell


def _is_estimate(cell: Any) -> bool:
    return isinstance(cell, dict) and "value" in cell


def render_cell(cell: Any, fmt: str = DEFAULT_FORMAT) -> str:
    """A cell as the README shows it."""
    if cell is None:
        return "-"
    if isinstance(cell, bool):
        return str(cell)
    if isinstance(cell, (int, float)):
        return _num(cell, fmt)
    if _is_estimate(cell):
        text = _num(cell["value"], fmt)
        if cell.get("lo") is not None and cell.get("hi") is not None:
            text += f" [{_num(cell['lo'], fmt)}, {_num(cell['hi'], fmt)}]"
        return text
    return str(cell).replace("|", "\\|").replace("\n", " ")


def _num(x: float | int, fmt: str) -> str:
    """``fmt`` applied to ``x``; the default (``.4g``) writes ints whole and floats from 1,000 to
    10**15 as whole numbers rather than in e-notation (``20410``, not ``2.041e+04``)."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if fmt == DEFAULT_FORMAT:
        if isinstance(x, int) and not isinstance(x, bool):
            return str(x)
        if 1e3 <= abs(x) < 1e15:
            return f"{x:.0f}"
    return format(x, fmt)


def render_table(table: Mapping[str, Any]) -> str:
    """A results-file table as Markdown (header, rule, rows; no title)."""
    cols = table["columns"]
    fmts = table.get("formats", {})
    lines = ["| " + " | ".join(str(c).replace("|", "\\|") for c in cols) + " |",
             "|" + "|".join("---" for _ in cols) + "|"]
    for row in table["rows"]:
        lines.append("| " + " | ".join(render_cell(v, fmts.get(c, DEFAULT_FORMAT))
                                       for c, v in zip(cols, row)) + " |")
    return "\n".join(lines)


def caption(data: Mapping[str, Any], file_name: str) -> str:
    """The line under a rendered table: the command that made it, where, and how long."""
    threads = data.get("threads")
    where = file_name if "/" in file_name else f"results/{file_name}"
    bits = [f"`{data.get('command', '?')}`", where]
    if data.get("cpu"):
        bits.append(str(data["cpu"]))
    if threads:
        bits.append(f"{threads} thread{'s' if threads != 1 else ''}")
    if data.get("wall_s") is not None:
        bits.append(f"{_duration(data['wall_s'])} wall")
    load = data.get("load") or {}
    if load.get("start") is not None and load.get("end") is not None:
        bits.append(f"load {float(load['start']):.1f} to {float(load['end']):.1f}")
    return "Made by " + " · ".join(bits)


def _duration(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def find_table(data: Mapping[str, Any], name: str | None) -> Mapping[str, Any]:
    tables = data.get("tables", [])
    if name is None:
        if len(tables) != 1:
            raise ResultsError(f"{data.get('name')}: has {len(tables)} tables; name one with "
                               f"table=NAME ({', '.join(t['name'] for t in tables)})")
        return tables[0]
    for t in tables:
        if t["name"] == name:
            return t
    raise ResultsError(f"{data.get('name')}: no table {name!r} "
                       f"(has {', '.join(t['name'] for t in tables) or 'none'})")


def render_block(data: Mapping[str, Any], file_name: str, table: str | None = None) -> str:
    """The body of a README results block."""
    return render_table(find_table(data, table)) + "\n\n" + caption(data, file_name) + "\n"


# -- environment ----------------------------------------------------------------------------------
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``, else ``platform.processor()``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: Instruction-set extensions that change which matmul kernels run (x86 and Arm names).
KERNEL_FLAGS = frozenset({
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
    "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8",
    "asimd", "asimdhp", "asimddp", "bf16", "i8mm", "sve", "sve2", "sme",
})


def cpu_flags() -> list[str]:
    """The CPU's kernel-relevant instruction-set extensions (:data:`KERNEL_FLAGS`, sorted), from
    ``/proc/cpuinfo``'s ``flags`` (x86) or ``Features`` (Arm) line; empty where it is absent."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            return sorted(set(value.split()) & KERNEL_FLAGS)
    return []


def cpu_capability() -> str | None:
    """torch's CPU kernel set (``torch.backends.cpu.get_cpu_capability()``) if this process has
    imported torch (never imported here: results files stay light to write), else ``None``."""
    torch = sys.modules.get("torch")
    try:
        return str(torch.backends.cpu.get_cpu_capability()) if torch is not None else None
    except AttributeError:  # torch < 2.1
        return None


def machine_note(committed: Mapping[str, Any], fresh: Mapping[str, Any]) -> str:
    """One line saying how the rerun's machine differs from the committed file's (CPU model,
    kernel flags), or ``""``: a differing cell may then come from other kernels, not the code."""
    bits = []
    if committed.get("cpu") and fresh.get("cpu") and committed["cpu"] != fresh["cpu"]:
        bits.append(f"CPU {committed['cpu']!r} then, {fresh['cpu']!r} now")
    old_cap, new_cap = committed.get("cpu_capability"), fresh.get("cpu_capability")
    if old_cap and new_cap and old_cap != new_cap:
        bits.append(f"torch kernels {old_cap} then, {new_cap} now")
    if "cpu_flags" in committed and "cpu_flags" in fresh:
        old, new = set(committed["cpu_flags"]), set(fresh["cpu_flags"])
        if old != new:
            diff = [f"+{f}" for f in sorted(new - old)] + [f"-{f}" for f in sorted(old - new)]
            bits.append("kernel flags " + " ".join(diff))
    return ("the rerun's machine differs from the committed file's: " + "; ".join(bits)
            + " (float kernels differ with them)") if bits else ""


#: The folder (under a results folder) of per-machine reference copies: ``machines/<key>/``.
MACHINES_DIR = "machines"


def machine_key(data: Mapping[str, Any] | None = None) -> str:
    """The name of a machine's reference-copy folder: its CPU model and a short hash of its
    kernel flags (of a results file's ``cpu``/``cpu_flags``, or of this machine). Two machines
    with one key run the same float kernels as far as the file can tell."""
    import hashlib

    cpu = (data or {}).get("cpu") if data is not None else cpu_model()
    flags = (data or {}).get("cpu_flags") if data is not None else cpu_flags()
    digest = hashlib.sha256(",".join(sorted(flags or [])).encode()).hexdigest()[:8]
    return f"{_slug(str(cpu or 'unknown'))}-{digest}"


def machine_copy(path: str | Path, key: str) -> Path:
    """Where the reference copy of results file ``path`` for machine ``key`` lives:
    ``<results>/machines/<key>/<name>.json``.

    Float kernels differ between CPU models (and flags), and a training run that is
    bit-identical at 1 and 2 threads on one machine can end elsewhere on another. The README's
    tables come from the main file; a reference copy is the same command's output on another
    machine, committed with ``icml reproduce --record-machine`` once its conclusions were
    read, so ``icml reproduce`` on that machine checks the code against it bit for bit as shown
    instead of failing on every kernel difference. The main file stays the evidence."""
    path = Path(path)
    return path.parent / MACHINES_DIR / key / path.name


def _versions(plugin: str | None) -> dict[str, str]:
    out = {"python": platform.python_version()}
    names = ["icml-core"] + ([f"icml-{plugin}"] if plugin else []) + \
        ["torch", "transformers", "numpy"]
    for name in names:
        try:
            out[name] = _version_of(name)
        except (md.PackageNotFoundError, ValueError):
            pass
    return out


def _version_of(name: str) -> str:
    """The installed version of distribution ``name``; for an editable install, the version
    its source tree's ``pyproject.toml`` declares now (the installed metadata keeps the version
    of the last ``pip install -e``, so a results file written after a version bump would record
    the old one)."""
    dist = md.distribution(name)
    version = dist.version
    try:
        import json
        from urllib.parse import unquote, urlparse

        info = json.loads(dist.read_text("direct_url.json") or "null")
        if info and (info.get("dir_info") or {}).get("editable"):
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            source = Path(unquote(urlparse(info["url"]).path)) / "pyproject.toml"
            project = tomllib.loads(source.read_text(encoding="utf-8")).get("project", {})
            if project.get("name", "").replace("_", "-").lower() == name.lower():
                version = str(project.get("version", version))
    except Exception:  # noqa: BLE001 - provenance only: fall back to the installed metadata
        pass
    return version


def _torch_threads() -> int | None:
    import sys

    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


def env_threads() -> int | None:
    """The thread count ``ICML_THREADS`` asks for (``icml reproduce --threads``), or None."""
    value = os.environ.get(THREADS_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ResultsError(f"{THREADS_ENV}={value!r} is not a thread count >= 1")
    return int(value)


def apply_threads(default: int | None = None) -> int | None:
    """Set torch's CPU threads for a benchmark script: ``ICML_THREADS`` if set, else
    ``default`` (None leaves torch's choice). Returns the count in force."""
    n = env_threads() or default
    if n is not None:
        import torch

        torch.set_num_threads(n)
    return n


def load_average() -> float | None:
    """The machine's 1-minute load average (``os.getloadavg``), or None where unavailable.
    Recorded in results files: on a shared machine, clock readings and budgets depend on it."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


class Clock:
    """Wall and CPU time (this process and its children) from construction."""

    def __init__(self) -> None:
        self.wall0 = time.perf_counter()
        self.cpu0 = self._cpu()
        #: The machine's 1-minute load average when the work started (None where unknown).
        self.load0 = load_average()

    @staticmethod
    def _cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    def wall(self) -> float:
        return time.perf_counter() - self.wall0

    def cpu(self) -> float:
        return self._cpu() - self.cpu0


# -- files ----------------------------------------------------------------------------------------
def target_path(path: str | Path) -> Path:
    """Where :func:`write` puts ``path``: redirected into ``ICML_RESULTS_DIR`` when set."""
    p = Path(path)
    redirect = os.environ.get(RESULTS_DIR_ENV)
    return Path(redirect) / p.name if redirect else p


def write(path: str | Path, tables: Sequence[Mapping[str, Any]], *, command: str,
          plugin: str | None = None, seeds: Sequence[int] = (), quick: bool | None = False,
          tolerance: Mapping[str, Any] | None = None, clock: Clock | None = None,
          threads: int | None = None, metrics: Mapping[str, Any] | None = None,
          notes: str = "") -> Path:
    """Write a results file (atomically) and return its path.

    ``command`` is the shell command, run from the repository root, that writes this file: what
    the README prints and ``icml reproduce`` reruns. ``tolerance`` is kept from the existing file
    when not given (it is declared before a rerun, not fitted after). ``clock`` (a :class:`Clock`
    started with the work) gives wall and CPU time. ``quick=None`` keeps the existing file's
    flag, else marks the file quick when ``clock`` measured at most :data:`QUICK_WALL_S`
    (``icml run --save-results`` does this: a 17-minute job is not part of ``--quick``).
    """
    if not tables:
        raise ResultsError("a results file needs at least one table")
    names = [t["name"] for t in tables]
    if len(set(names)) != len(names):
        raise ResultsError(f"table names repeat: {names}")
    out = target_path(path)
    if quick is None:
        quick = clock is not None and clock.wall() <= QUICK_WALL_S
        if Path(path).is_file():
            try:
                quick = bool(load(path).get("quick"))
            except ResultsError:
                pass
    if tolerance is None and Path(path).is_file():
        try:
            tolerance = load(path).get("tolerance")
        except ResultsError:
            tolerance = None
    check_tolerance(tolerance or {})
    data: dict[str, Any] = {
        "schema": SCHEMA, "plugin": plugin, "name": Path(path).stem, "command": command,
        "quick": bool(quick), "tolerance": dict(tolerance or {}), "tables": list(tables),
        "seeds": list(seeds), "threads": threads if threads is not None else _torch_threads(),
        "cpu": cpu_model(), "cpu_flags": cpu_flags(),
        "cpu_capability": cpu_capability(), "versions": _versions(plugin),
        "wall_s": round(clock.wall(), 2) if clock else None,
        "cpu_s": round(clock.cpu(), 2) if clock else None,
        "load": {"start": clock.load0 if clock else None, "end": load_average()},
        "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    }
    if metrics:
        data["metrics"] = dict(metrics)
    if notes:
        data["notes"] = notes
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(jsonio.dumps(data) + "\n", encoding="utf-8")
    tmp.replace(out)
    return out


def load(path: str | Path) -> dict[str, Any]:
    """Read and check a results file."""
    p = Path(path)
    try:
        data = jsonio.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"no results file {p}") from None
    except ValueError as exc:
        raise ResultsError(f"{p} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ResultsError(f"{p} is not a results file (schema {SCHEMA!r} expected)")
    for key in ("command", "tables"):
        if not data.get(key):
            raise ResultsError(f"{p} has no {key!r}")
    check_tolerance(data.get("tolerance") or {}, where=str(p))
    return data


def check_tolerance(tol: Mapping[str, Any], where: str = "tolerance") -> None:
    for col, spec in tol.items():
        if not isinstance(spec, Mapping) or not set(spec) <= {"abs", "rel", "why", "timing"} \
                or not ({"abs", "rel", "timing"} & set(spec)):
            raise ResultsError(f"{where}: tolerance for {col!r} must be "
                               '{"abs": x, "rel": y, "why": "..."} (abs and/or rel), or '
                               '{"timing": true, "why": "..."} for a clock reading')
        if "timing" in spec and spec["timing"] is not True:
            raise ResultsError(f"{where}: tolerance {col!r}.timing must be true")
        for k in ("abs", "rel"):
            v = spec.get(k, 0.0)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ResultsError(f"{where}: tolerance {col!r}.{k} must be a number >= 0")
        if not str(spec.get("why", "")).strip():
            raise ResultsError(f"{where}: tolerance for {col!r} needs a 'why' (its source: "
                               "the seed spread it was measured from)")


# -- comparison -----------------------------------------------------------------------------------
@dataclasses.dataclass
class Diff:
    """One cell that a rerun did not give again."""

    table: str
    row: str
    column: str
    committed: str
    rerun: str
    allowed: str

    def as_row(self) -> list[str]:
        return [self.table, self.row, self.column, self.committed, self.rerun, self.allowed]


def _numbers(cell: Any) -> list[float] | None:
    if isinstance(cell, bool):
        return None
    if isinstance(cell, (int, float)):
        return [float(cell)]
    if _is_estimate(cell):
        return [float(cell[k]) for k in ("value", "lo", "hi") if cell.get(k) is not None]
    return None


def _close(a: float, b: float, spec: Mapping[str, float]) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= spec.get("abs", 0.0) + spec.get("rel", 0.0) * abs(a)


def compare(committed: Mapping[str, Any], rerun: Mapping[str, Any], *,
            raw: bool = False) -> list[Diff]:
    """Every cell of ``committed`` that ``rerun`` does not reproduce (see the module docstring
    for what counts); ``raw`` demands bit-equal raw values everywhere."""
    tol = committed.get("tolerance") or {}
    diffs: list[Diff] = []
    theirs = {t["name"]: t for t in rerun.get("tables", [])}
    for table in committed["tables"]:
        name = table["name"]
        other = theirs.get(name)
        if other is None:
            diffs.append(Diff(name, "-", "-", "table", "missing", "exact"))
            continue
        if list(other["columns"]) != list(table["columns"]):
            diffs.append(Diff(name, "-", "columns", ", ".join(table["columns"]),
                              ", ".join(other["columns"]), "exact"))
            continue
        if len(other["rows"]) != len(table["rows"]):
            diffs.append(Diff(name, "-", "rows", str(len(table["rows"])),
                              str(len(other["rows"])), "exact"))
        fmts = table.get("formats", {})
        for i, (mine, yours) in enumerate(zip(table["rows"], other["rows"])):
            label = render_cell(mine[0]) if mine else str(i)
            for col, a, b in zip(table["columns"], mine, yours):
                fmt = fmts.get(col, DEFAULT_FORMAT)
                spec = tol.get(col, tol.get("*"))
                na, nb = _numbers(a), _numbers(b)
                if spec is not None and spec.get("timing"):
                    continue  # a clock reading: machine- and load-dependent, never compared
                if raw:
                    ok = jsonio.dumps(a) == jsonio.dumps(b)
                    allowed = "bit-equal"
                elif spec is not None and na is not None and nb is not None and \
                        len(na) == len(nb):
                    ok = all(_close(x, y, spec) for x, y in zip(na, nb))
                    allowed = " ".join(f"{k}={spec[k]:g}" for k in ("abs", "rel") if k in spec)
                else:
                    ok = render_cell(a, fmt) == render_cell(b, fmt)
                    allowed = "as shown"
                if not ok:
                    diffs.append(Diff(name, label, col, render_cell(a, fmt),
                                      render_cell(b, fmt), allowed))
    return diffs


# -- README ---------------------------------------------------------------------------------------
def render_readme(readme: str | Path, results_dir: str | Path | None = None, *,
                  check: bool = False) -> list[str]:
    """Rewrite every results block of ``readme`` from its file (``check``: only report).
    Returns one line per block that was (or would be) changed or could not be rendered."""
    path = Path(readme)
    rdir = Path(results_dir) if results_dir else path.parent / "results"
    text = path.read_text(encoding="utf-8")
    problems: list[str] = []
    cache: dict[str, dict[str, Any]] = {}

    def sub(m: re.Match[str]) -> str:
        file_name, table = m.group("file"), m.group("table")
        head = m.group(0).split("\n", 1)[0]
        try:
            if file_name not in cache:
                cache[file_name] = load(rdir / file_name)
            shown = f"benchmarks/results/{file_name}" if _is_core_results(rdir) else file_name
            body = render_block(cache[file_name], shown, table)
        except ResultsError as exc:
            problems.append(f"{path}: {head}: {exc}")
            return m.group(0)
        if body != m.group("body"):
            problems.append(f"{path}: {head} differs from {rdir / file_name}")
        return f"{head}\n{body}<!-- /results -->"

    new = _BLOCK.sub(sub, text)
    if not check and new != text:
        path.write_text(new, encoding="utf-8")
    return problems


_PENDING = re.compile(r"^<!-- pending: (?P<why>.+?) -->$")


def unrendered_tables(text: str, *, pending: list[str] | None = None) -> list[str]:
    """Markdown tables with numeric cells outside results blocks, outside exempt sections:
    one line each (heading and first numeric cell).

    A table right under ``<!-- pending: WHY -->`` (a typed table whose command has not yet been
    rerun to write its results file; WHY says what is missing and how long the rerun takes) is
    not reported here but appended to ``pending``, so `icml render --check` can list it: the
    README must say so in visible prose too."""
    stripped = _BLOCK.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    found, heading, in_code = [], "", False
    lines = stripped.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif not in_code and line.lstrip().startswith("|"):
            start = i
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                i += 1
            body = lines[start + 2:i]  # skip header and rule
            exempt = _EXEMPT_SECTION.search(heading)
            above = next((ln.strip() for ln in reversed(lines[:start]) if ln.strip()), "")
            marked = _PENDING.match(above)
            if marked and not exempt:
                if pending is not None:
                    pending.append(f"line {start + 1} (under '{heading}'): pending: "
                                   f"{marked.group('why')}")
            elif not exempt:
                cells = [c.strip() for row in body for c in row.strip().strip("|").split("|")]
                numeric = [c for c in cells if _NUMERIC.match(c)]
                if numeric:
                    found.append(f"line {start + 1} (under '{heading}'): numeric table outside "
                                 f"a results block, e.g. {numeric[0]!r}")
            continue
        i += 1
    return found


def readme_problems(readme: str | Path, results_dir: str | Path | None = None, *,
                    pending: list[str] | None = None) -> list[str]:
    """Blocks out of date with their files, plus numeric tables outside any block (tables
    marked pending go to ``pending`` instead)."""
    path = Path(readme)
    problems = render_readme(path, results_dir, check=True)
    waiting: list[str] = []
    problems += [f"{path}: {p}" for p in unrendered_tables(path.read_text(encoding="utf-8"),
                                                           pending=waiting)]
    if pending is not None:
        pending += [f"{path}: {p}" for p in waiting]
    return problems


# -- where a plugin's results live ----------------------------------------------------------------
CORE_SLUG = "core"  # the repository's own benchmarks: benchmarks/results, the root README


def _core_results_dir() -> Path:
    import icml

    for base in (Path(icml.__file__).resolve().parents[3], Path.cwd(), *Path.cwd().parents):
        if (base / "benchmarks").is_dir() and (base / "core" / "pyproject.toml").is_file():
            return base / "benchmarks" / "results"  # may not exist before the first file
    raise ResultsError("no results folder for the repository's own benchmarks: expected "
                       "benchmarks/ beside core/ in a source checkout")


def results_dir(slug: str) -> Path:
    """``plugins/<slug>/results`` of the plugin's source tree (found from its installed
    package, else under the current directory); ``core`` names the repository's own
    ``benchmarks/results`` (tables in the root README)."""
    if slug == CORE_SLUG:
        return _core_results_dir()
    spec = importlib.util.find_spec(f"icml_{slug.replace('-', '_')}")
    if spec is not None and spec.origin:
        candidate = Path(spec.origin).resolve().parents[2] / "results"
        if candidate.is_dir():
            return candidate
    for base in (Path.cwd(), *Path.cwd().parents):
        candidate = base / "plugins" / slug / "results"
        if candidate.is_dir():
            return candidate
    raise ResultsError(f"no results folder for {slug!r}: expected plugins/{slug}/results in a "
                       "source checkout (results files are not shipped in wheels)")


def _is_core_results(rdir: Path) -> bool:
    rdir = rdir.resolve()
    return rdir.parent.name == "benchmarks" and (rdir.parents[1] / "core").is_dir()


def repo_root(rdir: Path) -> Path:
    """The repository root of a ``plugins/<slug>/results`` (or ``benchmarks/results``) folder:
    where commands run."""
    return rdir.resolve().parents[1 if _is_core_results(rdir) else 2]


def readme_of(rdir: Path) -> Path:
    """The README whose tables a results folder feeds: the plugin's, or the root README for
    ``benchmarks/results``."""
    return repo_root(rdir) / "README.md" if _is_core_results(rdir) else rdir.parent / "README.md"


def files(rdir: Path, names: Sequence[str] = (), *, quick: bool = False) -> list[Path]:
    """The results files of a folder, by name (with or without ``.json``) or all; ``quick``
    keeps those marked quick."""
    paths = sorted(p for p in rdir.glob("*.json"))
    if names:
        wanted = {n if n.endswith(".json") else f"{n}.json" for n in names}
        missing = wanted - {p.name for p in paths}
        if missing:
            raise ResultsError(f"no results file {', '.join(sorted(missing))} in {rdir} "
                               f"(has {', '.join(p.name for p in paths) or 'none'})")
        paths = [p for p in paths if p.name in wanted]
    if quick:
        paths = [p for p in paths if load(p).get("quick")]
    return paths


__all__ = [
    "Clock", "Diff", "KERNEL_FLAGS", "QUICK_WALL_S", "ResultsError", "SCHEMA", "apply_threads",
    "caption", "compare", "cpu_capability", "cpu_flags", "cpu_model", "env_threads", "files",
    "find_table", "load", "make_table", "machine_copy", "machine_key", "machine_note",
    "MACHINES_DIR", "readme_problems",
    "render_block", "render_cell", "render_readme", "render_table", "repo_root", "results_dir",
    "readme_of", "CORE_SLUG",
    "target_path", "unrendered_tables", "write",
]
