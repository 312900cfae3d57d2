"""Wall time of `icml --help` and `icml list` with every installed plugin, against a bare
interpreter start, as medians over repeated fresh processes.

    python benchmarks/cli_startup.py [--repeat 7]

Writes ``benchmarks/results/cli_startup.json`` (``icml.results``; every clock column is declared
``timing``: shown, never compared), which the root README renders (``icml render core``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

COMMANDS = {
    "python -c pass (baseline)": [sys.executable, "-c", "pass"],
    "python -c 'import icml'": [sys.executable, "-c", "import icml"],
    "icml --help": [sys.executable, "-m", "icml.cli", "--help"],
    "icml list": [sys.executable, "-m", "icml.cli", "list"],
    "icml list --json": [sys.executable, "-m", "icml.cli", "list", "--json"],
}


def median_seconds(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--results", type=Path,
                        default=Path("benchmarks/results/cli_startup.json"))
    args = parser.parse_args()
    from icml.results import Clock, make_table, write

    clock = Clock()
    load0 = os.getloadavg()[0]
    n_plugins = len(entry_points(group="icml.plugins"))
    base = None
    rows = []
    for name, cmd in COMMANDS.items():
        t = median_seconds(cmd, args.repeat)
        base = base or t
        rows.append([name, t, t / base])
    table = make_table(f"CLI start-up, {n_plugins} plugins installed, median of {args.repeat} "
                       "fresh processes", ["command", "median s", "ratio vs bare python"],
                       rows, name="startup",
                       formats={"median s": ".3f", "ratio vs bare python": ".1f"})
    timing = {"timing": True, "why": "a clock reading: machine- and load-dependent"}
    command = "python benchmarks/cli_startup.py " + shlex.join(sys.argv[1:])
    path = write(args.results, [table], command=command.strip(), clock=clock,
                 tolerance={"median s": timing, "ratio vs bare python": timing},
                 metrics={"plugins": n_plugins, "repeat": args.repeat},
                 notes=f"load average at start {load0:.1f}, at end {os.getloadavg()[0]:.1f} "
                 "(other work on the machine slows every row)")
    print("| command | median s | ratio vs bare python |\n|---|---|---|")
    for name, t, r in rows:
        print(f"| {name} | {t:.3f} | {r:.1f}x |")
    print(f"results file: {path}")


if __name__ == "__main__":
    main()
