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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--inp", default="kvpress_parity.json")
    ap.add_argument("--skip-pretrained", action="store_true")
    ap.add_argument("--out-results", default="", help="write the table to this results file")
    args = ap.parse_args()
    from icml import results

    clock = results.Clock()
    torch.set_num_threads(1)
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
    if args.out_results:
        path = results.write(args.out_results, [parity_table(rows, data["versions"])],
                             command=record_command(args), plugin="capkv", seeds=[],
                             quick=False, clock=clock, threads=1, tolerance=TIMING)
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
    """Both sides, from the repo root: kvpress's record (its own environment), then ours."""
    ours = shlex.join(["python", "plugins/capkv/benchmarks/kvpress_compare.py", *sys.argv[1:]])
    return f"nox -s bench_capkv_kvpress -- --out {shlex.quote(args.inp)} && {ours}"


if __name__ == "__main__":
    main()
