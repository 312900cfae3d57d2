"""Real low-bit kernels on the real model (SmolLM2-135M-Instruct, CPU, one thread): FP32, bf16,
W8A8 (torch._int_mm) and W4A16 (torch's packed int4 CPU kernel), each against its simulated
(fake-quant) twin: perplexity on the core's evaluation text, greedy decode latency per token
and resident weight bytes (every distinct parameter/buffer storage).

    python plugins/fptquant/benchmarks/lowbit_kernels.py [--out-results FILE]

``--out-results plugins/fptquant/results/lowbit_kernels.json`` writes the table as a results
file (``icml.results``); ms/token and CPU s are clock readings, declared ``timing``.

Weights: RTN per output channel, no transform (the kernels run whatever merge_and_quantize
produced; the transformed models add only their online ops). W8A8 activations: static
per-tensor 8-bit ranges from 4 calibration sequences.
"""

from __future__ import annotations

import argparse
import copy
import shlex
import sys
import time
from pathlib import Path

import torch
from icml_fptquant.config import QuantOptions

from icml import results as R

RSS_CHILD = """
import gc, os, sys
import torch
import transformers.models.llama.modeling_llama  # noqa: F401  (imported before measuring)
from icml_fptquant.qlinear import register_kv_attention

def rss():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import psutil
        return psutil.Process().memory_info().rss

register_kv_attention()
gc.collect()
r0 = rss()
m = torch.load(sys.argv[1], weights_only=False)
gc.collect()
r1 = rss()
with torch.no_grad():
    m(torch.arange(4, 68)[None], use_cache=False)
gc.collect()
print(r0, r1, rss(), flush=True)
"""


def measured_rss(models, folder):
    """Resident memory each model adds to a fresh Python process: every model pickled to
    ``folder`` and loaded in its own child process (torch, transformers' Llama code and the
    plugin imported first; a process per model because memory freed inside one process is
    not reliably given back to the system, so a second model there reuses the first one's
    pages); RSS from /proc/self/statm after loading and after one 64-token forward pass, minus
    RSS just before loading. Returns one (loaded MB, after-forward MB) per model."""
    import os
    import subprocess

    out = []
    for i, m in enumerate(models):
        path = os.path.join(folder, f"model{i}.pt")
        torch.save(m, path)
        res = subprocess.run([sys.executable, "-c", RSS_CHILD, path], capture_output=True,
                             text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        os.remove(path)
        r0, r1, r2 = (int(v) for v in res.stdout.split()[-3:])
        out.append(((r1 - r0) / 2**20, (r2 - r0) / 2**20))
    return out


TIMING = {c: {"timing": True, "why": "wall or CPU time of this machine under its load: shown, "
              "not compared"} for c in ("ms / token", "CPU s")}
RSS_TOL = {c: {"abs": 8.0, "why": "resident memory measured in a child process: allocator "
               "and page granularity move it by a few MB run to run"}
           for c in ("RSS loaded MB", "RSS after forward MB")}


def ms_per_token(model, prompt, new_tokens, repeats):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                           do_sample=False, pad_token_id=0)
        best = min(best, time.perf_counter() - t0)
    return 1000 * best / new_tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eval-windows", type=int, default=4)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--no-rss", dest="rss", action="store_false",
                    help="skip the resident-memory measurement (a child process per model)")
    ap.add_argument("--model", default="smollm2-135m-instruct",
                    help="packaged model name or a model folder (tests: a tiny model)")
    ap.add_argument("--out-results", default="", help="write the table as a results file")
    args = ap.parse_args()
    clock = R.Clock()
    threads = R.apply_threads(1)  # ICML_THREADS when set (icml reproduce --threads)
    from icml_fptquant import FPTQuantConfig, merge_and_quantize
    from icml_fptquant.kernels import to_kernels, weight_bytes
    from icml_fptquant.qlinear import set_int_exact

    from icml.data import eval_token_ids, perplexity
    from icml.models import load_pretrained

    if args.model == "smollm2-135m-instruct":
        fp32, tok = load_pretrained(args.model)
    else:
        from icml.compose import load_model

        fp32, tok = load_model(args.model)
    fp32.eval()
    w = args.window
    ev = eval_token_ids(tok, args.eval_windows * w)
    calib = torch.tensor(eval_token_ids(tok, 4 * w, offset=200_000)).view(-1, w)
    prompt = tok("The capital of France is", return_tensors="pt").input_ids
    models = {"FP32": fp32, "bf16": copy.deepcopy(fp32).to(torch.bfloat16)}
    w8 = merge_and_quantize(copy.deepcopy(fp32), calib,
                            FPTQuantConfig(quant=QuantOptions(w_bits=8, a_bits=8, kv_bits=16)))
    models["W8A8 simulated (fp32)"] = w8
    models["W8A8 simulated int-exact (fp32)"] = set_int_exact(copy.deepcopy(w8), True)
    models["W8A8 torch._int_mm"] = to_kernels(copy.deepcopy(w8), "w8a8")
    w4 = merge_and_quantize(copy.deepcopy(fp32), calib,
                            FPTQuantConfig(quant=QuantOptions(w_bits=4, a_bits=16, kv_bits=16)))
    models["W4A16 int4pack (bf16)"] = to_kernels(copy.deepcopy(w4), "w4a16",
                                                 dtype=torch.bfloat16)
    models["W4A16 simulated (bf16)"] = w4.to(torch.bfloat16)
    fp_bytes = weight_bytes(fp32)
    print("| model | perplexity | ms / token | weight MB | weight vs FP32 | RSS loaded MB | "
          "RSS after forward MB | CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        rss = measured_rss(list(models.values()), folder) if args.rss else \
            [(float("nan"), float("nan"))] * len(models)
    for (name, m), (rss_l, rss_f) in zip(models.items(), rss):
        c0 = time.process_time()
        ppl = perplexity(m, ev, window=w)
        ms = ms_per_token(m, prompt, args.new_tokens, args.repeats)
        b = weight_bytes(m)
        print(f"| {name} | {ppl:.3f} | {ms:.1f} | {b / 2**20:.1f} | {b / fp_bytes:.3f} | "
              f"{rss_l:.1f} | {rss_f:.1f} | {time.process_time() - c0:.0f} |", flush=True)
        rows.append([name, ppl, ms, b / 2**20, b / fp_bytes, rss_l, rss_f,
                     time.process_time() - c0])
    if args.out_results:
        cols = ["model", "perplexity", "ms / token", "weight MB", "weight vs FP32",
                "RSS loaded MB", "RSS after forward MB", "CPU s"]
        table = R.make_table(
            f"Real low-bit kernels on SmolLM2-135M-Instruct: perplexity ({args.eval_windows} "
            f"windows of {w} tokens), greedy decode of {args.new_tokens} tokens (best of "
            f"{args.repeats}), weight storage", cols, rows, name="lowbit",
            formats={"perplexity": ".3f", "ms / token": ".1f", "weight MB": ".1f",
                     "weight vs FP32": ".3f", "RSS loaded MB": ".1f",
                     "RSS after forward MB": ".1f", "CPU s": ".0f"})
        old = R.load(args.out_results).get("tolerance") if Path(args.out_results).is_file() \
            else None
        R.write(args.out_results, [table], plugin="fptquant", clock=clock, threads=threads,
                quick=False, tolerance={**TIMING, **RSS_TOL, **(old or {})},
                command=" ".join(["python", "plugins/fptquant/benchmarks/lowbit_kernels.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]))


if __name__ == "__main__":
    main()
