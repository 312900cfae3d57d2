"""CapKV's scoring cost as a fraction of the prefill on SmolLM2-135M-Instruct (30 layers, head dim
64), in CPU seconds of one thread (``time.process_time``), so a loaded machine inflates neither
side; wall seconds are printed too.

    python plugins/capkv/benchmarks/overhead_bench.py --lengths 1024,2048,4096 \
        --out-results plugins/capkv/results/overhead.json

Per length: a full prefill and a prefill with the CapKV press (ratio 0.5), each timed; the
press's own scoring time (all 30 layers: anchor, relevance, Gram, Cholesky, solves, top-k) is
timed inside its hook (wall) and, as a check, as the CPU-time difference of the two prefills.
``--out-results FILE`` writes the table as a results file (``icml.results``); every column but
``T`` and ``policy`` is a clock reading, declared ``timing`` (shown, never compared).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

COLUMNS = ["T", "policy", "full prefill CPU s", "prefill + press CPU s", "(press - full) / full",
           "hook scoring wall / full prefill wall"]
TIMING = {c: {"timing": True, "why": "CPU or wall seconds (or their ratio) of one run on a "
              "shared machine"} for c in COLUMNS[2:]}


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="1024,2048,4096")
    ap.add_argument("--policies", default="capkv")
    ap.add_argument("--out-results", default="", help="write the table to this results file")
    args = ap.parse_args()
    from icml import results

    clock = results.Clock()
    rows = []
    torch.set_num_threads(1)
    from icml_capkv import make_press, prefill

    from icml.data import eval_token_ids
    from icml.models import load_pretrained

    model, tok = load_pretrained("smollm2-135m-instruct")
    model(input_ids=torch.tensor([eval_token_ids(tok, 8)]))  # warm-up
    print("| T | policy | full prefill CPU s | prefill + press CPU s | (press - full) / full | "
          "hook scoring wall / full prefill wall |")
    print("|---|---|---|---|---|---|")
    for T in [int(x) for x in args.lengths.split(",")]:
        ids = torch.tensor([eval_token_ids(tok, T)])
        c0, w0 = time.process_time(), time.perf_counter()
        prefill(model, ids)
        c_full, w_full = time.process_time() - c0, time.perf_counter() - w0
        for p in args.policies.split(","):
            press = make_press(p, 0.5)
            c0 = time.process_time()
            prefill(model, ids, press)
            c_p = time.process_time() - c0
            rows.append([T, p, c_full, c_p, (c_p - c_full) / c_full,
                         press.last_scoring_s / w_full])
            print(f"| {T} | {p} | {c_full:.2f} | {c_p:.2f} | {(c_p - c_full) / c_full:.3f} | "
                  f"{press.last_scoring_s / w_full:.3f} |", flush=True)
    if args.out_results:
        table = results.make_table(
            "CapKV's scoring cost on SmolLM2-135M-Instruct, ratio 0.5, one thread", COLUMNS, rows,
            name="overhead", formats={**{c: ".2f" for c in COLUMNS[2:4]},
                                      **{c: ".3f" for c in COLUMNS[4:]}})
        cmd = shlex.join(["python", "plugins/capkv/benchmarks/overhead_bench.py", *sys.argv[1:]])
        path = results.write(args.out_results, [table], command=cmd, plugin="capkv", seeds=[],
                             quick=False, clock=clock, threads=1, tolerance=TIMING)
        print(f"results file: {path}")


if __name__ == "__main__":
    main()
