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


def _ratios(text: str) -> list[float]:
    try:
        out = [float(x) for x in text.split(",") if x]
    except ValueError:
        out = []
    if not out or not all(0 < r < 1 for r in out):
        raise SystemExit(f"--ratios must be comma-separated numbers in (0, 1), got {text!r}")
    return out


def _present_ratios(rows) -> list[float]:
    """The compression ratios of a run's rows (the full cache's 0 left out), sorted."""
    return sorted({float(x["ratio"]) for x in rows if x["policy"] != "full"})
SCRIPT = "plugins/capkv/benchmarks/longctx_bench.py"


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


DTYPES = ("float32", "bfloat16")
MODES = {"agnostic": (False,), "aware": (True,), "both": (False, True)}


def _model(args):
    """SmolLM2-135M-Instruct on ``args.device`` in ``args.dtype`` (refused before loading when
    not one of ``DTYPES``)."""
    import torch

    if args.dtype not in DTYPES:
        raise SystemExit(f"--dtype must be one of {', '.join(DTYPES)}, got {args.dtype!r}")
    torch.set_num_threads(args.threads)
    from icml.models import load_pretrained

    model, tok = load_pretrained("smollm2-135m-instruct")
    return model.to(device=args.device, dtype=getattr(torch, args.dtype)), tok


def _policies(args) -> list[str]:
    from icml_capkv.longctx import check_policies

    pols = [p for p in args.policies.split(",") if p]
    try:
        check_policies(pols)
    except ValueError as e:
        raise SystemExit(f"--policies: {e}") from None
    return pols


def run(args) -> None:
    from icml_capkv.longctx import TASKS, evaluate_item, make_items

    policies = _policies(args)
    ratios = _ratios(args.ratios)
    if args.modes not in MODES:
        raise SystemExit(f"--modes must be one of {', '.join(MODES)}, got {args.modes!r}")
    model, tok = _model(args)
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
                rows = evaluate_item(model, it, policies, ratios, MODES[args.modes])
                with out.open("a") as f:
                    f.write(json.dumps({"task": task, "length": length, "item": i,
                                        "answer": it.answer_text, "rows": rows,
                                        "dtype": args.dtype,
                                        "seconds": time.perf_counter() - t0,
                                        "command": _command()}) + "\n")
                full = [r["correct"] for r in rows if r["policy"] == "full"]
                print(f"{task} L={length} item {i}: full {full} "
                      f"{time.perf_counter() - t0:.1f}s", flush=True)


def fidelity(args) -> None:
    from icml_capkv.longctx import continuation_fidelity_text

    policies = _policies(args)
    ratios = _ratios(args.ratios)
    model, tok = _model(args)
    t0 = time.perf_counter()
    rows = continuation_fidelity_text(model, tok, args.context, args.n, policies, ratios,
                                      cont_len=args.cont)
    Path(args.out).write_text(json.dumps({"context": args.context, "rows": rows,
                                          "dtype": args.dtype,
                                          "seconds": time.perf_counter() - t0,
                                          "command": _command()}))


def _load(files: str) -> list[dict]:
    """Records of ``run`` from comma-separated JSON-lines files; rows of one item in several
    files are merged (the full row once)."""
    merged: dict = {}
    for f in files.split(","):
        for x in Path(f).read_text().splitlines():
            r = json.loads(x)
            key = (r["task"], r["length"], r["item"])
            if key in merged:
                merged[key]["rows"] += [row for row in r["rows"] if row["policy"] != "full"]
            else:
                merged[key] = r
    return list(merged.values())


def table(args) -> None:
    from icml.results import render_table

    recs = _load(args.inp)
    fp32 = _load(args.fp32) if args.fp32 else []
    tables = long_context_tables(recs, fp32)
    text = "\n\n".join(f"**{t['title']}**\n\n{render_table(t)}" for t in tables)
    print(text)
    if args.md:
        Path(args.md).write_text(text + "\n")
    if args.out_results:
        cmds = [r.get("command", "") for r in recs] + [r.get("command", "") for r in fp32]
        path = _write(args, tables, cmds, tolerance=TIMING)
        print(f"results file: {path}")


