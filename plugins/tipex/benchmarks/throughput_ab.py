"""Virtual-clock throughput of this checkout against an earlier revision of the plugin, in the
same run: the revision's ``plugins/tipex/src`` is exported with ``git archive`` to a temporary
folder and both versions run the same grid in separate processes, alternating, best of
``--rounds`` per row (tasks per CPU second of one process, so one core).

    OMP_NUM_THREADS=1 python plugins/tipex/benchmarks/throughput_ab.py --ref aa920a2 \\
        [--tasks 300] [--rounds 3] [--out runs/throughput_ab] [--out-results FILE]

Each row also checks that both versions return identical results (answers, latencies, tokens).
``--out-results FILE`` writes the table as a results file (``icml.results``); the CPU-time
columns (and the speed-up, a ratio of two) are declared ``timing``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[3]

# (level, planner, N, w, g, K): the bare agent, one decomposed path, and replicated paths
GRID = [(lvl, planner, n, w, g, k)
        for lvl in (1, 2, 3)
        for planner, n, w, g, k in (("chain", 1, 1, 1, None), ("chain", 5, 1, 1, None),
                                    ("dag", 1, 1, 4, None), ("dag", 1, 4, 4, None),
                                    ("dag", 1, 8, 8, None), ("dag", 3, 4, 4, None),
                                    ("dag", 5, 4, 4, 8), ("dag", 9, 8, 8, None))]


def measure(n_tasks: int, rows: list[list]) -> list[dict]:
    """Run each row once in this process: tasks per CPU s, calls, and a digest of results."""
    from icml_tipex.runner import ExecutionConfig, TipexRunner
    from icml_tipex.scripted import ScriptedModel
    from icml_tipex.synthgaia import SynthGAIA

    suite = SynthGAIA(seed=0)
    runner = TipexRunner(ScriptedModel(suite, seed=0), suite.tools())
    tasks = {lvl: suite.tasks(lvl, n_tasks) for lvl in (1, 2, 3)}
    out = []
    for lvl, planner, n, w, g, k in rows:
        cfg = ExecutionConfig(planner=planner, n_replicas=n, width=w, granularity=g,
                              max_inflight=k)
        t = time.process_time()
        res = runner.run(tasks[lvl], cfg)
        cpu = time.process_time() - t
        digest = hashlib.sha256(json.dumps(
            [[r.answer, repr(r.latency_s), r.tokens, r.calls] for r in res]).encode())
        out.append({"cpu_s": cpu, "calls": sum(r.calls for r in res),
                    "digest": digest.hexdigest()[:16]})
    return out


def _child(src: str, n_tasks: int) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1")
    code = (f"import json, sys; sys.path.insert(0, {src!r}); "
            f"sys.path.insert(0, {str(HERE.parent)!r}); import throughput_ab as t; "
            f"print(json.dumps(t.measure({n_tasks}, {json.dumps(GRID).replace('null', 'None')})))")
    done = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", default="aa920a2", help="git revision to compare against")
    ap.add_argument("--tasks", type=int, default=300, help="tasks per row")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="")
    ap.add_argument("--out-results", default="",
                    help="also write the table as a results file "
                         "(plugins/tipex/results/NAME.json)")
    a = ap.parse_args()
    from icml import results

    clock = results.Clock()
    new_src = str(HERE.parents[1] / "src")
    with tempfile.TemporaryDirectory() as tmp:
        tar = subprocess.run(["git", "-C", str(REPO), "archive", a.ref, "plugins/tipex/src"],
                             check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=tar, check=True)
        old_src = str(Path(tmp, "plugins/tipex/src"))
        best: dict[str, list[float]] = {"ref": [float("inf")] * len(GRID),
                                        "new": [float("inf")] * len(GRID)}
        runs: dict[str, list[dict]] = {}
        for _ in range(a.rounds):  # alternate the versions, best of rounds
            for name, src in (("ref", old_src), ("new", new_src)):
                runs[name] = _child(src, a.tasks)
                best[name] = [min(b, r["cpu_s"]) for b, r in zip(best[name], runs[name])]
    lines = [f"Virtual-clock throughput, {a.tasks} tasks per row, one process (one core), best "
             f"of {a.rounds}; ref = {a.ref}, new = this checkout",
             "", "| level | structure | N | w | g | K | model calls per task | ref tasks/CPU s "
             "| new tasks/CPU s | speed-up | new us per model call | same results |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for i, (lvl, planner, n, w, g, k) in enumerate(GRID):
        calls = runs["new"][i]["calls"]
        ref_tps, new_tps = a.tasks / best["ref"][i], a.tasks / best["new"][i]
        same = runs["new"][i]["digest"] == runs["ref"][i]["digest"]
        struct = "bare agent" if planner == "chain" else "DAG"
        row = [lvl, struct, n, w if planner == "dag" else "-", g if planner == "dag" else "-",
               k or "none", round(calls / a.tasks, 1), round(ref_tps), round(new_tps),
               round(new_tps / ref_tps, 2), round(1e6 * best["new"][i] / calls, 1),
               "yes" if same else "NO"]
        rows.append(row)
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    text = "\n".join(lines)
    print(text)
    if a.out_results:
        cols = ["level", "structure", "N", "w", "g", "K", "model calls per task",
                "ref tasks/CPU s", "new tasks/CPU s", "speed-up", "new us per model call",
                "same results"]
        why = ("CPU time of one process on a shared machine (or a ratio of two): shown, "
               "never compared")
        out = results.write(
            a.out_results, [results.make_table(lines[0], cols, rows, name="throughput_ab")],
            plugin="tipex", seeds=[0], clock=clock, threads=1,
            command="python " + shlex.join(["plugins/tipex/benchmarks/throughput_ab.py",
                                            *sys.argv[1:]]),
            tolerance={c: {"timing": True, "why": why} for c in cols[7:11]})
        print(f"# wrote {out}", file=sys.stderr)
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        Path(a.out, "throughput_ab.md").write_text(text + "\n")
        Path(a.out, "throughput_ab.json").write_text(json.dumps(
            {"grid": GRID, "best_cpu_s": best, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
