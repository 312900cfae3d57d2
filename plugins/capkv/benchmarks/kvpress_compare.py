"""Our presses against what kvpress kept (JSON from ``kvpress_record.py``), same models and ids.

    python plugins/capkv/benchmarks/kvpress_compare.py --inp kvpress_parity.json

Prints, per press, ratio and model, the kept positions that differ (per layer and KV head,
summed) and the largest layer-0 score difference, for our defaults and for the kvpress-compatible
options (``KVPRESS_OPTIONS``). Our arms run in this environment (transformers 5.x), kvpress's ran
in its own (``nox -s bench_capkv_kvpress``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
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
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