def _order(policies) -> list[str]:
    """Table order: the POLICIES, then the tau arms by tau, then anything else."""
    from icml_capkv.longctx import tau_of

    def key(p: str):
        if p in POLICIES:
            return (0, POLICIES.index(p), p)
        t = tau_of(p)
        return (1, t, p) if t is not None else (2, 0.0, p)

    return sorted(set(policies), key=key)


def _tau(arm: str, tau: float) -> float | None:
    """The tau of a CapKV arm (``capkv`` = the configured ``tau``), None for other policies."""
    from icml_capkv.longctx import tau_of

    return tau if arm == "capkv" else tau_of(arm)


def _verdict_rows(cells: dict, arms: list[str], tau: float, with_tau: bool) -> list[list]:
    from icml_capkv.longctx import compare_arm

    rows = []
    for (task, length, aware), vals in sorted(cells.items()):
        present = {p for p, _ in vals}
        for arm in [a for a in arms if a in present]:
            for r in sorted({rr for p, rr in vals if p != "full"}):
                acc = compare_arm(vals, arm, r, "correct", lower=False)
                kl = compare_arm(vals, arm, r, "kl", lower=True)
                head = [task, length, "aware" if aware else "agnostic"]
                if with_tau:
                    head.append(_tau(arm, tau))
                rows.append(head + [r, acc["n"], acc["mean"], f"{acc['best']} "
                                    f"{acc['best_mean']:.2f}", acc["diff"], acc["mde"],
                                    acc["verdict"], kl["mean"],
                                    f"{kl['best']} {kl['best_mean']:.3g}", kl["diff"],
                                    kl["mde"], kl["verdict"]])
    return rows


VERDICT_COLS = ["ratio", "items", "accuracy", "best other (acc.)", "acc. diff [95% CI]",
                "acc. MDE", "acc. verdict", "KL", "best other (KL)", "KL diff [95% CI]",
                "KL MDE", "KL verdict"]
VERDICT_FMT = {"accuracy": ".2f", "acc. diff [95% CI]": ".2f", "acc. MDE": ".2f",
               "KL": ".3g", "KL diff [95% CI]": ".3g", "KL MDE": ".3g"}
TAU_ARMS = ["leverage", "capkv_tau1", "capkv_tau2", "capkv", "capkv_tau10"]
RULE = ("paired over items: diff = arm - the competitor with the best mean (SnapKV, "
        "StreamingLLM, H2O, key-norm, random, and pure leverage for tau > 0), 95% bootstrap "
        "CI; ahead / behind when the CI excludes 0, else tied; MDE at 80% power, 5% level")


def long_context_tables(recs: list[dict], fp32: list[dict] | None = None,
                        tau: float = 5.0) -> list[dict]:
    """The results-file tables of ``table``: per task, length and mode the exact accuracy and
    KL [95% bootstrap CI over items] per policy and ratio; CapKV's paired verdicts (tau
    ``tau``) and the tau sweep's, each with its MDE; the bfloat16-vs-float32 check when
    ``fp32`` records of the same items are given; the cost."""
    from icml_capkv.longctx import cell_values, summarize_items

    from icml.results import make_table

    tables = [screen_table(recs)]
    ratios = _present_ratios(x for r in recs for x in r["rows"])
    recs = [r for r in recs if any(x["policy"] != "full" for x in r["rows"])]
    if not recs:
        return tables
    cols = (["policy"] + [f"acc r={r}" for r in ratios] + [f"KL r={r}" for r in ratios])
    summ = summarize_items(recs)
    for (task, length, aware), s in sorted(summ.items()):
        mode = "aware" if aware else "agnostic"
        present = _order(p for p, _ in s["correct"])
        rows = [[p] + [_estimate(*s[metric][p, r]) for metric in ("correct", "kl")
                       for r in ratios] for p in present]
        tables.append(make_table(
            f"{task}, {length} tokens, question-{mode}: exact accuracy and KL [95% bootstrap "
            f"CI over items] ({s['n']} items; full-cache accuracy {s['full_accuracy']:.2f})",
            cols, rows, name=f"{task}-{length}-{mode}",
            formats={**{f"acc r={r}": ".2f" for r in ratios},
                     **{f"KL r={r}": ".3g" for r in ratios}}))
    cells = cell_values(recs)
    head = ["task", "length", "mode"]
    tables.append(make_table(
        f"Is CapKV (tau {tau:g}) ahead of, tied with or behind the best other policy? ({RULE})",
        head + VERDICT_COLS, _verdict_rows(cells, ["capkv"], tau, False), name="verdicts",
        formats=VERDICT_FMT))
    present = {p for c in cells.values() for p, _ in c}
    if len(present & set(TAU_ARMS)) > 2:
        tables.append(make_table(
            f"tau sweep: CapKV at tau 0 (= pure leverage), 1, 2, {tau:g}, 10 against the best "
            f"other policy ({RULE})", head + ["tau"] + VERDICT_COLS,
            _verdict_rows(cells, TAU_ARMS, tau, True), name="tau-sweep", formats=VERDICT_FMT))
    if fp32:
        tables.append(dtype_table(recs, fp32, summ))
    tables.append(cost_table(recs + list(fp32 or [])))
    return tables


