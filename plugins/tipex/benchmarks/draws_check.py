"""Are the scripted models' error draws what the error model says? The bare agent on level 3
is right exactly when none of its tool steps errs, so its accuracy should equal the mean over
tasks of prod(1 - eps_i), eps_i = eps0 + beta * context_i / 1000 along the error-free path.
Checked for the text model (``ScriptedModel``, draws from a hash of the prompt) and the
structured model (``StructuredModel``, counter-based draws) on many tasks.

    python plugins/tipex/benchmarks/draws_check.py --out-results plugins/tipex/results/draws.json
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from collections import defaultdict

from icml_tipex.des import DesRunner
from icml_tipex.fast import StructuredModel, sync_tools
from icml_tipex.runner import ExecutionConfig, TipexRunner
from icml_tipex.scripted import ScriptedModel, SimParams
from icml_tipex.synthgaia import SynthGAIA

from icml import results as R
from icml import stats as S


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=10000, help="tasks (structured model)")
    ap.add_argument("--text-tasks", type=int, default=3000, help="tasks (text model)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-results", default="")
    a = ap.parse_args()
    if min(a.tasks, a.text_tasks) < 100:
        raise SystemExit("--tasks and --text-tasks must be >= 100")
    clock = R.Clock()
    threads = R.apply_threads(1)
    suite = SynthGAIA(seed=a.seed)
    tasks = suite.tasks(3, max(a.tasks, a.text_tasks))
    cfg = ExecutionConfig(planner="chain", max_inflight=None, seed=a.seed)
    p = SimParams()
    # the error-free path's contexts (the same for both models: their token counts agree)
    perfect = StructuredModel(suite, SimParams(eps0=0, beta=0, plan_err=0, synth_err=0),
                              seed=a.seed)
    eps: dict[str, list[float]] = defaultdict(list)
    work = perfect.work

    def rec(w, mt):  # type: ignore[no-untyped-def]
        if len(w.results) < len(w.actions):
            eps[w.task.task_id].append(p.eps0 + p.beta * w.ctx / 1000)
        return work(w, mt)

    perfect.work = rec  # type: ignore[method-assign]
    DesRunner(perfect, sync_tools(suite)).run(tasks, cfg)
    rows, out = [], {}
    for name, n in (("text (ScriptedModel)", a.text_tasks),
                    ("structured (StructuredModel)", a.tasks)):
        ts = tasks[:n]
        if name.startswith("text"):
            res = TipexRunner(ScriptedModel(suite, seed=a.seed), suite.tools()).run(ts, cfg)
        else:
            res = DesRunner(StructuredModel(suite, seed=a.seed), sync_tools(suite)).run(ts, cfg)
        acc = [float(bool(x.correct)) for x in res]
        expect = sum(math.prod(1 - e for e in eps[t.task_id]) for t in ts) / n
        est = S.summarize(acc, seed=a.seed)
        lo, hi = est["mean"]["lo"], est["mean"]["hi"]
        z = (sum(acc) / n - expect) / math.sqrt(expect * (1 - expect) / n)
        rows.append([name, n, round(expect, 4), round(sum(acc) / n, 4), f"[{lo:.4f}, {hi:.4f}]",
                     round(z, 2), "yes" if lo <= expect <= hi else "no"])
        out[name] = {"expected": expect, "observed": sum(acc) / n, "ci": [lo, hi], "z": z}
        print(rows[-1], flush=True)
    t = R.make_table("Level 3 bare agent: accuracy = P(no tool step errs); expected from the "
                     "error model along the error-free path, observed per model",
                     ["model", "tasks", "expected", "observed", "95% CI", "z",
                      "expected inside CI"], rows, name="draws")
    if a.out_results:
        R.write(a.out_results, [t], plugin="tipex", seeds=[a.seed], clock=clock,
                threads=threads, quick=True, metrics=out,
                command=" ".join(["python", "plugins/tipex/benchmarks/draws_check.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]))


if __name__ == "__main__":
    main()
