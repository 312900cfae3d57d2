"""What moved the default job's numbers between sessions (issue 63): the CPU's vector
instruction set, not the code, the thread count or the batch.

    python plugins/led/benchmarks/isa_check.py --out-results plugins/led/results/default_isa.json

Runs ``icml run led -q`` (the default job, one thread) in fresh interpreters with torch's
CPU kernels dispatched to AVX-512 (this machine's default), to AVX2
(``ATEN_CPU_CAPABILITY=avx2``, what an AVX2-only CPU runs) and without vectorisation
(``ATEN_CPU_CAPABILITY=default``), at today's LED depth (``d = 8``) and at 0.2.5's
(``led.depth=4``). The vectorised kernels (softmax, log-softmax, reductions, ...) add in a
different order at each vector width, so the trained tiny model differs in its last bits, and
sampling from a nearly collapsed policy turns that into different tokens. MKL's instruction set
(``MKL_ENABLE_INSTRUCTIONS=AVX2``) changed nothing in a first try (not rerun here).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ISAS = [("avx512", {}), ("avx2", {"ATEN_CPU_CAPABILITY": "avx2"}),
        ("none", {"ATEN_CPU_CAPABILITY": "default"})]
# the AVX-512 rows are results/default.json (d = 8) and 0.2.5's default.json (d = 4, in git)
RUNS = [("avx2", 8), ("avx2", 4), ("none", 4)]
COLS = ["kernels", "LED depth", "method", "pass@1", "pass@16", "distinct answers",
        "distinct traces", "explored"]


def capability(env: dict) -> str:
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> None:
    import shlex

    from icml import results as icml_results

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-results", default=None)
    args = ap.parse_args(argv)
    clock = icml_results.Clock()
    icml = Path(sys.executable).parent / "icml"
    rows = []
    for isa, depth in RUNS:
        env = {**os.environ, **dict(ISAS)[isa], "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        env.pop("ICML_RESULTS_DIR", None)
        cap = capability(env)
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([str(icml), "run", "led", "-q", "--threads", "1", "--set",
                            f"led.depth={depth}", "--out", tmp], env=env, cwd=ROOT, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            (run_dir,) = Path(tmp).iterdir()
            res = json.loads((run_dir / "result.json").read_text())
        table = res["tables"][0]
        col = {c: i for i, c in enumerate(table["columns"])}
        for r in table["rows"]:
            rows.append([cap, depth, r[0]] + [r[col[c]] for c in COLS[3:]])
        print(f"{isa} ({cap}) d={depth}: led pass@1 {rows[-1][3]:.4g} pass@16 {rows[-1][4]:.4g}",
              file=sys.stderr, flush=True)
    table = icml_results.make_table(
        "default job (icml run led -q, one thread) under three CPU kernel dispatches",
        COLS, rows, name="isa")
    print(icml_results.render_table(table))
    if args.out_results:
        argv_used = sys.argv[1:] if argv is None else argv
        command = "python plugins/led/benchmarks/isa_check.py " + shlex.join(argv_used)
        icml_results.write(args.out_results, [table], command=command.strip(), plugin="led",
                           seeds=[0], quick=False, clock=clock, threads=1,
                           notes="each row from a fresh `icml run led -q` with the kernel "
                                 "dispatch set by ATEN_CPU_CAPABILITY (read back from torch)")


if __name__ == "__main__":
    main()
