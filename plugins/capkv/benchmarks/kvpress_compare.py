"""Our presses against what kvpress kept (JSON from ``kvpress_record.py``), same models and ids.

    python plugins/capkv/benchmarks/kvpress_compare.py --inp kvpress_parity.json

With ``--out-results FILE`` it writes the table as a results file (``icml.results``); the
command recorded runs both sides from the repo root::

    nox -s bench_capkv_kvpress -- --out kvpress_parity.json && \
        python plugins/capkv/benchmarks/kvpress_compare.py --inp kvpress_parity.json \
        --out-results plugins/capkv/results/kvpress_parity.json

Prints, per press, ratio and model, the kept positions that differ (per layer and KV head,
summed) and the largest layer-0 score difference, for our defaults and for the kvpress-compatible
options (``KVPRESS_OPTIONS``). Our arms run in this environment (transformers 5.x), kvpress's ran
in its own (``nox -s bench_capkv_kvpress``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
# kvpress's behaviour where ours differs on purpose: SnapKV and key-norm keep no sinks there,
# SnapKV's default window is 64 and it pools only the keys before the window (zero padding).
KVPRESS_OPTIONS = {"capkv": {}, "streaming": {},
                   "snapkv": {"n_sink": 0, "window": 64, "pooling": "kvpress"},
                   "knorm": {"n_sink": 0}}
OUR_DEFAULTS = {"capkv": {}, "streaming": {}, "snapkv": {"window": 64}, "knorm": {}}


def _record_module():
    spec = importlib.util.spec_from_file_location("kvpress_record", HERE / "kvpress_record.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    rec = _record_module()
    m = LlamaForCausalLM(LlamaConfig(**rec.TINY)).eval()
    m.set_attn_implementation("sdpa")
    rec.fixed_tiny_params(m)
    return m


@torch.no_grad()
def our_kept(model, ids: torch.Tensor, policy: str, ratio: float, options: dict):
    from icml_capkv import make_press, prefill

    press = make_press(policy, ratio, **options)
    cache = prefill(model, ids, press)
    return [layer.positions[0].tolist() for layer in cache.layers]


def n_diff(ours: list, theirs: list) -> tuple[int, int]:
    """(positions kept by one side only, counted once per pair; total kept), over layers/heads."""
    d = tot = 0
    for lo, lt in zip(ours, theirs):
        for ho, ht in zip(lo, lt):
            d += len(set(ho) ^ set(ht)) // 2
            tot += len(ht)
    return d, tot


def compare(data: dict, model, key: str) -> list[dict]:
    block = data[key]
    ids = torch.tensor(block["ids"])
    rows = []
    for name, rec in block.items():
        if "@" not in name:
            continue
        policy, r = name.split("@")
        for arm, opts in (("ours (defaults; SnapKV window 64)", OUR_DEFAULTS[policy]),
                          ("ours (kvpress options)", KVPRESS_OPTIONS[policy])):
            t0 = time.perf_counter()
            kept = our_kept(model, ids, policy, float(r), opts)
            secs = time.perf_counter() - t0
            d, tot = n_diff(kept, rec["kept"])
            rows.append({"model": key, "policy": policy, "ratio": float(r), "arm": arm,
                         "differ": d, "kept": tot, "kvpress_s": rec["seconds"], "ours_s": secs})
    return rows


def write_items(path: str, n: int, length: int) -> None:
    """The first ``n`` ``niah_single`` items of ``length`` context tokens (the long-context
    table's items, seed 0) as token ids, for both sides of the pipeline timing."""
    from icml_capkv.longctx import make_items

    from icml.models import load_pretrained

    _, tok = load_pretrained("smollm2-135m-instruct")
    items = make_items(tok, "niah_single", length, n, seed=0)
    Path(path).write_text(json.dumps([{"context_ids": it.context_ids,
                                       "question_ids": it.question_ids,
                                       "answer": it.answer_text} for it in items]))
    print(f"wrote {n} items to {path}")


@torch.no_grad()
def our_pipeline(model, tok, ids_ctx: list, ids_q: list, press, max_new_tokens: int) -> str:
    """Our side of kvpress's pipeline, step for step: prefill the context under the press
    (``prefill``), the question on the compressed cache (``continuation_logits``), then greedy
    decoding one token at a time until EOS or ``max_new_tokens``."""
    from icml_capkv import continuation_logits, prefill

    cache = prefill(model, torch.tensor([ids_ctx]), press)
    logits = continuation_logits(model, cache, torch.tensor([ids_q]))
    out = [int(logits[0, -1].argmax())]
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    for _ in range(max_new_tokens - 1):
        if out[-1] in eos:
            break
        logits = continuation_logits(model, cache, torch.tensor([[out[-1]]]))
        out.append(int(logits[0, -1].argmax()))
    return tok.decode(out, skip_special_tokens=True)


def pipeline_rows(data: dict, items: list[dict], model, tok) -> list[list]:
    """kvpress's pipeline (recorded in its environment) and ours on the same items: answers
    right (the gold number starts the answer), answers equal to the other side's, mean wall
    seconds per item without a press and with CapKV (after one untimed warm-up call, as on
    kvpress's side), and their ratio."""
    from icml_capkv import CapKVPress

    pipe = data["pipeline"]
    r, m = pipe["ratio"], pipe["max_new_tokens"]
    ours = []
    our_pipeline(model, tok, items[0]["context_ids"], items[0]["question_ids"], None, m)  # warm
    for it in items:
        rec = {}
        for arm, press in (("none", None), ("capkv", CapKVPress(r))):
            t0 = time.perf_counter()
            ans = our_pipeline(model, tok, it["context_ids"], it["question_ids"], press, m)
            rec[arm] = {"answer": ans, "seconds": time.perf_counter() - t0}
        ours.append(rec)
    theirs = pipe["items"]
    n = len(items)
    rows = []
    for side, recs, other in (("kvpress " + data["versions"]["kvpress"], theirs, ours),
                              ("icml-capkv", ours, theirs)):
        right = sum(x["capkv"]["answer"].strip().startswith(it["answer"])
                    for x, it in zip(recs, items))
        right0 = sum(x["none"]["answer"].strip().startswith(it["answer"])
                     for x, it in zip(recs, items))
        same = sum(x["capkv"]["answer"] == y["capkv"]["answer"] for x, y in zip(recs, other))
        s0 = sum(x["none"]["seconds"] for x in recs) / n
        s1 = sum(x["capkv"]["seconds"] for x in recs) / n
        rows.append([side, r, n, f"{right0}/{n}", f"{right}/{n}", f"{same}/{n}", s0, s1,
                     s1 / s0])
    return rows


PIPE_TIMING = {c: {"timing": True, "why": "wall-clock seconds on a shared machine, the two "
                   "sides in different processes and transformers versions"}
               for c in ("s / item, no press", "s / item, CapKV", "CapKV / no press")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--inp", default="kvpress_parity.json")
    ap.add_argument("--skip-pretrained", action="store_true")
    ap.add_argument("--out-results", default="", help="write the table to this results file")
    ap.add_argument("--items", default="", help="the items file the kvpress side timed its "
                    "pipeline on (adds the pipeline table)")
    ap.add_argument("--write-items", default="", help="write the pipeline items here and stop")
    ap.add_argument("--n-items", type=int, default=5)
    ap.add_argument("--length", type=int, default=1024)
    args = ap.parse_args()
    from icml import results

    torch.set_num_threads(1)
    if args.write_items:
        write_items(args.write_items, args.n_items, args.length)
        return
    clock = results.Clock()
    data = json.loads(Path(args.inp).read_text())
    rows = compare(data, tiny_model(), "tiny")
    if not args.skip_pretrained and "pretrained" in data:
        from icml.models import load_pretrained

        rows += compare(data, load_pretrained("smollm2-135m-instruct")[0], "pretrained")
    print(f"kvpress side: {data['versions']}")
    print("| model | press | ratio | arm | kept positions that differ / kept | prefill + "
          "compression s, ours | same, kvpress (its own env) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['policy']} | {r['ratio']} | {r['arm']} | "
              f"{r['differ']} / {r['kept']} | {r['ours_s']:.3f} | {r['kvpress_s']:.3f} |")
    tables = [parity_table(rows, data["versions"])]
    if args.items:
        from icml.models import load_pretrained

        model, tok = load_pretrained("smollm2-135m-instruct")
        items = json.loads(Path(args.items).read_text())
        from icml.results import make_table

        tables.append(make_table(
            f"kvpress's text-generation pipeline against ours, SmolLM2-135M-Instruct, float32, "
            f"one thread: {len(items)} niah_single items of {args.length} context tokens, CapKV "
            f"(kvpress's CapPress) at ratio {data['pipeline']['ratio']}, greedy, at most "
            f"{data['pipeline']['max_new_tokens']} new tokens",
            ["pipeline", "ratio", "items", "right, no press", "right, CapKV",
             "same CapKV answer as the other", "s / item, no press", "s / item, CapKV",
             "CapKV / no press"], pipeline_rows(data, items, model, tok), name="pipeline",
            formats={"s / item, no press": ".3g", "s / item, CapKV": ".3g",
                     "CapKV / no press": ".3f"}))
        for row in tables[-1]["rows"]:
            print(row)
    if args.out_results:
        path = results.write(args.out_results, tables,
                             command=record_command(args), plugin="capkv", seeds=[],
                             quick=False, clock=clock, threads=1,
                             tolerance={**TIMING, **PIPE_TIMING})
        print(f"results file: {path}")


TIMING = {c: {"timing": True, "why": "wall-clock seconds of one prefill + compression on a "
              "shared machine, the two sides in different processes and transformers versions"}
          for c in ("ours s", "kvpress s")}
PARITY_COLUMNS = ["model", "press", "ratio", "differ, kvpress options", "differ, our defaults",
                  "kept", "ours s", "kvpress s"]


def parity_table(rows: list[dict], versions: dict) -> dict:
    """One row per model, press and ratio: kept positions (per layer and KV head, summed) that
    differ from kvpress's, with kvpress's options and with our defaults."""
    from icml.results import make_table

    by = {}
    for r in rows:
        key = (r["model"], r["policy"], r["ratio"])
        by.setdefault(key, {})["kvpress" if "kvpress options" in r["arm"] else "ours"] = r
    out = []
    for (model, policy, ratio), arms in by.items():
        kv, ours = arms["kvpress"], arms["ours"]
        out.append([model, policy, ratio, kv["differ"], ours["differ"], kv["kept"],
                    kv["ours_s"], kv["kvpress_s"]])
    side = ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))
    return make_table(f"Kept positions that differ from kvpress's ({side}): ours with kvpress's "
                      "options and with our defaults", PARITY_COLUMNS, out, name="parity",
                      formats={"ours s": ".3f", "kvpress s": ".3f"})


def record_command(args) -> str:
    """Both sides, from the repo root: the items (with ``--items``), kvpress's record (its own
    environment, reused: ``nox -R``), then ours."""
    script = "plugins/capkv/benchmarks/kvpress_compare.py"
    ours = shlex.join(["python", script, *sys.argv[1:]])
    if not args.items:
        return f"nox -s bench_capkv_kvpress -- --out {shlex.quote(args.inp)} && {ours}"
    items = shlex.join(["python", script, "--write-items", args.items, "--n-items",
                        str(args.n_items), "--length", str(args.length)])
    return (f"{items} && nox -R -s bench_capkv_kvpress -- --out {shlex.quote(args.inp)} "
            f"--items {shlex.quote(args.items)} && {ours}")


if __name__ == "__main__":
    main()
