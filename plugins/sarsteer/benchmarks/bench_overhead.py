"""Steering overhead per generated token: greedy generation with SARSteer hooks vs without, on
the same model, prompt and token count, timed the same way (median of repeats, interleaved).

    python plugins/sarsteer/benchmarks/bench_overhead.py [--pretrained] [--tokens 32]
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
          f"{1000 * s / tokens:.2f} | {s / b:.3f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--pretrained", action="store_true", help="also SmolLM2-135M-Instruct")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| model | steered layers | tokens | ms/token unsteered | ms/token steered | ratio |")
    print("|---|---|---|---|---|---|")
    for arch in ("llama", "qwen2"):
        run(f"tiny {arch} (hidden 64, 4 layers)",
            tiny_causal_lm(arch, hidden_size=64, num_layers=4), byte_tokenizer(), args.tokens,
            args.repeats)
    if args.pretrained:
        from icml.models import load_pretrained

        model, tok = load_pretrained("smollm2-135m-instruct")
        run("SmolLM2-135M-Instruct", model, tok, args.tokens, args.repeats)


if __name__ == "__main__":
    main()