def screen_table(recs: list[dict]) -> dict:
    """Full-cache exact accuracy [95% bootstrap CI over items] per task, length and mode: which
    tasks the model can do at all (a task at the floor carries no signal)."""
    from icml_capkv.fidelity import bootstrap_ci

    from icml.results import make_table

    by: dict = {}
    for r in recs:
        for x in r["rows"]:
            if x["policy"] == "full":
                by.setdefault((r["task"], r["length"], x["question_aware"]), []).append(
                    x["correct"])
    rows = [[t, L, "aware" if a else "agnostic", len(v), _estimate(*bootstrap_ci([v],
                                                                                 n_boot=1000))]
            for (t, L, a), v in sorted(by.items())]
    return make_table("Full-cache exact accuracy [95% bootstrap CI over items]",
                      ["task", "length", "mode", "items", "full-cache accuracy"], rows,
                      name="full-cache", formats={"full-cache accuracy": ".2f"})


def dtype_table(recs: list[dict], fp32: list[dict], summ: dict) -> dict:
    """bfloat16 (``recs``) against float32 (``fp32``) on the float32 records' items: per
    policy, how many exact grades (item x ratio) agree, the largest change of a cell's mean
    accuracy and KL over the ratios, and whether every change is inside the half-width of the
    main (bfloat16) table's 95% interval of that cell."""
    from icml.results import make_table

    bf = {(r["task"], r["length"], r["item"]): r for r in recs}
    pairs = [(bf[k], r) for r in fp32 if (k := (r["task"], r["length"], r["item"])) in bf]
    if not pairs:
        raise SystemExit("--fp32: none of its items is in --inp")
    by: dict = {}
    for b, f in pairs:
        fr = {(x["policy"], x["ratio"], x["question_aware"]): x for x in f["rows"]}
        for x in b["rows"]:
            y = fr.get((x["policy"], x["ratio"], x["question_aware"]))
            if y is not None:
                key = (b["task"], b["length"], x["question_aware"], x["policy"], x["ratio"])
                by.setdefault(key, []).append((x, y))
    rows = []
    for p in _order({k[3] for k in by}):
        agree = total = 0
        d_acc = d_kl = 0.0
        inside = True
        for (task, length, aware, pol, r), xs in by.items():
            if pol != p:
                continue
            agree += sum(x["correct"] == y["correct"] for x, y in xs)
            total += len(xs)
            da = abs(sum(x["correct"] - y["correct"] for x, y in xs)) / len(xs)
            dk = abs(sum(x["kl"] - y["kl"] for x, y in xs)) / len(xs)
            d_acc, d_kl = max(d_acc, da), max(d_kl, dk)
            if p != "full":
                s = summ[task, length, aware]
                for metric, d in (("correct", da), ("kl", dk)):
                    _, lo, hi = s[metric][p, r]
                    inside &= d <= (hi - lo) / 2 + 1e-12
        rows.append([p, f"{agree}/{total}", d_acc, d_kl, "yes" if inside else "no"])
    n = len(pairs)
    return make_table(
        f"bfloat16 against float32 on the first {n} items (same items, same settings): exact "
        "grades that agree (item x ratio), the largest change of a cell's mean over the ratios, "
        "and whether each change lies inside half the main table's 95% interval of that cell",
        ["policy", "grades equal", "max |d accuracy|", "max |d KL|", "within the CIs"], rows,
        name="dtype-check", formats={"max |d accuracy|": ".3f", "max |d KL|": ".3g"})


