"""The two-tier table on real generations: SmolLM2-135M-Instruct, constrained decoding with the
scoped context vocabulary (``constrain.py``, ``vocab="scoped"``: arguments and answers drawn
from the words the chat shows, never the gold; a plan of one subtask per item the question
lists and a combining one; ``--vocab context`` is 0.3.2's), on SynthGAIA levels 1 and 2.

    python plugins/tipex/benchmarks/real_table.py --tasks 7 --replicas 5 --dtype-check 1 \
        --out-results plugins/tipex/results/real_table.json

The ``stages`` table says where paths fail (judged afterwards against the task's facts): plan
leaves per task fact, paths that fetched every fact, paths whose ``calc`` evaluated to the
answer, paths answering right.

Per level, per task, per structure (the bare agent: one tool-using worker on the whole task;
the DAG: planner -> subtasks -> synthesizer, g = the level's ``--granularity``), one run of
``TipexRunner`` with N = ``--replicas`` independent replicas (replica seeds, temperature
``--temperature``, no quorum, K = none, wall clock; ``--tool-first once``: a DAG subtask calls
its named tool, then answers; the bare agent calls some tool first). Replicas are independent
(no quorum, no budget, each call's output depends on its chat and seed only), so the first n
replicas of that run are exactly a run with N = n: accuracy at N = 1 is the mean over replicas
(CI over tasks and replicas, ``icml.stats.hierarchical_ci``), at N > 1 the plurality of the
first N replicas (ties to the lower replica; Wilson CI over tasks). Width w changes only the
schedule, not any reply, so it is not a row: the table reports model calls per task and the
calls on the critical path (what bounds latency at w >= the plan's width, one call at a time
per subtask).

The calibration data (``metrics.steps``): every worker tool call with its prompt tokens (the
context length the scripted model's per-step error depends on) and whether it was right,
judged afterwards against the task's facts (the gold is read here, never by the model): a
lookup is right when (entity, attr) is one of the task's facts, a search when its query is,
a calc when it evaluates to the task's answer. ``benchmarks/calibrate.py`` fits the scripted
model to them.

``--dtype-check K``: the constrained greedy replies of K planner and K first-worker prompts in
bfloat16 and float32, compared (the table's dtype is a setting; bfloat16 is used where they
agree). One thread.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from typing import Any

from icml_tipex import roles
from icml_tipex.aggregate import Candidate, answers_match, plurality
from icml_tipex.clock import run
from icml_tipex.plan import Subtask
from icml_tipex.runner import ExecutionConfig, TipexRunner
from icml_tipex.synthgaia import SynthGAIA, Task, safe_calc

from icml import results as R
from icml import stats as S

STRUCTURES = ("bare", "dag")


def _right(task: Task, tool: str, args: list[str], result: str) -> int:
    """Whether a tool call fetched something the task needs (judged afterwards, gold read)."""
    if tool == "lookup" and len(args) == 2:
        return int((args[0].strip(), args[1].strip().lower())
                   in {(f.entity, f.attr) for f in task.facts})
    if tool == "search" and args:
        return int(args[0].strip() in {f.query for f in task.facts if f.query})
    if tool == "calc" and args:
        return int(safe_calc(args[0]) == task.answer)
    return 0


def _critical_calls(events: list[dict[str, Any]], replica: int, structure: str) -> int:
    """Model calls on the critical path of one replica: the bare agent's calls; a DAG's
    planner + the longest chain of its subtasks' calls + the synthesizer."""
    calls = [e for e in events if e["kind"] == "model" and e["replica"] == replica]
    if structure == "bare":
        return len(calls)
    plan = next((e for e in events if e["kind"] == "plan" and e["replica"] == replica), None)
    if plan is None:
        return len(calls)
    per: dict[str, int] = {}
    for e in calls:
        if e["role"] == "worker":
            per[e["subtask"]] = per.get(e["subtask"], 0) + 1
    depth: dict[str, int] = {}
    for s in plan["subtasks"]:  # ids in order, deps on earlier ones only
        depth[s["id"]] = per.get(s["id"], 0) + max((depth[d] for d in s["deps"]), default=0)
    return 1 + max(depth.values(), default=0) + int(any(e["role"] == "synthesizer"
                                                         for e in calls))


def _steps(task: Task, events: list[dict[str, Any]], level: int, structure: str
           ) -> list[list[Any]]:
    """[level, structure, task, replica, prompt tokens, tool, right] per worker tool call."""
    last: dict[tuple[int, str], dict[str, Any]] = {}
    out = []
    for e in events:
        if e["kind"] == "model" and e["role"] == "worker":
            last[(e["replica"], e["subtask"])] = e
        elif e["kind"] == "tool" and "result" in e:
            m = last.get((e["replica"], e["subtask"]))
            if m is not None:
                out.append([level, structure, task.task_id, e["replica"], m["prompt_tokens"],
                            e["tool"],
                            _right(task, e["tool"], e["args"], e["result"])])
    return out


