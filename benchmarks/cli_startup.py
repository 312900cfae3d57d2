"""Wall time of `icml --help` and `icml list` with every installed plugin, against a bare
interpreter start, as medians over repeated fresh processes.

    python benchmarks/cli_startup.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from importlib.metadata import entry_points

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
    args = parser.parse_args()
    n_plugins = len(entry_points(group="icml.plugins"))
    base = None
    print(f"{n_plugins} plugins installed; median of {args.repeat} runs\n")
    print("| command | median s | ratio vs bare python |\n|---|---|---|")
    for name, cmd in COMMANDS.items():
        t = median_seconds(cmd, args.repeat)
        base = base or t
        print(f"| {name} | {t:.3f} | {t / base:.1f}x |")


if __name__ == "__main__":
    main()