def cost_table(recs: list[dict]) -> dict:
    """Per task and length: items, mean seconds per item (one shared prefill, every policy's
    scoring, every policy x ratio decoded in one batch per ratio) and its parts."""
    from icml.results import make_table

    rows = []
    for task, L, dt in sorted({(r["task"], r["length"], r.get("dtype", "float32"))
                               for r in recs}):
        rs = [r for r in recs if (r["task"], r["length"], r.get("dtype", "float32")) ==
              (task, L, dt)]
        full = [x for r in rs for x in r["rows"] if x["policy"] == "full"]
        n = len(rs)
        pre = sum(r["rows"][0]["prefill_s"] for r in rs) / n
        # each policy is scored once per mode: its rows at the first ratio
        r0 = min(_present_ratios(x for r in rs for x in r["rows"]), default=None)
        first = [x for r in rs for x in r["rows"] if x["ratio"] == r0]
        score = sum(x["scoring_s"] for x in first if x["policy"] != "full") / n
        dec = sum(x.get("decode_s", 0.0) for x in full) / n
        cap = [x["scoring_s"] for x in first if x["policy"] == "capkv"]
        arms = len({x["policy"] for x in rs[0]["rows"]}) - 1
        rows.append([task, L, dt, n, arms, sum(r["seconds"] for r in rs) / n, pre, score, dec,
                     sum(cap) / len(cap) / pre if cap else None, sum(r["seconds"] for r in rs)])
    return make_table("Cost per item (one shared prefill for all policies of an item; seconds "
                      "on one thread of the shared 2-core machine)",
                      ["task", "length", "dtype", "items", "arms", "s / item", "prefill s",
                       "scoring s (all arms)", "decode s (all arms x ratios)",
                       "CapKV scoring / full prefill", "total s"], rows, name="cost",
                      formats={c: ".3g" for c in COST_COLS})


COST_COLS = ["s / item", "prefill s", "scoring s (all arms)", "decode s (all arms x ratios)",
             "CapKV scoring / full prefill", "total s"]
TIMING = {c: {"timing": True, "why": "clock readings of one process on a shared machine"}
          for c in COST_COLS}


def _write(args, tables: list[dict], commands: list[str], tolerance: dict | None = None):
    from icml import results

    return results.write(args.out_results, tables, command=_chain(commands, _command()),
                         plugin="capkv", seeds=[0], quick=False, threads=1,
                         tolerance=tolerance)


def _doc_values(rows: list[dict]) -> dict:
    """Continuation rows -> ``{(policy, ratio): {"kl": [...], "top1": [...]}}`` in document
    order."""
    out: dict = {}
    for x in sorted(rows, key=lambda x: x["doc"]):
        v = out.setdefault((x["policy"], x["ratio"]), {"kl": [], "top1": []})
        v["kl"].append(float(x["kl"]))
        v["top1"].append(float(x["top1"]))
    return out