def _paths(task: Task, events: list[dict[str, Any]], level: int, structure: str,
           replicas: int) -> list[list[Any]]:
    """[level, structure, task, replica, facts, plan subtasks (0: bare), facts fetched right]
    per path: how much of the task a path covered (judged afterwards)."""
    out = []
    for r in range(replicas):
        plan = next((e for e in events if e["kind"] == "plan" and e["replica"] == r), None)
        got = set()
        for e in events:
            if e["kind"] == "tool" and e["replica"] == r and "result" in e:
                a = e["args"]
                if e["tool"] == "lookup" and len(a) == 2:
                    got |= {i for i, f in enumerate(task.facts)
                            if (f.entity, f.attr) == (a[0].strip(), a[1].strip().lower())}
        out.append([level, structure, task.task_id, r, len(task.facts),
                    len(plan["subtasks"]) if plan else 0, len(got)])
    return out


def _dtype_check(k: int, kind: str, suite: SynthGAIA, device: str, tool_first: str,
                 max_tokens: int, granularity: dict[int, int], vocab: str
                 ) -> tuple[dict[str, Any], list[list[Any]]]:
    import torch
    from icml_tipex.hf import load_chat_model

    prompts = []
    for lvl in (1, 2):
        for t in suite.tasks(lvl, k, offset=1000):
            g = granularity[lvl]
            prompts.append(("planner", roles.planner_messages(t.task_id, t.question, g)))
            sub = Subtask("s1", t.question, tool="lookup")
            prompts.append(("worker", roles.worker_messages(t.task_id, t.question, sub, {})))
    texts: dict[str, list[str]] = {}
    for name in ("bfloat16", "float32"):
        m = load_chat_model(kind, device=device, dtype=getattr(torch, name),
                            constrained=True, tool_first=tool_first, vocab=vocab)
        texts[name] = [run(m.generate(msgs, temperature=0.0, seed=0, max_tokens=max_tokens),
                           "wall").text for _, msgs in prompts]
    rows = []
    for role in ("planner", "worker"):
        idx = [i for i, (r, _) in enumerate(prompts) if r == role]
        same = sum(texts["bfloat16"][i] == texts["float32"][i] for i in idx)
        rows.append([role, len(idx), same])
    return texts, rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=7, help="tasks per level")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2], choices=(1, 2, 3))
    ap.add_argument("--replicas", type=int, default=5, help="N of the largest row (<= 5)")
    ap.add_argument("--granularity", type=int, nargs=2, default=[2, 6], metavar=("G1", "G2"),
                    help="g at level 1 and at levels 2 (and 3)")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-tokens", type=int, default=768,
                    help="a bound per call (the planner's grammar at g = 6 needs it)")
    ap.add_argument("--bare-steps", type=int, nargs=2, default=[8, 17], metavar=("S1", "S2"),
                    help="max_worker_steps of the bare agent at level 1 and at level 2: 3 "
                    "fetching calls per item (a DAG leaf's 4 calls less its answer) for the "
                    "level's most items (2 and 5), a calc and the answer")
    ap.add_argument("--dag-steps", type=int, default=4, help="max_worker_steps per subtask")
    ap.add_argument("--tool-first", default="first",
                    choices=("named", "any", "off", "once", "first"))
    ap.add_argument("--vocab", default="scoped", choices=("context", "scoped", "free"),
                    help="constrained decoding's free fields (constrain.py)")
    ap.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    ap.add_argument("--dtype-check", type=int, default=0, help="prompts per level and role")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="pretrained", choices=("pretrained", "tiny"),
                    help="tiny: the random Llama (a smoke run of the script)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out-results", default="")
    a = ap.parse_args()
    if a.tasks < 1 or not 1 <= a.replicas <= 5:
        raise SystemExit("--tasks must be >= 1 and --replicas in 1..5")
    import torch
    from icml_tipex.hf import load_chat_model

    clock = R.Clock()
    threads = R.apply_threads(a.threads)
    gran = {1: a.granularity[0], 2: a.granularity[1], 3: a.granularity[1]}
    suite = SynthGAIA(seed=a.seed)
    model = load_chat_model(a.model, device=a.device, dtype=getattr(torch, a.dtype),
                            constrained=True, tool_first=a.tool_first, vocab=a.vocab)
    runner = TipexRunner(model, suite.tools(), clock="wall")
    ns = sorted({1, a.replicas} | ({3} if a.replicas >= 3 else set()))
    # correct[level][structure]: tasks x replicas (0/1); voted[level][structure][N]: tasks
    correct: dict[int, dict[str, list[list[float]]]] = {}
    voted: dict[int, dict[str, dict[int, list[float]]]] = {}
    cost: dict[tuple[int, str], dict[str, float]] = {}
    steps: list[list[Any]] = []
    paths: list[list[Any]] = []
    answers: dict[str, list[Any]] = {}
    for lvl in a.levels:
        tasks = suite.tasks(lvl, a.tasks)
        correct[lvl], voted[lvl] = {}, {}
        for st in STRUCTURES:
            cfg = ExecutionConfig(max_inflight=None, n_replicas=a.replicas, width=8,
                                  granularity=gran[lvl], planner="chain" if st == "bare" else "dag",
                                  temperature=a.temperature, seed=a.seed,
                                  max_tokens=a.max_tokens,
                                  max_worker_steps=(a.bare_steps[min(lvl, 2) - 1] if st == "bare"
                                                    else a.dag_steps))
            c = {"tokens": 0.0, "calls": 0.0, "wall": 0.0,
                 "gen": 0.0, "paths": 0.0, "errors": 0.0}
            correct[lvl][st], voted[lvl][st] = [], {n: [] for n in ns}
            for t in tasks:
                g0, c0 = model.tokens_generated, time.perf_counter()
                res = runner.run([t], cfg, trace=True)[0]
                c["wall"] += time.perf_counter() - c0
                c["gen"] += model.tokens_generated - g0
                ev = res.trace.events
                reps = sorted(res.replicas, key=lambda p: p.replica)
                correct[lvl][st].append([float(answers_match(p.answer, t.answer)) for p in reps])
                for n in ns:
                    ans = plurality([Candidate(p.replica, p.answer, float(p.replica))
                                     for p in reps[:n] if p.status == "ok" and p.answer])
                    voted[lvl][st][n].append(float(answers_match(ans, t.answer)))
                crit = [_critical_calls(ev, p.replica, st) for p in reps]
                c["tokens"] += sum(p.tokens for p in reps)
                c["calls"] += sum(p.calls for p in reps)
                c["critmean"] = c.get("critmean", 0.0) + sum(crit) / len(crit)
                for n in ns:  # the first n replicas' slowest path (no quorum)
                    c[f"crit{n}"] = c.get(f"crit{n}", 0.0) + max(crit[:n])
                c["paths"] += len(reps)
                c["errors"] += sum(p.status != "ok" for p in reps)
                steps += _steps(t, ev, lvl, st)
                paths += _paths(t, ev, lvl, st, a.replicas)
                answers[f"{t.task_id}/{st}"] = [t.answer] + [p.answer for p in reps]
                print(lvl, st, t.task_id, t.answer, [p.answer for p in reps],
                      f"{time.perf_counter() - c0:.1f}s", flush=True)
            cost[(lvl, st)] = c

    R_ = a.replicas
    rows, gains = [], []
    for lvl in a.levels:
        nt = len(correct[lvl]["bare"])
        for st in STRUCTURES:
            c = cost[(lvl, st)]
            for n in ns:
                if n == 1:
                    # tasks x replicas -> replicas (seeds) x tasks (items)
                    s = S.summarize([list(col) for col in zip(*correct[lvl][st])])
                    est, mde = s["mean"], s["mde"]
                    ci = f"[{est['lo']:.2f}, {est['hi']:.2f}]"
                    acc = est["value"]
                else:
                    e = S.proportion_ci(voted[lvl][st][n])
                    acc, ci = e.value, f"[{e.lo:.2f}, {e.hi:.2f}]"
                    mde = S.mde_proportion(nt)
                # per task: n paths' tokens and calls (the mean path's, n times)
                tokens, calls = n * c["tokens"] / c["paths"], n * c["calls"] / c["paths"]
                crit = (c["critmean"] if n == 1 else c[f"crit{n}"]) / nt
                rows.append([lvl, "bare agent" if st == "bare" else f"DAG g={gran[lvl]}", n,
                             nt, round(acc, 3), ci, round(mde, 2), round(tokens),
                             round(calls, 1), round(crit, 1), int(c["errors"])])
        # the two tiers' gains, paired over tasks (replica-mean accuracy at N = 1)
        m1 = {st: [sum(r) / len(r) for r in correct[lvl][st]] for st in STRUCTURES}
        comps = [("SP: DAG - bare, N=1", m1["dag"], m1["bare"])]
        if R_ > 1:
            comps += [(f"RP on bare: N={R_} - N=1", voted[lvl]["bare"][R_], m1["bare"]),
                      (f"RP on DAG: N={R_} - N=1", voted[lvl]["dag"][R_], m1["dag"]),
                      (f"both: DAG N={R_} - bare N=1", voted[lvl]["dag"][R_], m1["bare"])]
        for name, x, y in comps:
            d = S.paired_diff_ci(x, y)
            diffs = [p - q for p, q in zip(x, y)]
            mde = S.mde_from_samples(diffs) if len(set(diffs)) > 1 else S.mde_proportion(
                nt, paired=True)
            verdict = ("no difference detected" if d.lo <= 0 <= d.hi else
                       "gain detected" if d.value > 0 else "loss detected")
            gains.append([lvl, name, nt, round(d.value, 3), f"[{d.lo:.2f}, {d.hi:.2f}]",
                          round(mde, 2), verdict])
    t1 = R.make_table(
        f"{model.name}, constrained ({a.vocab} vocabulary, tool_first={a.tool_first}), "
        f"T = {a.temperature}, "
        f"{a.dtype}: accuracy per level, structure and N (95% CI; MDE at 80% power)",
        ["level", "structure", "N", "tasks", "accuracy", "95% CI", "MDE", "tokens per task",
         "model calls per task", "critical-path calls", "failed paths"], rows, name="accuracy")
    t2 = R.make_table("The two tiers' gains, paired over tasks (95% CI; MDE at 80% power)",
                      ["level", "comparison", "tasks", "difference", "95% CI", "MDE",
                       "verdict"], gains, name="gains")
    tables = [t1, t2]
    crows = []
    for (lvl, st), c in cost.items():
        crows.append([lvl, st, int(c["paths"]), int(c["gen"]), round(c["wall"], 1),
                      round(c["wall"] / c["paths"], 1),
                      round(c["wall"] / max(1.0, c["gen"]), 3)])
    t3 = R.make_table("Cost (wall clock, one thread, shared machine)",
                      ["level", "structure", "paths", "generated tokens", "wall s",
                       "wall s per path", "wall s per generated token"], crows, name="cost")
    tables.append(t3)
    srows = []
    for lvl in a.levels:
        for st in STRUCTURES:
            ps = [p for p in paths if p[0] == lvl and p[1] == st]
            ss = [x for x in steps if x[0] == lvl and x[1] == st and x[5] == "calc"]
            calc_ok = {(x[2], x[3]) for x in ss if x[6]}
            right = sum(int(v) for row in correct[lvl][st] for v in row)
            srows.append([lvl, st, len(ps),
                          round(sum(p[5] - 1 for p in ps) / max(1, sum(p[4] for p in ps)), 2)
                          if st == "dag" else "-",
                          sum(p[6] == p[4] for p in ps),
                          sum((p[2], p[3]) in calc_ok for p in ps), right])
    tables.append(R.make_table(
        "Where paths fail (judged afterwards against the task's facts): plan leaves per fact "
        "(DAG), paths that fetched every fact, whose calc evaluated to the answer, and that "
        "answered right", ["level", "structure", "paths", "plan leaves per fact",
                           "fetched every fact", "calc = answer", "answered right"], srows,
        name="stages"))
    tol = {k: {"timing": True, "why": "wall time on a shared machine: shown, not compared"}
           for k in ("wall s", "wall s per path", "wall s per generated token")}
    metrics: dict[str, Any] = {
        "steps": steps, "steps_columns": ["level", "structure", "task", "replica",
                                          "prompt_tokens", "tool", "right"],
        "paths": paths, "paths_columns": ["level", "structure", "task", "replica", "facts",
                                          "plan subtasks", "facts fetched"],
        "correct": {str(k): v for k, v in correct.items()},
        "voted": {str(k): {st: {str(n): x for n, x in v.items()} for st, v in d.items()}
                  for k, d in voted.items()},
        "answers": answers, "dtype": a.dtype, "tool_first": a.tool_first, "vocab": a.vocab,
        "granularity": gran, "temperature": a.temperature, "replicas": R_,
        "constraint_stats": model.constraint_stats}
    if a.dtype_check:
        texts, drows = _dtype_check(a.dtype_check, a.model, suite, a.device, a.tool_first,
                                    a.max_tokens, gran, a.vocab)
        tables.append(R.make_table("bfloat16 against float32: constrained greedy replies "
                                   "(levels 1 and 2)", ["role", "prompts",
                                                        "same reply"], drows, name="dtype"))
        metrics["dtype_texts"] = texts
    for t in tables:
        print(t["title"])
        for r in t["rows"]:
            print("  ", r)
    if a.out_results:
        R.write(a.out_results, tables, plugin="tipex", seeds=[a.seed], clock=clock,
                threads=threads, quick=False, tolerance=tol,
                command=" ".join(["python", "plugins/tipex/benchmarks/real_table.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]),
                metrics=metrics)


if __name__ == "__main__":
    main()
