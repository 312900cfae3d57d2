"""Powered pass@k of LED on SmolLM2-135M-Instruct (issue 63): >= 100 prompts, 64 new tokens,
three temperatures, LED vs temperature sampling vs LED's own base path vs DoLa.

Two commands, run in this order (the second's settings are fixed by the first's rule, written
here before the pilot ran):

    python plugins/led/benchmarks/powered.py pilot \
        --out-results plugins/led/results/powered_pilot.json
    python plugins/led/benchmarks/powered.py final --families <kept> \
        --out-results plugins/led/results/powered.json

**Selection rule (the pilot; committed before it ran, never looks at LED).** The pilot suite is
``make_suite(PILOT_PROMPTS, seed=PILOT_SEED)``: every family of :mod:`icml_led.suite` in every
answer format, disjoint in seed from the final suite (seed ``FINAL_SEED``). Only temperature
sampling (top-k 20, top-p 0.95) is scored for selection, at the middle temperature
``SELECT_T``, with the final run's samples, token cap and dtype. Per family, pass@1 is the mean
over its prompts. (1) Families with pass@1 below ``FLOOR`` or above ``CEILING`` are dropped (no
room to move). (2) While the pooled pass@1 of the kept families (over their prompts) is above
``BAND[1]`` the easiest kept family is dropped, while below ``BAND[0]`` the hardest. The kept
families, in ``FAMILIES`` order, are what ``final --families`` takes; the pilot prints the
command. The pilot also times every arm on a few prompts (bfloat16 and float32) to size the
final run; those arms' accuracies are not computed.

**The final run.** ``make_suite(prompts, seed=FINAL_SEED, families=kept)`` (all three answer
formats), 16 samples per prompt, at most 64 new tokens, temperatures ``TEMPERATURES``, arms:
``sampling`` (top-k 20, top-p 0.95), ``dola`` (transformers' algorithm, high layers, same
sampler), ``top8`` (LED's base path: LED with d = 1) and ``led`` (``LEDConfig()``: the official
d = 8, k = 8, no final norm, confidence gate). One generator per sample seeded from (seed,
prompt, sample), the same for every arm: the arms are paired by prompt and share their random
numbers. The 16 samples of 8 prompts are one batch (128 rows); each prompt is prefilled once
for all arms and temperatures; finished rows leave the batch every 8 tokens
(``generate_compacting``: the same per-row draws). The model runs in bfloat16; a float32 rerun
of sampling and LED at ``SELECT_T`` on the first ``DTYPE_PROMPTS`` prompts is the subset check
(bfloat16 minus float32 pass@1, paired by prompt, in the results file).

Statistics (:mod:`icml.stats`): per prompt, pass@k is the unbiased estimator from the 16
samples; CIs are percentile bootstraps over prompts; LED-minus-baseline differences are paired
by prompt, with their MDE at alpha 0.05 and power 0.8 from the bootstrap SE of the per-prompt
differences (``mde_from_samples``); pass@16 (solved at least once, 0/1) also gets McNemar's
exact test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
from icml_led.config import LEDConfig
from icml_led.evaluation import Method, run_chat_method
from icml_led.generate import DoLaDecoding, LEDDecoding, SamplingDecoding
from icml_led.metrics import pass_at_k
from icml_led.suite import FAMILIES, make_suite

HERE = Path(__file__).resolve().parent

# -- settings fixed before the pilot ran ---------------------------------------------------------
PILOT_SEED, FINAL_SEED = 101, 0
PILOT_PROMPTS = 36                  # 2 per (family, format) pair
SELECT_T = 0.8                      # the middle temperature
TEMPERATURES = (0.6, 0.8, 1.0)
FLOOR, CEILING = 0.05, 0.95         # a family outside is dropped
BAND = (0.2, 0.6)                   # pooled pass@1 of the kept families
SAMPLES = 16
MAX_NEW_TOKENS = 64
PER_BATCH = 8                       # prompts per batch (x 16 samples = 128 rows)
SEGMENT = 8                         # finished rows leave the batch every 8 tokens
DTYPE_PROMPTS = 16
ARMS = ("sampling", "dola", "top8", "led")
KS = (1, 4, 16)
TIMING = {"timing": True, "why": "clock reading on a shared 2-core CPU (load in the file)"}


def arms(temperature: float) -> dict[str, Method]:
    samp = {"do_sample": True, "temperature": temperature, "top_k": 20, "top_p": 0.95}
    led_kw = {"do_sample": True, "temperature": temperature}
    base = LEDConfig(depth=1)
    return {
        "sampling": Method("sampling (top-k 20, top-p 0.95)", lambda g: SamplingDecoding(g),
                           samp),
        "dola": Method("dola (high)", lambda g: DoLaDecoding("high", 0.1, g), samp),
        "top8": Method("top-8 (LED d=1)", lambda g: LEDDecoding(base, g), led_kw),
        "led": Method("led (d=8, k=8)", lambda g: LEDDecoding(LEDConfig(), g), led_kw),
    }


def select_families(per_family: dict[str, list[int]], samples: int) -> tuple[list[str], list]:
    """The selection rule on the pilot's per-family correct counts (sampling only). Returns the
    kept families (in ``FAMILIES`` order) and the log of the decisions."""
    p1 = {f: statistics.mean(c / samples for c in cs) for f, cs in per_family.items()}
    log = []
    kept = []
    for f in FAMILIES:
        if f not in p1:
            continue
        if p1[f] < FLOOR:
            log.append((f, p1[f], "dropped: floor"))
        elif p1[f] > CEILING:
            log.append((f, p1[f], "dropped: ceiling"))
        else:
            kept.append(f)

    def pooled(fs: list[str]) -> float:
        vals = [c / samples for f in fs for c in per_family[f]]
        return statistics.mean(vals) if vals else float("nan")

    while len(kept) > 1 and not BAND[0] <= pooled(kept) <= BAND[1]:
        drop = (max if pooled(kept) > BAND[1] else min)(kept, key=lambda f: p1[f])
        kept.remove(drop)
        log.append((drop, p1[drop], "dropped: band"))
    for f in kept:
        log.append((f, p1[f], "kept"))
    return kept, log


def load_model(dtype: str):
    from icml.models import load_pretrained

    model, tok = load_pretrained("smollm2-135m-instruct",
                                 dtype=getattr(torch, dtype))
    model.eval()
    tok.padding_side = "left"
    return model, tok


def run_arm(model, tok, problems, method, *, seed, memo, args) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    r = run_chat_method(model, tok, problems, method, num_samples=args.samples, seed=seed,
                        max_new_tokens=args.max_new_tokens, problems_per_batch=args.per_batch,
                        prefill_memo=memo, compact_every=args.segment)
    lengths = [len(tok(t, add_special_tokens=False)["input_ids"]) for x in r.texts for t in x]
    return {"name": method.name, "correct": r.correct, "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0, "tokens": r.tokens, "steps": r.steps,
            "explored": r.explored_fraction,
            "mean_reply_tokens": statistics.mean(lengths),
            "capped": sum(n >= args.max_new_tokens for n in lengths) / len(lengths),
            "texts_sha256": hashlib.sha256(json.dumps(r.texts).encode()).hexdigest(),
            "first_texts": [x[0] for x in r.texts]}


def mid_t(args) -> float:
    """The middle temperature of the run (``SELECT_T`` by default): the float32 check's."""
    return args.temperatures[len(args.temperatures) // 2]


def prefill(model, tok, problems, args, memo: dict) -> None:
    """Fill ``memo`` with every prompt batch's KV cache (as ``run_chat_method`` batches them),
    so no arm's clock includes the prefill the arms share."""
    from icml_led.evaluation import shared_prefix_cache

    for i in range(0, len(problems), args.per_batch):
        enc = tok([p.prompt(tok) for p in problems[i:i + args.per_batch]], return_tensors="pt",
                  padding=True, add_special_tokens=False)
        shared_prefix_cache(model, enc["input_ids"], enc["attention_mask"], 1, memo)


def per_prompt(correct: list[int], n: int, k: int) -> list[float]:
    return [pass_at_k(n, c, k) for c in correct]


# -- pilot -----------------------------------------------------------------------------------------
def pilot(args, log) -> list[dict]:
    from icml.results import make_table

    model, tok = load_model(args.dtype)
    problems = make_suite(PILOT_PROMPTS, seed=PILOT_SEED)
    memo: dict = {}
    run = run_arm(model, tok, problems, arms(SELECT_T)["sampling"], seed=PILOT_SEED + 1,
                  memo=memo, args=args)
    log(f"pilot sampling T={SELECT_T}: {run['seconds']:.0f} s, {run['tokens']} tokens")
    per_family: dict[str, list[int]] = {}
    for p, c in zip(problems, run["correct"]):
        per_family.setdefault(p.family, []).append(c)
    kept, decisions = select_families(per_family, args.samples)
    rows = [[f, len(per_family[f]), p, why] for f, p, why in decisions]
    pooled = statistics.mean(c / args.samples for f in kept for c in per_family[f])
    rows.append(["kept, pooled", sum(len(per_family[f]) for f in kept), pooled,
                 ",".join(kept)])
    tables = [make_table(f"selection: sampling pass@1 at T={SELECT_T} on the pilot suite "
                         f"(seed {PILOT_SEED}, {PILOT_PROMPTS} prompts x {args.samples} "
                         f"samples, {args.max_new_tokens} new tokens, {args.dtype})",
                         ["family", "prompts", "pass@1", "decision"], rows, name="selection",
                         formats={"pass@1": ".3f"})]
    # cost probe: every arm on a few kept-family prompts (accuracies not computed)
    probe = make_suite(args.per_batch, seed=PILOT_SEED + 2, families=tuple(kept or FAMILIES))
    cost_rows = []
    ref = None
    for dtype in (args.dtype, "float32"):
        m, t = (model, tok) if dtype == args.dtype else load_model(dtype)
        memo = {}
        prefill(m, t, probe, args, memo)
        for key in (ARMS if dtype == args.dtype else ("sampling", "led")):
            r = run_arm(m, t, probe, arms(SELECT_T)[key], seed=PILOT_SEED + 3, memo=memo,
                        args=args)
            per_prompt_s = r["seconds"] / len(probe)
            ref = per_prompt_s if (dtype, key) == (args.dtype, "sampling") else ref
            cost_rows.append([dtype, r["name"], r["tokens"], r["mean_reply_tokens"],
                              r["capped"], 1000 * r["seconds"] / r["tokens"], per_prompt_s,
                              per_prompt_s / ref])
            log(f"cost {dtype} {key}: {r['seconds']:.0f} s, {r['tokens']} tokens")
    bf = {r[1]: r[6] for r in cost_rows if r[0] == args.dtype}
    per_temp = sum(bf.values())
    n_final = final_count(len(kept) or len(FAMILIES))
    est = per_temp * n_final * len(TEMPERATURES) + DTYPE_PROMPTS * sum(
        r[6] for r in cost_rows if r[0] == "float32")
    tables.append(make_table(
        f"cost probe at T={SELECT_T} ({len(probe)} prompts x {args.samples} samples, one "
        "batch, finished rows leave every 8 tokens); estimate of the final run: "
        f"{n_final} prompts x {len(TEMPERATURES)} temperatures x 4 arms + the float32 check",
        ["dtype", "arm", "tokens", "mean reply tokens", "capped at 64", "ms/token",
         "s/prompt", "vs sampling"], cost_rows, name="cost-probe",
        formats={"mean reply tokens": ".1f", "capped at 64": ".3f", "ms/token": ".1f",
                 "s/prompt": ".2f", "vs sampling": ".2f"}))
    tables.append(make_table("final run, estimated from the probe", ["prompts", "estimated s"],
                             [[n_final, est]], name="estimate", formats={"estimated s": ".0f"}))
    print(f"kept families: {','.join(kept)}; pooled pass@1 {pooled:.3f}; estimated final "
          f"run {est:.0f} s at one thread")
    print("final command: python plugins/led/benchmarks/powered.py final --families "
          f"{','.join(kept)} --out-results plugins/led/results/powered.json")
    return tables


def final_count(n_families: int) -> int:
    """The smallest multiple of (families x 3 formats) that is >= 100 prompts."""
    unit = n_families * 3
    return -(-100 // unit) * unit


# -- final -----------------------------------------------------------------------------------------
def final(args, log) -> tuple[list[dict], dict]:

    fams = tuple(args.families)
    n = args.prompts or final_count(len(fams))
    problems = make_suite(n, seed=FINAL_SEED, families=fams)
    model, tok = load_model(args.dtype)
    memo: dict = {}
    prefill(model, tok, problems, args, memo)
    runs: dict[str, dict] = {}
    for t, key in cells_of(args):
        r = run_arm(model, tok, problems, arms(t)[key], seed=FINAL_SEED + 1, memo=memo,
                    args=args)
        r["T"] = t
        runs[f"{t:g}/{key}"] = r
        log(f"T={t:g} {key}: pass@1 "
            f"{statistics.mean(per_prompt(r['correct'], args.samples, 1)):.3f} "
            f"({r['seconds']:.0f} s, {r['tokens']} tokens)")
    check: dict[str, dict] = {}
    check_t = args.check_t if args.check_t is not None else mid_t(args)
    if args.dtype_prompts:
        m32, t32 = load_model("float32")
        memo32: dict = {}
        sub = problems[:args.dtype_prompts]
        prefill(m32, t32, sub, args, memo32)
        for key in ("sampling", "led"):
            if key not in args.arms:
                continue
            check[key] = run_arm(m32, t32, sub, arms(check_t)[key], seed=FINAL_SEED + 1,
                                 memo=memo32, args=args)
            log(f"float32 check {key}: {check[key]['seconds']:.0f} s")
    tables = tables_from(runs, check, args, n, check_t=check_t) if not args.raw_out else []
    raw = {"problems": [p.__dict__ for p in problems], "runs": runs, "float32": check,
           "float32_T": check_t if check else None, "settings": settings_of(args),
           "process": {"cells": [f"{t:g}/{k}" for t, k in cells_of(args)],
                       "threads": args.threads, "wall_s": time.perf_counter() - args.t0,
                       "cpu_s": time.process_time(), "load": [args.load0, _load()]}}
    return tables, raw


def _load() -> float | None:
    from icml.results import load_average

    return load_average()


def cells_of(args) -> list[tuple[float, str]]:
    """The (temperature, arm) cells a final run decodes: ``--cells`` or temperatures x arms."""
    if args.cells:
        return args.cells
    return [(t, key) for t in args.temperatures for key in args.arms]


def settings_of(args) -> dict:
    return {"families": list(args.families), "samples": args.samples,
            "max_new_tokens": args.max_new_tokens, "per_batch": args.per_batch,
            "segment": args.segment, "dtype": args.dtype}


# -- merge -----------------------------------------------------------------------------------------
def merge(args, log) -> tuple[list[dict], dict]:
    """One table from the raw files of several final runs (parts of the grid run as separate
    processes): the same problems, settings and generators are required, each (T, arm) cell
    must come from exactly one part; the float32 check is taken from the part that has one."""
    parts = [json.loads(Path(f).read_text()) for f in args.parts]
    runs, check, check_t = merge_raws(args.parts, parts, args)
    log(f"merged {len(runs)} cells from {len(parts)} parts")
    tables = tables_from(runs, check, args, len(parts[0]["problems"]), check_t=check_t,
                         cpu=True)
    tables.append(processes_table(args.parts, runs))
    return tables, None


def merge_raws(names: list[str], parts: list[dict], args) -> tuple[dict, dict, float | None]:
    """The cells of several raw final-run files as one grid (see :func:`merge`); sets
    ``args.temperatures`` to the grid's."""
    problems = parts[0]["problems"]
    runs: dict[str, dict] = {}
    check: dict = {}
    check_t = None
    for f, raw in zip(names, parts):
        if raw["problems"] != problems:
            raise SystemExit(f"merge: {f} has other problems than {names[0]}")
        st = raw.get("settings")
        if st is not None and st != settings_of(args):
            raise SystemExit(f"merge: {f} was run with {st}, this merge has "
                             f"{settings_of(args)}")
        for cell, r in raw["runs"].items():
            if cell in runs:
                raise SystemExit(f"merge: cell {cell} is in two parts")
            runs[cell] = dict(r, part=Path(f).stem)
        if raw.get("float32"):
            if check:
                raise SystemExit("merge: two parts have a float32 check")
            check = raw["float32"]
            ts = {r["T"] for r in raw["runs"].values()}
            check_t = raw.get("float32_T") or (ts.pop() if len(ts) == 1 else None)
            if check_t is None:
                raise SystemExit(f"merge: {f}: the float32 check's temperature is unknown")
    order = {a: i for i, a in enumerate(ARMS)}
    runs = dict(sorted(runs.items(), key=lambda kv: (kv[1]["T"], order[kv[0].split("/")[1]])))
    args.temperatures = sorted({r["T"] for r in runs.values()})
    return runs, check, check_t


#: CPU seconds per cell by arm (0.2.8's grid, 105 prompts, after 0.2.9's exact speed-ups of
#: top-p and DoLa), and of the float32 check: only used to balance the grid's workers
CELL_COST = {"sampling": 230.0, "dola": 730.0, "top8": 225.0, "led": 265.0}
CHECK_COST = 60.0


def balance(cells: list[tuple[float, str]], workers: int, check: bool) -> tuple[list, int]:
    """Longest-first assignment of the cells to ``workers`` processes by :data:`CELL_COST`;
    the float32 check goes to the least loaded one. Returns (cells per worker, check worker)."""
    groups: list[list] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for c in sorted(cells, key=lambda c: -CELL_COST[c[1]]):
        i = load.index(min(load))
        groups[i].append(c)
        load[i] += CELL_COST[c[1]]
    w = load.index(min(load))
    groups = [sorted(g) for g in groups]
    return groups, (w if check else -1)


def grid(args, log) -> tuple[list[dict], dict]:
    """The whole grid in one command: ``--workers`` processes side by side (one torch thread
    each), each running ``final --cells <its share>`` into a raw file, then the merge. A cell's
    tokens do not depend on the process that decodes it (per-sample generators, the same
    prefill), so the split changes no number, only the wall time."""
    import subprocess
    import tempfile

    cells = cells_of(args)
    groups, check_w = balance(cells, args.workers, args.dtype_prompts > 0)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        procs, names = [], []
        for i, g in enumerate(groups):
            if not g:
                continue
            raw = str(Path(tmp) / f"worker{i}.json")
            cmd = [sys.executable, str(Path(__file__).resolve()), "final",
                   "--families", ",".join(args.families), "--prompts", str(args.prompts),
                   "--samples", str(args.samples), "--max-new-tokens", str(args.max_new_tokens),
                   "--per-batch", str(args.per_batch), "--segment", str(args.segment),
                   "--dtype", args.dtype, "--threads", "1",
                   "--cells", ",".join(f"{t:g}/{k}" for t, k in g),
                   "--dtype-prompts", str(args.dtype_prompts if i == check_w else 0),
                   "--raw-out", raw]
            if args.check_t is not None:
                cmd += ["--check-t", str(args.check_t)]
            log(f"worker {i}: {','.join(f'{t:g}/{k}' for t, k in g)}"
                + (" + float32 check" if i == check_w else ""))
            procs.append(subprocess.Popen(cmd))
            names.append(raw)
        bad = [i for i, p in enumerate(procs) if p.wait() != 0]
        if bad:
            raise SystemExit(f"grid: worker(s) {bad} failed")
        parts = [json.loads(Path(f).read_text()) for f in names]
    wall = time.perf_counter() - t0
    names = [f"worker {i}" for i in range(len(parts))]
    runs, check, check_t = merge_raws(names, parts, args)
    for r in runs.values():
        r["part"] = r["part"].replace("worker ", "w")
    log(f"grid: {len(runs)} cells from {len(parts)} workers in {wall:.0f} s")
    tables = tables_from(runs, check, args, len(parts[0]["problems"]), check_t=check_t,
                         cpu=True)
    tables.append(grid_processes_table(parts, runs, wall))
    if args.reference:
        tables.append(reference_table(runs, check, args))
    raw = {"problems": parts[0]["problems"], "runs": runs, "float32": check,
           "float32_T": check_t, "settings": settings_of(args),
           "processes": [p["process"] for p in parts], "wall_s": wall}
    return tables, raw


def reference_table(runs: dict, check: dict, args) -> dict:
    """Each cell against the same cell of earlier raw files (``--reference``): whether all
    its replies are the same (SHA-256 of the 1680 texts) and its pass@1 in both."""
    from icml.results import make_table

    ref_runs: dict = {}
    ref_check: dict = {}
    for f in args.reference:
        raw = json.loads(Path(f).read_text())
        if raw["problems"] != json.loads(json.dumps(
                [p.__dict__ for p in make_suite(len(raw["problems"]), seed=FINAL_SEED,
                                                families=tuple(args.families))])):
            raise SystemExit(f"--reference {f}: other problems than this grid's")
        for c, r in raw["runs"].items():
            ref_runs[c] = dict(r, file=Path(f).name)
        for k, r in (raw.get("float32") or {}).items():
            ref_check[k] = dict(r, file=Path(f).name)
    rows = []
    pairs = [(c, r, ref_runs.get(c)) for c, r in runs.items()]
    pairs += [(f"{k} float32 check", r, ref_check.get(k)) for k, r in check.items()]
    for c, r, ref in pairs:
        p1 = statistics.mean(per_prompt(r["correct"], args.samples, 1))
        if ref is None:
            rows.append([c, r["name"], "-", "-", p1, "-", "-", r["cpu_seconds"], "-", "-"])
            continue
        rows.append([c, r["name"], ref["file"],
                     "yes" if ref["texts_sha256"] == r["texts_sha256"] else "no",
                     p1, statistics.mean(per_prompt(ref["correct"], args.samples, 1)),
                     sum(a != b for a, b in zip(r["correct"], ref["correct"])),
                     r["cpu_seconds"], ref["cpu_seconds"],
                     r["cpu_seconds"] / ref["cpu_seconds"]])
    return make_table(
        "this grid against the earlier runs of the same cells (same suite, settings and "
        "generators): are all replies the same, and the decoding CPU seconds of each",
        ["cell", "method", "reference file", "same replies", "pass@1", "pass@1 reference",
         "prompts with another count", "CPU s", "CPU s reference", "CPU ratio"], rows,
        name="reference", formats={"pass@1": ".3f", "pass@1 reference": ".3f",
                                   "CPU s": ".0f", "CPU s reference": ".0f",
                                   "CPU ratio": ".2f"})


def grid_processes_table(parts: list[dict], runs: dict, wall: float) -> dict:
    """Each worker's wall and CPU seconds, the grid's wall time, and each arm's decoding CPU
    seconds over its cells (the floor of that arm at one thread)."""
    from icml.results import make_table

    rows = []
    for i, raw in enumerate(parts):
        pr = raw["process"]
        cells = [c for c, r in runs.items() if r["part"] == f"w{i}"]
        ld = pr.get("load") or [None, None]
        rows.append([f"w{i}", ",".join(cells) + (" + float32 check" if raw["float32"] else ""),
                     pr["threads"], sum(runs[c]["seconds"] for c in cells), pr["wall_s"],
                     pr["cpu_s"], f"{ld[0]}-{ld[1]}"])
    rows.append(["the grid command (workers side by side)", f"{len(runs)} cells", len(parts),
                 sum(r["seconds"] for r in runs.values()), wall,
                 sum(p["process"]["cpu_s"] for p in parts), "-"])
    for key in ARMS:
        cells = [c for c in runs if c.split("/")[1] == key]
        if cells:
            rows.append([f"arm {key}, decoding only", ",".join(cells), "-",
                         sum(runs[c]["seconds"] for c in cells), "-",
                         sum(runs[c]["cpu_seconds"] for c in cells), "-"])
    chk = [r for p in parts for r in p["float32"].values()]
    if chk:
        rows.append(["float32 check, decoding only", "-", "-", sum(r["seconds"] for r in chk),
                     "-", sum(r["cpu_seconds"] for r in chk), "-"])
    return make_table(
        "processes of the grid command (one torch thread per worker; wall s of the grid = "
        "from starting the workers to the last one's end)",
        ["process", "cells", "threads", "decode s", "wall s", "CPU s", "load"], rows,
        name="processes", formats={"decode s": ".0f", "wall s": ".0f", "CPU s": ".0f"})


def processes_table(parts: list[str], runs: dict) -> dict:
    """Wall and CPU seconds of each part's process (from its results file,
    ``results/<stem>.json`` next to the raw ``benchmarks/results/<stem>.json``) and the
    grid's total: what the grid costs at one thread per process."""
    from icml import results as R
    from icml.results import make_table

    rows = []
    tot_cpu = tot_wall = 0.0
    for f in parts:
        stem = Path(f).stem
        path = HERE.parent / "results" / f"{stem}.json"
        meta = R.load(path) if path.is_file() else {}
        cells = [c for c, r in runs.items() if r["part"] == stem]
        decode = sum(runs[c]["seconds"] for c in cells)
        load = meta.get("load") or {}
        rows.append([stem, ",".join(cells), meta.get("threads", "-"), decode,
                     meta.get("wall_s", "-"), meta.get("cpu_s", "-"),
                     f"{load.get('start', '-')}-{load.get('end', '-')}"])
        tot_cpu += meta.get("cpu_s", 0.0)
        tot_wall += meta.get("wall_s", 0.0)
    rows.append(["all parts, one after another", f"{len(runs)} cells", "-",
                 sum(r["seconds"] for r in runs.values()), tot_wall, tot_cpu, "-"])
    rows.append(["all parts, CPU / 2: least wall time on 2 idle cores", "-", "-", "-", "-",
                 tot_cpu / 2, "-"])
    for key in ARMS:   # where the CPU goes: each arm's decoding over its cells
        cells = [c for c in runs if c.split("/")[1] == key]
        if cells:
            rows.append([f"arm {key}, decoding only", ",".join(cells), "-",
                         sum(runs[c]["seconds"] for c in cells), "-",
                         sum(runs[c]["cpu_seconds"] for c in cells), "-"])
    return make_table(
        "processes behind the merged table (from each part's results file; one torch thread "
        "each, run through the shared machine's queue)",
        ["process", "cells", "threads", "decode s", "wall s", "CPU s", "load"], rows,
        name="processes", formats={"decode s": ".0f", "wall s": ".0f", "CPU s": ".0f"})


def tables_from(runs: dict, check: dict, args, n_prompts: int,
                check_t: float | None = None, cpu: bool = False) -> list[dict]:
    """The tables of a final run (``cpu``: the cost table also gives each arm's CPU seconds,
    the merge's reading on a shared machine, where the clock also counts other jobs)."""
    from icml import stats
    from icml.results import make_table

    ns = args.samples
    three = ".3f"
    rows = []
    for r in runs.values():
        ests = [stats.mean_ci(per_prompt(r["correct"], ns, k), seed=0) for k in KS]
        ex = r["explored"]
        rows.append([f"{r['T']:g}", r["name"], *ests, "-" if ex != ex else ex,
                     r["mean_reply_tokens"], r["capped"]])
    passk = make_table(
        f"pass@k ({n_prompts} prompts x {ns} samples, at most {args.max_new_tokens} new tokens, "
        f"{args.dtype}; 95% bootstrap CI over prompts)",
        ["T", "method"] + [f"pass@{k} [95% CI]" for k in KS] +
        ["explored", "reply tokens", "capped"], rows, name="passk",
        formats={**{f"pass@{k} [95% CI]": three for k in KS}, "explored": three,
                 "reply tokens": ".1f", "capped": three})
    paired = []
    for t in args.temperatures:
        led = runs.get(f"{t:g}/led")
        for key in ("sampling", "top8", "dola"):
            base = runs.get(f"{t:g}/{key}")
            if led is None or base is None:
                continue
            cells = []
            for k in KS:
                a, b = per_prompt(led["correct"], ns, k), per_prompt(base["correct"], ns, k)
                d = [x - y for x, y in zip(a, b)]
                cells += [stats.paired_diff_ci(a, b, seed=0), stats.mde_from_samples(d, seed=0)]
            sa = [int(c > 0) for c in led["correct"]]
            sb = [int(c > 0) for c in base["correct"]]
            cells.append(stats.mcnemar(sa, sb).p_value)
            paired.append([f"{t:g}", base["name"], *cells])
    cols = ["T", "LED minus"]
    for k in KS:
        cols += [f"Δ pass@{k} [95% CI]", f"MDE Δ pass@{k}"]
    cols.append(f"McNemar p (pass@{ns})")
    paired_t = make_table(
        "LED minus each baseline, paired by prompt (95% bootstrap CI over prompts; MDE at "
        "alpha 0.05, power 0.8)", cols, paired, name="paired",
        formats={c: three for c in cols[2:]})
    tables = [passk, paired_t]
    check_t = mid_t(args) if check_t is None else check_t
    if check:
        drows = []
        for key, r32 in check.items():
            r16 = runs[f"{check_t:g}/{key}"]
            m = len(r32["correct"])
            a = per_prompt(r16["correct"][:m], ns, 1)
            b = per_prompt(r32["correct"], ns, 1)
            drows.append([r32["name"], stats.mean_ci(a, seed=0), stats.mean_ci(b, seed=0),
                          stats.paired_diff_ci(a, b, seed=0),
                          stats.mde_from_samples([x - y for x, y in zip(a, b)], seed=0)])
        tables.append(make_table(
            f"bfloat16 vs float32 on the first {len(next(iter(check.values()))['correct'])} "
            f"prompts at T={check_t:g} (same generators; pass@1)",
            ["method", "bfloat16", "float32", "bf16 - fp32 [95% CI]", "MDE"], drows,
            name="dtype", formats={c: three for c in
                                   ("bfloat16", "float32", "bf16 - fp32 [95% CI]", "MDE")}))
    ref = {t: runs[f"{t:g}/sampling"]["seconds"] for t in args.temperatures
           if f"{t:g}/sampling" in runs}
    cref = {t: runs[f"{t:g}/sampling"]["cpu_seconds"] for t in args.temperatures
            if f"{t:g}/sampling" in runs}
    crows = []
    for r in runs.values():
        crows.append([f"{r['T']:g}", r["name"], r.get("part", "-"), r["tokens"], r["seconds"],
                      1000 * r["seconds"] / max(r["tokens"], 1),
                      r["seconds"] / ref[r["T"]] if r["T"] in ref else "-"])
        if cpu:
            crows[-1] += [r["cpu_seconds"], 1000 * r["cpu_seconds"] / max(r["tokens"], 1),
                          r["cpu_seconds"] / cref[r["T"]] if r["T"] in cref else "-"]
    for r in check.values():
        crows.append([f"{check_t:g}", r["name"] + ", float32 check", "-", r["tokens"],
                      r["seconds"], 1000 * r["seconds"] / max(r["tokens"], 1), "-"])
        if cpu:
            crows[-1] += [r["cpu_seconds"], 1000 * r["cpu_seconds"] / max(r["tokens"], 1), "-"]
    cpu_cols = ["CPU s", "CPU ms/token", "CPU vs sampling"] if cpu else []
    tables.append(make_table(
        "cost (one thread; every arm timed the same way in this run)",
        ["T", "method", "process", "tokens", "seconds", "ms/token", "time vs sampling",
         *cpu_cols], crows, name="cost",
        formats={"seconds": ".0f", "ms/token": ".1f", "time vs sampling": ".2f",
                 **({"CPU s": ".0f", "CPU ms/token": ".1f", "CPU vs sampling": ".2f"}
                    if cpu else {})}))
    return tables


def parse_cells(s: str) -> list[tuple[float, str]]:
    cells = []
    for c in s.split(","):
        t, _, arm = c.partition("/")
        cells.append((float(t), arm))
    return cells


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("phase", choices=("pilot", "final", "merge", "grid"))
    ap.add_argument("--workers", type=int, default=2,
                    help="grid: processes side by side (one torch thread each)")
    ap.add_argument("--check-t", type=float, default=None,
                    help="final/grid: temperature of the float32 check (default: the middle "
                         "temperature of the run)")
    ap.add_argument("--reference", type=lambda s: s.split(","), default=None,
                    help="grid: raw files of earlier runs to compare each cell's replies with")
    ap.add_argument("--raw-out", default=None,
                    help="final: write only the raw file, to this path (the grid's workers)")
    ap.add_argument("--cells", type=parse_cells, default=None,
                    help="final: T/arm cells to decode (e.g. 0.6/dola,0.8/led); default: "
                         "every temperature x arm")
    ap.add_argument("--parts", type=lambda s: s.split(","), default=None,
                    help="merge: raw files of final runs (benchmarks/results/<name>.json)")
    ap.add_argument("--families", type=lambda s: s.split(","), default=list(FAMILIES))
    ap.add_argument("--prompts", type=int, default=0,
                    help="final prompts; 0 = the smallest multiple of families x 3 >= 100")
    ap.add_argument("--samples", type=int, default=SAMPLES)
    ap.add_argument("--temperatures", type=lambda s: [float(x) for x in s.split(",")],
                    default=list(TEMPERATURES))
    ap.add_argument("--arms", type=lambda s: s.split(","), default=list(ARMS))
    ap.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    ap.add_argument("--per-batch", type=int, default=PER_BATCH)
    ap.add_argument("--segment", type=int, default=SEGMENT)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument("--dtype-prompts", type=int, default=DTYPE_PROMPTS)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads ($ICML_THREADS overrides, as for icml reproduce)")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--out-results", default=None)
    args = ap.parse_args(argv)
    if args.phase == "merge" and not args.parts:
        ap.error("merge needs --parts")
    if args.workers < 1:
        ap.error(f"--workers must be >= 1, got {args.workers}")
    if args.cells:
        bad = [a for _, a in args.cells if a not in ARMS]
        if bad:
            ap.error(f"--cells: unknown arms {bad}; choose from {','.join(ARMS)}")
        args.temperatures = sorted({t for t, _ in args.cells})
    bad = [f for f in args.families if f not in FAMILIES]
    if bad:
        ap.error(f"--families: unknown {bad}; choose from {','.join(FAMILIES)}")
    bad = [a for a in args.arms if a not in ARMS]
    if bad:
        ap.error(f"--arms: unknown {bad}; choose from {','.join(ARMS)}")
    if args.samples < max(KS):
        ap.error(f"--samples must be >= {max(KS)} (pass@{max(KS)})")
    return args


def main(argv: list[str] | None = None) -> None:
    from icml import results as icml_results

    args = parse_args(argv)
    clock = icml_results.Clock()
    args.t0, args.load0 = time.perf_counter(), clock.load0
    args.threads = icml_results.apply_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - start:6.0f} s wall, {time.process_time():6.0f} s CPU] "
              f"{msg}", file=sys.stderr, flush=True)

    log(f"torch {torch.__version__}, {args.threads} thread(s), {args.dtype}")
    if args.phase == "pilot":
        tables = pilot(args, log)
        raw = None
        tolerance = {c: TIMING for c in ("ms/token", "s/prompt", "vs sampling", "estimated s")}
    else:
        tables, raw = {"final": final, "merge": merge, "grid": grid}[args.phase](args, log)
        tolerance = {c: TIMING for c in ("seconds", "ms/token", "time vs sampling",
                                         *(("decode s", "wall s", "CPU s", "load", "CPU ms/token",
                                            "CPU vs sampling", "CPU s reference", "CPU ratio")
                                           if args.phase in ("merge", "grid") else ()))}
    if raw is not None and args.raw_out:     # a grid worker: the raw file only
        Path(args.raw_out).write_text(json.dumps(raw))
        return
    if raw is not None:   # raw per-prompt counts, named after the results file
        stem = Path(args.out_results).stem if args.out_results else "powered"
        (args.out / f"{stem}.json").write_text(json.dumps(raw, indent=1))
    for t in tables:
        print(icml_results.render_table(t) + "\n")
    if args.out_results:
        argv_used = sys.argv[1:] if argv is None else argv
        command = "python plugins/led/benchmarks/powered.py " + shlex.join(argv_used)
        path = icml_results.write(
            args.out_results, tables, command=command.strip(), plugin="led",
            seeds=[PILOT_SEED if args.phase == "pilot" else FINAL_SEED], quick=False,
            clock=clock, threads=args.threads, tolerance=tolerance,
            notes="icml.stats: percentile bootstrap CIs over prompts, paired by prompt; MDE "
                  "at alpha 0.05 and power 0.8; McNemar's exact test on pass@16.")
        log(f"results file: {path}")


if __name__ == "__main__":
    main()