def fidelity_tables(d: dict, tau: float = 5.0) -> list[dict]:
    """The continuation tables: KL and top-1 agreement [95% CI over documents] per policy and
    ratio; the paired verdicts of every CapKV arm (tau sweep) with their MDEs."""
    from icml_capkv.fidelity import bootstrap_ci
    from icml_capkv.longctx import compare_arm

    from icml.results import make_table

    rows = d["rows"]
    n = len({r["doc"] for r in rows})
    vals = _doc_values(rows)
    ratios = _present_ratios(rows)
    present = _order(p for p, _ in vals)
    cells = [[p] + [_estimate(*bootstrap_ci([vals[p, r][key]], n_boot=1000))
                    for key in ("kl", "top1") for r in ratios] for p in present]
    tables = [make_table(
        f"Continuation fidelity, evaluation text, {d['context']}-token contexts, {n} "
        "documents: KL and top-1 agreement [95% bootstrap CI over documents]",
        ["policy"] + [f"KL r={r}" for r in ratios] + [f"top-1 r={r}" for r in ratios],
        cells, name="fidelity", formats={**{f"KL r={r}": ".3g" for r in ratios},
                                         **{f"top-1 r={r}": ".3f" for r in ratios}})]
    vrows = []
    for arm in [a for a in TAU_ARMS if a in present]:
        for r in ratios:
            kl = compare_arm(vals, arm, r, "kl", lower=True)
            t1 = compare_arm(vals, arm, r, "top1", lower=False)
            vrows.append([_tau(arm, tau), r, kl["n"], kl["mean"], f"{kl['best']} "
                          f"{kl['best_mean']:.3g}", kl["diff"], kl["mde"], kl["verdict"],
                          t1["mean"], f"{t1['best']} {t1['best_mean']:.3f}", t1["diff"],
                          t1["mde"], t1["verdict"]])
    if vrows:
        tables.append(make_table(
            "Continuation: CapKV at each tau against the best other policy "
            f"({RULE.replace('over items', 'over documents')}; tau 0 is pure leverage)",
            ["tau", "ratio", "documents", "KL", "best other (KL)", "KL diff [95% CI]",
             "KL MDE", "KL verdict", "top-1", "best other (top-1)", "top-1 diff [95% CI]",
             "top-1 MDE", "top-1 verdict"], vrows, name="fidelity-verdict",
            formats={"KL": ".3g", "KL diff [95% CI]": ".3g", "KL MDE": ".3g", "top-1": ".3f",
                     "top-1 diff [95% CI]": ".3f", "top-1 MDE": ".3f"}))
    if "seconds" in d:
        tables.append(make_table(
            "Cost of the continuation run (all documents, every arm x ratio; one thread of the "
            "shared 2-core machine)", ["documents", "arms", "total s", "s / document"],
            [[n, len(present), d["seconds"], d["seconds"] / n]], name="fidelity-cost",
            formats={"total s": ".3g", "s / document": ".3g"}))
    return tables


FID_TIMING = {c: {"timing": True, "why": "clock readings of one process on a shared machine"}
              for c in ("total s", "s / document")}


def fidelity_table(args) -> None:
    from icml.results import render_table

    d = json.loads(Path(args.inp).read_text())
    tables = fidelity_tables(d)
    print("\n\n".join(f"**{t['title']}**\n\n{render_table(t)}" for t in tables))
    if args.out_results:
        path = _write(args, tables, [d.get("command", "")], tolerance=FID_TIMING)
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
    a.add_argument("--modes", default="both", help=f"question modes: {', '.join(MODES)}")
    a.add_argument("--ratios", default=",".join(map(str, RATIOS)))
    a.add_argument("--out", default="longctx.jsonl")
    f = sub.add_parser("fidelity")
    f.add_argument("--context", type=int, default=1024)
    f.add_argument("--cont", type=int, default=32)
    f.add_argument("--n", type=int, default=4)
    f.add_argument("--policies", default=",".join(POLICIES))
    f.add_argument("--ratios", default=",".join(map(str, RATIOS)))
    f.add_argument("--out", default="fidelity.json")
    for p in (a, f):
        p.add_argument("--threads", type=int,
                       default=int(os.environ.get("OMP_NUM_THREADS", "1")))
        p.add_argument("--dtype", default="float32", help=f"one of {', '.join(DTYPES)}")
        p.add_argument("--device", default="cpu", help="a torch device (cpu, cuda, ...)")
    t = sub.add_parser("table")
    t.add_argument("--inp", default="longctx.jsonl")
    t.add_argument("--md", default="")
    t.add_argument("--fp32", default="", help="float32 records of some of --inp's items: adds "
                   "the bfloat16-vs-float32 table")
    t.add_argument("--out-results", default="", help="write the tables to this results file")
    ft = sub.add_parser("fidelity-table")
    ft.add_argument("--inp", default="fidelity.json")
    ft.add_argument("--out-results", default="", help="write the tables to this results file")
    args = ap.parse_args()
    {"run": run, "fidelity": fidelity, "table": table, "fidelity-table": fidelity_table}[
        args.cmd](args)


if __name__ == "__main__":
    main()
