"""Shared by the benchmark scripts: the ``--out-results`` option and the results file it writes
(``icml.results``), with the command recorded as run from the repository root."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

TIMING_WHY = ("clock reading on a shared CPU (one run): shown, never compared; ratios are "
              "from the same run")


def add_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out-results", default="",
                    help="also write the tables as a results file (plugins/dxpp/results/*.json)")


def command(script: str) -> str:
    """The command as typed, from the repository root."""
    return "python " + shlex.join([f"plugins/dxpp/benchmarks/{Path(script).name}",
                                   *sys.argv[1:]])


def timing(*columns: str) -> dict[str, Any]:
    return {c: {"timing": True, "why": TIMING_WHY} for c in columns}


def write(path: str, script: str, tables: Sequence[Mapping[str, Any]], *, clock: Any,
          threads: int, quick: bool = False, seeds: Sequence[int] = (0,),
          tolerance: Mapping[str, Any] | None = None, notes: str = "") -> None:
    from icml import results

    tol = dict(tolerance or {})
    if Path(path).is_file():  # keep what was declared by hand in the committed file
        tol = {**tol, **results.load(path).get("tolerance", {})}
    out = results.write(path, tables, command=command(script), plugin="dxpp", seeds=seeds,
                        quick=quick, clock=clock, threads=threads, tolerance=tol,
                        notes=notes)
    print(f"# wrote {out}", file=sys.stderr)
