"""Real peak memory of generation with the compressed vs the full cache (SmolLM2-135M-Instruct).

    python plugins/capkv/benchmarks/memory_bench.py --T 2048 --ratios 0,0.5,0.75 \
        --out-results plugins/capkv/results/memory.json

Each arm runs in a fresh process (so no arm inherits another's allocator state). In it: load the
model, then reset the kernel's peak-RSS counter (``/proc/self/clear_refs`` = 5, Linux) and
prefill ``T`` tokens of the core's evaluation text with CapKV at the ratio (0 = full cache), then
reset the counter again and greedily generate ``--new`` tokens on that cache. Reported: peak RSS
above the loaded model during prefill + generation, peak RSS above the pre-generation RSS during
generation alone, and the cache's own bytes after generation. On CUDA the same script reads
``torch.cuda.max_memory_allocated`` instead (not run here: no GPU). ``--out-results FILE``
writes the table as a results file (``icml.results``): the cache bytes are compared exactly on
a rerun, the RSS peaks are shown, not compared (they depend on the allocator and the machine).
``--model`` picks another packaged model (tests run ``tiny-llama``-sized settings).
"""

from __future__ import annotations

import argparse
import gc
import json
import shlex
import subprocess
import sys

COLUMNS = ["T", "ratio", "cache after generation (MiB)",
           "peak RSS above model, prefill + generation (MiB)",
           "peak RSS above pre-generation RSS, generation (MiB)",
           "peak RSS during generation (MiB)"]
# RSS peaks: what the kernel reports for this process; they depend on the allocator, the
# library versions and the machine's memory state, so they are shown, never compared
RSS_SHOWN = {c: {"timing": True, "why": "peak RSS of one process: depends on the allocator, the "
                 "library versions and the machine's memory state, not only on the cache"}
             for c in COLUMNS[3:]}


def _status(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def one(T: int, ratio: float, new: int, device: str,
        model_name: str = "smollm2-135m-instruct") -> dict:
    import torch

    torch.set_num_threads(1)
    from icml_capkv import CapKVPress, prefill

    from icml.data import eval_token_ids
    from icml.models import load_pretrained

    model, tok = load_pretrained(model_name, device=device)
    ids = torch.tensor([eval_token_ids(tok, T + 1)], device=device)
    cuda = device.startswith("cuda")
    with torch.no_grad():  # fault in the (memory-mapped) weights before measuring
        model(input_ids=ids[:, :8])
    gc.collect()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        _reset_peak()
        base = _status("VmRSS")
    cache = prefill(model, ids[:, :T], CapKVPress(ratio) if ratio > 0 else None)
    gc.collect()
    before_gen = torch.cuda.memory_allocated() if cuda else _status("VmRSS")
    if cuda:
        peak_prefill = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        peak_prefill = _status("VmHWM")
        _reset_peak()
    with torch.no_grad():
        model.generate(ids, cache=cache, max_new_tokens=new, min_new_tokens=new,
                       do_sample=False, attention_mask=torch.ones_like(ids))
    peak_gen = torch.cuda.max_memory_allocated() if cuda else _status("VmHWM")
    return {"T": T, "ratio": ratio, "cache_mb": cache.nbytes() / 2**20,
            "peak_total_mb": (max(peak_prefill, peak_gen) - base) / 2**20,
            "peak_gen_mb": (peak_gen - before_gen) / 2**20,
            "peak_gen_abs_mb": peak_gen / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=2048)
    ap.add_argument("--ratios", default="0,0.5,0.75")
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--one", type=float, default=None)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="packaged model name")
    ap.add_argument("--out-results", default="", help="write the table to this results file "
                    "(icml.results; the command recorded is this one, from the repo root)")
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.T, args.one, args.new, args.device, args.model)))
        return
    from icml import results

    clock = results.Clock()
    rows = []
    for r in [float(x) for x in args.ratios.split(",")]:
        out = subprocess.run([sys.executable, __file__, "--T", str(args.T), "--one", str(r),
                              "--new", str(args.new), "--device", args.device,
                              "--model", args.model],
                             capture_output=True, text=True, check=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    print("| T | ratio | cache after generation (MiB) | peak RSS above model, prefill + "
          "generation (MiB) | peak RSS above pre-generation RSS, generation (MiB) | peak RSS "
          "during generation (MiB) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['T']} | {r['ratio']} | {r['cache_mb']:.1f} | {r['peak_total_mb']:.1f} | "
              f"{r['peak_gen_mb']:.1f} | {r['peak_gen_abs_mb']:.1f} |")
    if args.out_results:
        table = results.make_table(
            f"Peak memory of generation, {args.model}, {args.device}: a fresh process per arm, "
            f"CapKV prefill of {args.T} tokens then {args.new} greedy tokens",
            COLUMNS, [[r["T"], r["ratio"], r["cache_mb"], r["peak_total_mb"], r["peak_gen_mb"],
                       r["peak_gen_abs_mb"]] for r in rows],
            name="memory", formats={c: ".1f" for c in COLUMNS[2:]})
        cmd = shlex.join(["python", "plugins/capkv/benchmarks/memory_bench.py", *sys.argv[1:]])
        path = results.write(args.out_results, [table], command=cmd, plugin="capkv", seeds=[],
                             quick=False, clock=clock, threads=1, tolerance=RSS_SHOWN)
        print(f"results file: {path}")


if __name__ == "__main__":
    main()
