"""Long-context benchmark on the real pretrained chat model (SmolLM2-135M-Instruct, offline).

    python plugins/capkv/benchmarks/longctx_bench.py run --lengths 1024 --n 4 --out lc.jsonl
    python plugins/capkv/benchmarks/longctx_bench.py table --inp lc.jsonl \
        --out-results plugins/capkv/results/longctx.json

``run`` appends one JSON line per item (every policy x ratio x mode), so a cut run keeps what it
finished and a rerun skips items already there. ``table`` pools them into the README tables:
exact accuracy and KL (mean over the answer tokens, teacher-forced) per task, policy, ratio,
context length and mode, with 95% bootstrap intervals over items, and the tied-best verdict
(rule in the README, fixed before the runs). ``fidelity`` runs continuation fidelity on the
core's evaluation text; ``fidelity-table`` pools it.

``table --out-results FILE`` and ``fidelity-table --out-results FILE`` write the tables as a
results file (``icml.results``). Each JSON line (and the fidelity file) keeps the command that
made it, so the file's ``command`` is the whole chain, run from the repo root: every ``run``
(or the ``fidelity`` run), then the table command.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

POLICIES = ["capkv", "leverage", "snapkv", "streaming", "h2o", "knorm", "random"]
RATIOS = [0.25, 0.5, 0.75, 0.9]
SCRIPT = "plugins/capkv/benchmarks/longctx_bench.py"
TIMING = {"CapKV scoring / full prefill": {
    "timing": True, "why": "a ratio of two clock readings of one process on a shared machine"}}


def _command() -> str:
    """This invocation as run from the repo root."""
    return shlex.join(["python", SCRIPT, *sys.argv[1:]])


def _estimate(m: float, lo: float, hi: float) -> dict:
    return {"value": m, "lo": lo, "hi": hi}


def _chain(commands: list[str], last: str) -> str:
    """The commands that made the records (each once, first-seen order), then ``last``."""
    out: list[str] = []
    for c in commands:
        if c and c not in out:
            out.append(c)
    return " && ".join([*out, last])


def _model(threads: int):
    import torch

    torch.set_num_threads(threads)
    from icml.models import load_pretrained

    return load_pretrained("smollm2-135m-instruct")


def run(args) -> None:
    from icml_capkv.longctx import TASKS, evaluate_item, make_items

    model, tok = _model(args.threads)
    out = Path(args.out)
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["task"], r["length"], r["item"]))
    tasks = args.tasks.split(",") if args.tasks else list(TASKS)
    for length in [int(x) for x in args.lengths.split(",")]:
        for task in tasks:
            items = make_items(tok, task, length, args.n, seed=args.seed)
            for i, it in enumerate(items):
                if (task, length, i) in done:
                    continue
                t0 = time.perf_counter()
                rows = evaluate_item(model, it, args.policies.split(","), RATIOS)
                with out.open("a") as f:
                    f.write(json.dumps({"task": task, "length": length, "item": i,
                                        "answer": it.answer_text, "rows": rows,
                                        "seconds": time.perf_counter() - t0,
                                        "command": _command()}) + "\n")
                full = [r["correct"] for r in rows if r["policy"] == "full"]
                print(f"{task} L={length} item {i}: full {full} "
                      f"{time.perf_counter() - t0:.1f}s", flush=True)


def fidelity(args) -> None:
    from icml_capkv.longctx import continuation_fidelity_text

    model, tok = _model(args.threads)
    rows = continuation_fidelity_text(model, tok, args.context, args.n, POLICIES, RATIOS,
                                      cont_len=args.cont)
    Path(args.out).write_text(json.dumps({"context": args.context, "rows": rows,
                                          "command": _command()}))


def table(args) -> None:
    from icml_capkv.longctx import capkv_verdicts, summarize_items

    merged: dict = {}
    for f in args.inp.split(","):  # several files: rows of one item are merged, full row once
        for x in Path(f).read_text().splitlines():
            r = json.loads(x)
            key = (r["task"], r["length"], r["item"])
            if key in merged:
                merged[key]["rows"] += [row for row in r["rows"] if row["policy"] != "full"]
            else:
                merged[key] = r
    recs = list(merged.values())
    lines = []
    for (task, length, aware), s in sorted(summarize_items(recs).items()):
        lines.append(f"\n**{task}, {length} tokens, question-{'aware' if aware else 'agnostic'}"
                     f"** ({s['n']} items; full-cache accuracy {s['full_accuracy']:.2f})\n")
        lines.append("| policy | " + " | ".join(f"acc r={r}" for r in RATIOS) + " | " +
                     " | ".join(f"KL r={r}" for r in RATIOS) + " |")
        lines.append("|---" * (1 + 2 * len(RATIOS)) + "|")
        present = sorted({p for p, _ in s["correct"]}, key=lambda p: (
            POLICIES.index(p) if p in POLICIES else len(POLICIES), p))
        for p in present:
            cells = []
            for metric in ("correct", "kl"):
                for r in RATIOS:
                    m, lo, hi = s[metric][p, r]
                    cells.append(f"{m:.2f} [{lo:.2f}, {hi:.2f}]" if metric == "correct"
                                 else f"{m:.3g} [{lo:.2g}, {hi:.2g}]")
            lines.append(f"| {p} | " + " | ".join(cells) + " |")
        lines.append("\nCapKV verdicts: " + "; ".join(
            f"r={r} {m}: {v} (best other {b})" for r, m, v, b in capkv_verdicts(s, RATIOS)))
    t = [(r["rows"], r["length"]) for r in recs]
    for L in sorted({x[1] for x in t}):
        cap = [row["scoring_s"] for rows, ln in t if ln == L for row in rows
               if row["policy"] == "capkv" and row["ratio"] == RATIOS[0]]
        pre = [row["prefill_s"] for rows, ln in t if ln == L for row in rows
               if row["policy"] == "full"]
        if cap and pre:
            lines.append(f"\nCapKV scoring / full prefill at {L} tokens (same process, loaded "
                         f"machine): {sum(cap) / sum(pre):.3f}")
    text = "\n".join(lines)
    print(text)
    if args.md:
        Path(args.md).write_text(text + "\n")
    if args.out_results:
        path = _write(args, long_context_tables(recs), [r.get("command", "") for r in recs],
                      tolerance=TIMING)
        print(f"results file: {path}")


def long_context_tables(recs: list[dict]) -> list[dict]:
    """The results-file tables of ``table``: per task, length and mode the exact accuracy and
    KL [95% bootstrap CI over items] per policy and ratio; CapKV's verdicts; the scoring /
    prefill ratio per length."""
    from icml_capkv.longctx import capkv_verdicts, summarize_items

    from icml.results import make_table

    tables, verdicts = [], []
    cols = (["policy"] + [f"acc r={r}" for r in RATIOS] + [f"KL r={r}" for r in RATIOS])
    for (task, length, aware), s in sorted(summarize_items(recs).items()):
        mode = "aware" if aware else "agnostic"
        present = sorted({p for p, _ in s["correct"]}, key=lambda p: (
            POLICIES.index(p) if p in POLICIES else len(POLICIES), p))
        rows = [[p] + [_estimate(*s[metric][p, r]) for metric in ("correct", "kl")
                       for r in RATIOS] for p in present]
        tables.append(make_table(
            f"{task}, {length} tokens, question-{mode}: exact accuracy and KL [95% bootstrap "
            f"CI over items] ({s['n']} items; full-cache accuracy {s['full_accuracy']:.2f})",
            cols, rows, name=f"{task}-{length}-{mode}",
            formats={**{f"acc r={r}": ".2f" for r in RATIOS},
                     **{f"KL r={r}": ".3g" for r in RATIOS}}))
        verdicts += [[task, length, mode, r, m, v, b] for r, m, v, b in capkv_verdicts(s, RATIOS)]
    tables.append(make_table("Is CapKV best or tied-best? (tied = 95% intervals overlap with the "
                             "best other policy's)", ["task", "length", "mode", "ratio",
                                                      "metric", "verdict", "best other"],
                             verdicts, name="verdicts"))
    cost = []
    for L in sorted({r["length"] for r in recs}):
        cap = [row["scoring_s"] for r in recs if r["length"] == L for row in r["rows"]
               if row["policy"] == "capkv" and row["ratio"] == RATIOS[0]]
        pre = [row["prefill_s"] for r in recs if r["length"] == L for row in r["rows"]
               if row["policy"] == "full"]
        if cap and pre:
            cost.append([L, sum(cap) / sum(pre)])
    if cost:
        tables.append(make_table("CapKV scoring / full prefill (same process)",
                                 ["length", "CapKV scoring / full prefill"], cost, name="cost",
                                 formats={"CapKV scoring / full prefill": ".3f"}))
    return tables


def _write(args, tables: list[dict], commands: list[str], tolerance: dict | None = None):
    from icml import results

    return results.write(args.out_results, tables, command=_chain(commands, _command()),
                         plugin="capkv", seeds=[0], quick=False, threads=1,
                         tolerance=tolerance)


def fidelity_table(args) -> None:
    from icml_capkv.fidelity import bootstrap_ci, verdict

    d = json.loads(Path(args.inp).read_text())
    rows = d["rows"]
    n = len({r["doc"] for r in rows})
    print(f"\nContinuation fidelity, evaluation text, {d['context']}-token contexts, {n} documents")
    print("| policy | " + " | ".join(f"KL r={r}" for r in RATIOS) + " | " +
          " | ".join(f"top-1 r={r}" for r in RATIOS) + " |")
    print("|---" * (1 + 2 * len(RATIOS)) + "|")
    summ = {"kl": {}, "top1": {}}
    present = [p for p in POLICIES if any(x["policy"] == p for x in rows)]
    cells = []
    for p in present:
        out = []
        for key in ("kl", "top1"):
            for r in RATIOS:
                m, lo, hi = bootstrap_ci([[x[key] for x in rows if x["policy"] == p
                                           and x["ratio"] == r]], n_boot=1000)
                summ[key][p, r] = (m, lo, hi)
                out.append(f"{m:.3g} [{lo:.2g}, {hi:.2g}]")
        cells.append([p] + [_estimate(*summ[key][p, r]) for key in ("kl", "top1")
                            for r in RATIOS])
        print(f"| {p} | " + " | ".join(out) + " |")
    vrows = []
    if "capkv" in present and len(present) > 1:
        for r in RATIOS:
            vk, bk = verdict(summ["kl"], r)
            vt, bt = verdict(summ["top1"], r, lower=False)
            vrows.append([r, vk, bk, vt, bt])
        print("\nCapKV: " + "; ".join(f"r={r}: KL {vk} (best other {bk}), top-1 {vt}"
                                      for r, vk, bk, vt, _ in vrows))
    if args.out_results:
        from icml.results import make_table

        tables = [make_table(
            f"Continuation fidelity, evaluation text, {d['context']}-token contexts, {n} "
            "documents: KL and top-1 agreement [95% bootstrap CI over documents]",
            ["policy"] + [f"KL r={r}" for r in RATIOS] + [f"top-1 r={r}" for r in RATIOS],
            cells, name="fidelity", formats={f"KL r={r}": ".3g" for r in RATIOS})]
        if vrows:
            tables.append(make_table("Is CapKV best or tied-best? (tied = 95% intervals overlap "
                                     "with the best other policy's)",
                                     ["ratio", "KL", "best other (KL)", "top-1",
                                      "best other (top-1)"], vrows, name="fidelity-verdict"))
        path = _write(args, tables, [d.get("command", "")])
        print(f"results file: {path}")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("run")
    a.add_argument("--lengths", default="1024,2048,4096")
    a.add_argument("--tasks", default="")
    a.add_argument("--n", type=int, default=4)
    a.add_argument("--policies", default=",".join(POLICIES),
                   help="also snapkv_kvpress, knorm_kvpress (kvpress's own settings)")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    a.add_argument("--out", default="longctx.jsonl")
    f = sub.add_parser("fidelity")
    f.add_argument("--context", type=int, default=1024)
    f.add_argument("--cont", type=int, default=32)
    f.add_argument("--n", type=int, default=4)
    f.add_argument("--threads", type=int, default=1)
    f.add_argument("--out", default="fidelity.json")
    t = sub.add_parser("table")
    t.add_argument("--inp", default="longctx.jsonl")
    t.add_argument("--md", default="")
    t.add_argument("--out-results", default="", help="write the tables to this results file")
    ft = sub.add_parser("fidelity-table")
    ft.add_argument("--inp", default="fidelity.json")
    ft.add_argument("--out-results", default="", help="write the tables to this results file")
    args = ap.parse_args()
    {"run": run, "fidelity": fidelity, "table": table, "fidelity-table": fidelity_table}[
        args.cmd](args)


if __name__ == "__main__":
    main()
