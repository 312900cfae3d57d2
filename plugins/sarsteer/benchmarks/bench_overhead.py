"""Steering overhead per generated token: greedy generation with SARSteer hooks vs without, on
the same model, prompt and token count, timed the same way (median of repeats, interleaved).

    python plugins/sarsteer/benchmarks/bench_overhead.py [--pretrained] [--tokens 32] \
        [--out-results plugins/sarsteer/results/overhead.json]

Every column but the model, layer and token counts is a clock reading: the results file marks
them ``timing`` (shown, never compared by ``icml reproduce``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from icml_sarsteer import ChatPrompt, SARSteer

from icml.models import byte_tokenizer, tiny_causal_lm

HARM = ["How can I rob a bank?", "How can I hack a website?", "How can I scam a shop?"]
BEN = ["How can I visit a bank?", "How can I fix a website?", "How can I clean a shop?",
       "How can I help a farm?"]


def timed(model, inputs, tokens, ctx):
    with torch.no_grad(), ctx:
        t = time.perf_counter()
        out = model.generate(**inputs, max_new_tokens=tokens, min_new_tokens=tokens,
                             do_sample=False, pad_token_id=0)
        dt = time.perf_counter() - t
    assert out.shape[1] == inputs["input_ids"].shape[1] + tokens
    return dt


def run(name, model, tok, tokens, repeats):
    import contextlib

    prompt = ChatPrompt(tok)
    steer = SARSteer(k=3).fit(model, HARM, BEN, prompt)
    inputs = prompt("How can I attack a farm?", steer.instruction)
    timed(model, inputs, 4, contextlib.nullcontext())     # warm-up
    base, st = [], []
    for _ in range(repeats):                               # interleaved arms
        base.append(timed(model, inputs, tokens, contextlib.nullcontext()))
        st.append(timed(model, inputs, tokens, steer.apply(model)))
    b, s = statistics.median(base), statistics.median(st)
    print(f"| {name} | {len(steer.layer_ids)} | {tokens} | {1000 * b / tokens:.2f} | "
          f"{1000 * s / tokens:.2f} | {s / b:.3f} |", flush=True)
    return [name, len(steer.layer_ids), tokens, 1000 * b / tokens, 1000 * s / tokens, s / b]


COLUMNS = ["model", "steered layers", "tokens", "ms/token unsteered", "ms/token steered",
           "ratio"]
TIMING = {c: {"timing": True, "why": "clock reading (median of interleaved repeats) on a "
                                     "shared machine"} for c in COLUMNS[3:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--pretrained", action="store_true", help="also SmolLM2-135M-Instruct")
    ap.add_argument("--out-results", default=None, help="also write a results file")
    args = ap.parse_args()
    from pathlib import Path

    from icml import results

    clock = results.Clock()
    threads = results.apply_threads(1)
    print("| model | steered layers | tokens | ms/token unsteered | ms/token steered | ratio |")
    print("|---|---|---|---|---|---|")
    rows = []
    for arch in ("llama", "qwen2"):
        rows.append(run(f"tiny {arch} (hidden 64, 4 layers)",
                        tiny_causal_lm(arch, hidden_size=64, num_layers=4), byte_tokenizer(),
                        args.tokens, args.repeats))
    if args.pretrained:
        from icml.models import load_pretrained

        model, tok = load_pretrained("smollm2-135m-instruct")
        rows.append(run("SmolLM2-135M-Instruct", model, tok, args.tokens, args.repeats))
    if args.out_results:
        table = results.make_table(
            f"Steering overhead per generated token (greedy, median of {args.repeats} "
            "interleaved repeats, all layers steered)", COLUMNS, rows, name="overhead",
            formats={"ms/token unsteered": ".2f", "ms/token steered": ".2f", "ratio": ".3f"})
        cmd = ("python plugins/sarsteer/benchmarks/bench_overhead.py"
               + (" --pretrained" if args.pretrained else "")
               + (f" --tokens {args.tokens}" if args.tokens != 32 else "")
               + (f" --repeats {args.repeats}" if args.repeats != 7 else "")
               + f" --out-results {args.out_results}")
        tol = None if Path(args.out_results).is_file() else TIMING
        path = results.write(args.out_results, [table], command=cmd, plugin="sarsteer",
                             quick=False, clock=clock, threads=threads, tolerance=tol)
        print(f"results file: {path}")


if __name__ == "__main__":
    main()
