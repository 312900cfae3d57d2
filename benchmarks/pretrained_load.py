"""Cold load (GGUF conversion), warm load (cache) and forward throughput of a packaged
pretrained model (icml.models.load_pretrained).

    python benchmarks/pretrained_load.py [--model smollm2-135m-instruct] [--warm 3]
        [--tokens 1024,4096] [--dtypes float32,bfloat16] [--threads 2]

Each load runs in a fresh interpreter (a private, empty cache folder for the cold one), timed
around the ``load_pretrained`` call (torch, transformers and the Llama and tokenizer classes
already imported, timed apart) and around the whole process, with the process's peak RSS. The
baseline is transformers' own ``from_pretrained`` of the converted cache folder.
Throughput is one batch-1 forward pass (no grad, no KV cache) over real evaluation-text tokens,
best of ``--repeat``, in tokens per second. Writes ``benchmarks/results/pretrained_load.json``
(``icml.results``; clock and memory columns declared ``timing``: shown, never compared), which
the root README renders (``icml render core``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
# Timed apart: every transformers user pays these imports (the model and tokenizer classes are
# imported lazily by the first from_pretrained, which would otherwise count them as load time).
import torch, transformers  # noqa: F401
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM  # noqa: F401
from transformers import PreTrainedTokenizerFast  # noqa: F401
from icml.models import load_pretrained
t1 = time.perf_counter()
if sys.argv[2] == "icml":
    model, tok = load_pretrained(sys.argv[1])
else:  # transformers' own load of the same local checkpoint: the floor for a warm load
    model = AutoModelForCausalLM.from_pretrained(sys.argv[3])
    tok = AutoTokenizer.from_pretrained(sys.argv[3])
t2 = time.perf_counter()
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "peak_rss_mb": peak_mb}))
"""


def load_in_fresh_process(model: str, cache: str, how: str = "icml",
                          folder: str = "") -> dict[str, float]:
    env = {**os.environ, "ICML_CACHE_DIR": cache}
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, model, how, folder], env=env,
                         capture_output=True, text=True, check=True)
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    return {**facts, "process_s": time.perf_counter() - start}


def throughput(model_name: str, cache: str, tokens: list[int], dtypes: list[str],
               repeat: int) -> list[list]:
    import torch

    from icml.data import eval_token_ids
    from icml.models import load_pretrained

    os.environ["ICML_CACHE_DIR"] = cache
    rows = []
    for dtype in dtypes:
        model, tok = load_pretrained(model_name, dtype=dtype)
        for n in tokens:
            ids = torch.tensor([eval_token_ids(tok, n)])
            best = float("inf")
            with torch.no_grad():
                for _ in range(repeat):
                    start = time.perf_counter()
                    model(input_ids=ids, use_cache=False)
                    best = min(best, time.perf_counter() - start)
            rows.append([dtype, n, best, n / best])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--warm", type=int, default=3, help="warm loads (median reported)")
    ap.add_argument("--tokens", default="1024,4096")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="torch threads for the forward passes")
    ap.add_argument("--results", type=Path,
                    default=Path("benchmarks/results/pretrained_load.json"))
    args = ap.parse_args()
    import torch

    from icml.results import Clock, make_table, write

    clock = Clock()
    load0 = os.getloadavg()[0]
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as cache:
        cold = load_in_fresh_process(args.model, cache)
        warm = [load_in_fresh_process(args.model, cache) for _ in range(args.warm)]
        med = {k: statistics.median(w[k] for w in warm) for k in warm[0]}
        os.environ["ICML_CACHE_DIR"] = cache
        from icml.pretrained import model_status

        folder = str(model_status(args.model)["cache_dir"])
        plain = [load_in_fresh_process(args.model, cache, "plain", folder)
                 for _ in range(args.warm)]
        base = {k: statistics.median(w[k] for w in plain) for k in plain[0]}
        loads = [
            ["cold: `load_pretrained` (GGUF conversion + cache write)", cold],
            [f"warm: `load_pretrained` (from the cache, median of {args.warm})", med],
            [f"baseline: `from_pretrained` of the cache folder (median of {args.warm})", base],
        ]
        rows = throughput(args.model, cache, [int(t) for t in args.tokens.split(",")],
                          args.dtypes.split(","), args.repeat)
    load_table = make_table(
        f"Loading {args.model} in a fresh process", ["load", "load s",
                                                     "torch + transformers import s",
                                                     "whole process s", "peak RSS MB"],
        [[name, f["load_s"], f["import_s"], f["process_s"], f["peak_rss_mb"]]
         for name, f in loads], name="load",
        formats={"load s": ".2f", "torch + transformers import s": ".1f",
                 "whole process s": ".2f", "peak RSS MB": ".0f"})
    fwd = f"forward s (batch 1, no KV cache, best of {args.repeat})"
    fwd_table = make_table(
        f"Forward throughput, {args.threads} threads", ["dtype", "tokens", fwd, "tokens/s"],
        rows, name="forward", formats={fwd: ".2f", "tokens/s": ".0f"})
    timing = {"timing": True, "why": "a clock or memory reading: machine- and load-dependent"}
    command = "python benchmarks/pretrained_load.py " + shlex.join(sys.argv[1:])
    path = write(args.results, [load_table, fwd_table], command=command.strip(), clock=clock,
                 threads=args.threads,
                 tolerance={c: timing for c in ("load s", "torch + transformers import s",
                                                "whole process s", "peak RSS MB", fwd,
                                                "tokens/s")},
                 metrics={"cold_over_warm": cold["load_s"] / med["load_s"],
                          "warm_over_baseline": med["load_s"] / base["load_s"]},
                 notes=f"load average at start {load0:.1f}, at end {os.getloadavg()[0]:.1f} "
                 "(other work on the machine slows every row)")
    print(f"cold / warm load_pretrained: {cold['load_s'] / med['load_s']:.0f}x; "
          f"warm / transformers baseline: {med['load_s'] / base['load_s']:.2f}x")
    print(f"results file: {path}")


if __name__ == "__main__":
    main()
