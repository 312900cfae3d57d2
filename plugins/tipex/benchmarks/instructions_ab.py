"""CPU instructions per model call of this checkout against an earlier revision, counted by
valgrind's callgrind (deterministic, so unaffected by the load of a shared machine).

    python plugins/tipex/benchmarks/instructions_ab.py --ref 983036d [--tasks 30] [--out DIR] \
        [--out-results FILE]

For each version (the revision's ``plugins/tipex/src`` exported with ``git archive``, and this
checkout's) and each row, one process under ``valgrind --tool=callgrind`` builds
``SynthGAIA(seed=0)`` and ``--tasks`` tasks per level and runs the row once with
``TipexRunner(ScriptedModel(suite, seed=0), suite.tools())`` on the virtual clock; a process that
only builds the suite and tasks is subtracted, and the rest is divided by the model calls.
``--model-only`` rows instead replay the prompts a run recorded through ``ScriptedModel.reply``
and ``count_tokens`` (twice; the second pass is counted: the first pass minus the second).
Needs valgrind; ``PYTHONHASHSEED=0`` in the children. ``--out-results FILE`` writes the table
as a results file (``icml.results``), cells as printed; ``--rows N`` keeps the first N run rows
and model-alone rows (a smoke setting).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[3]
ROWS = [(1, "chain", 1, 1, 1, None), (1, "dag", 5, 4, 4, 8), (2, "dag", 3, 4, 4, None),
        (2, "dag", 9, 8, 8, None), (3, "chain", 5, 1, 1, None), (3, "dag", 5, 4, 4, 8),
        (3, "dag", 9, 8, 8, None)]
MODEL_ROWS = [(1, "chain", 5, 1, 1, None), (3, "dag", 5, 4, 4, 8)]

CHILD = r"""
import pickle, sys
sys.path.insert(0, sys.argv[1])
from icml_tipex.runner import ExecutionConfig, TipexRunner
from icml_tipex.scripted import ScriptedModel
from icml_tipex.synthgaia import SynthGAIA
n, mode = int(sys.argv[2]), sys.argv[3]
suite = SynthGAIA(seed=0)
tasks = {l: suite.tasks(l, n) for l in (1, 2, 3)}
if mode == "run":
    lvl, planner, N, w, g, k = eval(sys.argv[4])
    cfg = ExecutionConfig(planner=planner, n_replicas=N, width=w, granularity=g, max_inflight=k)
    out = TipexRunner(ScriptedModel(suite, seed=0), suite.tools()).run(tasks[lvl], cfg)
    print("calls", sum(r.calls for r in out))
elif mode == "replay":
    rec = pickle.load(open(sys.argv[4], "rb"))
    m = ScriptedModel(suite, seed=0)
    for _ in range(int(sys.argv[5])):
        for msgs, t, s in rec:
            m.reply(msgs, t, s)
            m.count_tokens(msgs)
"""


def _ir(src: str, *args: str) -> tuple[int, str]:
    env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           sys.executable, "-c", CHILD, src, *args], env=env, check=True,
                          capture_output=True, text=True)
    m = re.search(r"Collected : (\d+)", done.stderr)
    if m is None:
        raise RuntimeError(f"no callgrind total in: {done.stderr[-500:]}")
    return int(m.group(1)), done.stdout


def _record(row: tuple, n: int, path: Path) -> int:
    """The prompts (sharing message objects as a run does) of one row, pickled."""
    from icml_tipex.runner import ExecutionConfig, TipexRunner
    from icml_tipex.scripted import ScriptedModel
    from icml_tipex.synthgaia import SynthGAIA

    lvl, planner, N, w, g, k = row
    suite = SynthGAIA(seed=0)
    model = ScriptedModel(suite, seed=0)
    rec: list = []
    inner = model.generate

    async def recording(messages: list, **kw: object):
        rec.append((messages, kw["temperature"], kw["seed"]))
        return await inner(messages, **kw)

    model.generate = recording  # type: ignore[method-assign]
    cfg = ExecutionConfig(planner=planner, n_replicas=N, width=w, granularity=g, max_inflight=k)
    TipexRunner(model, suite.tools()).run(suite.tasks(lvl, n), cfg)
    path.write_bytes(pickle.dumps(rec))
    return len(rec)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", default="983036d")
    ap.add_argument("--tasks", type=int, default=30)
    ap.add_argument("--out", default="")
    ap.add_argument("--rows", type=int, default=0, help="only the first N rows of each kind")
    ap.add_argument("--out-results", default="",
                    help="also write the table as a results file "
                         "(plugins/tipex/results/NAME.json)")
    a = ap.parse_args()
    from icml import results

    clock = results.Clock()
    table_rows: list[list] = []
    new_src = str(HERE.parents[1] / "src")
    lines = [f"**Instructions per model call (callgrind), {a.tasks} tasks per row; ref = {a.ref}, "
             "new = this checkout**", "",
             "| level | structure | N | w | g | K | what | model calls | ref instructions per call "
             "| new instructions per call | ref / new |", "|" + "---|" * 11]
    res = []
    with tempfile.TemporaryDirectory() as tmp:
        tar = subprocess.run(["git", "-C", str(REPO), "archive", a.ref, "plugins/tipex/src"],
                             check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=tar, check=True)
        srcs = {"ref": str(Path(tmp, "plugins/tipex/src")), "new": new_src}
        base = {v: _ir(s, str(a.tasks), "setup")[0] for v, s in srcs.items()}
        n = a.rows or None
        todo = [(r, "run") for r in ROWS[:n]] + [(r, "model alone") for r in MODEL_ROWS[:n]]
        for row, what in todo:
            per, calls = {}, 0
            for v, src in srcs.items():
                if what == "run":
                    ir, out = _ir(src, str(a.tasks), "run", repr(row))
                    calls = int(out.split()[-1])
                    per[v] = (ir - base[v]) / calls
                else:
                    pk = Path(tmp, "prompts.pkl")
                    calls = _record(row, a.tasks, pk)
                    one = _ir(src, str(a.tasks), "replay", str(pk), "1")[0]
                    two = _ir(src, str(a.tasks), "replay", str(pk), "2")[0]
                    per[v] = (two - one) / calls
            lvl, planner, N, w, g, k = row
            dag = planner == "dag"
            cells = [lvl, "DAG" if dag else "bare agent", N, w if dag else "-",
                     g if dag else "-", k or "none", what, calls, f"{per['ref'] / 1e3:.0f}k",
                     f"{per['new'] / 1e3:.0f}k", f"{per['ref'] / per['new']:.2f}"]
            table_rows.append(cells)
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
            print(lines[-1], flush=True)
            res.append({"row": row, "what": what, "calls": calls, "per_call": per})
    text = "\n".join(lines)
    print(text)
    if a.out_results:
        cols = ["level", "structure", "N", "w", "g", "K", "what", "model calls",
                "ref instructions per call", "new instructions per call", "ref / new"]
        out = results.write(
            a.out_results,
            [results.make_table(lines[0].strip("*"), cols, table_rows, name="instructions_ab")],
            plugin="tipex", seeds=[0], clock=clock, threads=1,
            command="python " + shlex.join(["plugins/tipex/benchmarks/instructions_ab.py",
                                            *sys.argv[1:]]))
        print(f"# wrote {out}", file=sys.stderr)
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        Path(a.out, "instructions_ab.md").write_text(text + "\n")
        Path(a.out, "instructions_ab.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
