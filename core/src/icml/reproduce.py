"""``icml reproduce``: rerun the command behind each results file and compare with the committed
file (see :mod:`icml.results` for what a rerun must give). The rerun writes into a temporary
folder (``ICML_RESULTS_DIR``), so the committed file changes only with ``write=True``."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from icml import results as R


@dataclasses.dataclass
class Outcome:
    """What one results file's rerun gave."""

    slug: str
    file: str
    status: str  # "ok", "differs", "failed"
    wall_s: float
    diffs: list[R.Diff] = dataclasses.field(default_factory=list)
    message: str = ""


def _env(tmp: Path, threads: int | None) -> dict[str, str]:
    env = dict(os.environ)
    env[R.RESULTS_DIR_ENV] = str(tmp)
    if threads is not None:
        env[R.THREADS_ENV] = str(threads)
    bindir = str(Path(sys.executable).parent)  # `icml` and `python` of this environment first
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return env


def rerun_file(slug: str, path: Path, *, threads: int | None = None, raw: bool = False,
               write: bool = False, record_machine: bool = False,
               echo: Callable[[str], None] = lambda s: None) -> Outcome:
    """Rerun one results file's command and compare (``write``: accept the rerun as the new
    committed file and re-render the README's blocks).

    On a machine other than the file's (:func:`icml.results.machine_key`: CPU model and kernel
    flags) the rerun is compared with that machine's reference copy where one is committed
    (:func:`icml.results.machine_copy`), else with the main file. ``record_machine``: where the
    rerun's machine is not the main file's and the rerun differs from it, write the rerun as
    this machine's reference copy (the main file and the README stay as they are)."""
    committed = R.load(path)
    root = R.repo_root(path.parent)
    with tempfile.TemporaryDirectory(prefix="icml-reproduce-") as tmp_name:
        tmp = Path(tmp_name)
        log = tmp / "command.log"
        echo(f"{slug} {path.name}: {committed['command']}")
        start = time.perf_counter()
        with log.open("w", encoding="utf-8") as fh:
            proc = subprocess.run(committed["command"], shell=True, cwd=root,  # noqa: S602
                                  env=_env(tmp, threads), stdout=fh, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
        wall = round(time.perf_counter() - start, 1)
        out = tmp / path.name
        if proc.returncode != 0 or not out.is_file():
            tail = "\n".join(log.read_text(encoding="utf-8", errors="replace")
                             .splitlines()[-15:])
            why = f"exit {proc.returncode}" if proc.returncode else f"it wrote no {path.name}"
            return Outcome(slug, path.name, "failed", wall,
                           message=f"the command failed ({why}):\n{tail}")
        fresh = R.load(out)
        other_machine = R.machine_key(fresh) != R.machine_key(committed)
        copy = R.machine_copy(path, R.machine_key(fresh))
        reference, against = committed, ""
        if other_machine and copy.is_file() and not write:
            reference = R.load(copy)
            against = (f"compared with this machine's reference copy "
                       f"{copy.relative_to(path.parent).as_posix()} (the main file was made on "
                       f"{committed.get('cpu')!r})")
            if reference.get("command") != committed.get("command"):
                against += "; its command is not the main file's: record it again"
            elif str(reference.get("created", "")) < str(committed.get("created", "")):
                against += "; the main file is newer: if the code changed, record it again"
        diffs = R.compare(reference, fresh, raw=raw)
        note = R.machine_note(reference, fresh) if diffs else ""
        note = "; ".join(x for x in (against, note) if x)
        if record_machine and other_machine and not write:
            where = copy.relative_to(path.parent).as_posix()
            if not R.compare(committed, fresh, raw=raw):  # equal to the main file: no copy
                if copy.is_file():
                    copy.unlink()
                    note = f"removed {where} (the rerun equals the main file)"
            elif diffs or not copy.is_file():
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(out, copy)
                note = "; ".join(x for x in (R.machine_note(committed, fresh),
                                             f"recorded {where}") if x)
            diffs = []
        if write:
            shutil.copyfile(out, path)
            readme = R.readme_of(path.parent)
            if readme.is_file():
                R.render_readme(readme, path.parent)
    return Outcome(slug, path.name, "differs" if diffs else "ok", wall, diffs, message=note)


def reproduce(slug: str, names: Sequence[str] = (), *, quick: bool = False,
              threads: int | None = None, raw: bool = False, write: bool = False,
              record_machine: bool = False,
              echo: Callable[[str], None] = lambda s: None) -> list[Outcome]:
    """Rerun ``slug``'s results files (all, the ``names`` given, or the quick ones)."""
    rdir = R.results_dir(slug)
    paths = R.files(rdir, names, quick=quick)
    if not paths:
        raise R.ResultsError(f"{slug}: no {'quick ' if quick else ''}results files in {rdir}")
    return [rerun_file(slug, p, threads=threads, raw=raw, write=write,
                       record_machine=record_machine, echo=echo) for p in paths]


__all__ = ["Outcome", "reproduce", "rerun_file"]
