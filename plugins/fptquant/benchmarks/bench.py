"""Benchmark: FPTQuant vs RTN, SmoothQuant-style, QuaRot-style and NF4 weight-only at W4A4KV4
and W4A8KV8 in one run, reported as perplexity / KL to FP / RTN-gap closed, plus the cost of
the online parts (time per generated token with vs without them) and model size.

    python benchmarks/bench.py                       # built-in tiny Llama with outliers
    python benchmarks/bench.py --model PATH          # a save_pretrained folder instead
    python plugins/fptquant/benchmarks/bench.py --out-results plugins/fptquant/results/bench.json

``--out-results`` writes every table as a results file (``icml.results``); milliseconds and their
ratios are clock readings, declared ``timing`` (shown, never compared on a rerun).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import shlex
import sys
import time
from pathlib import Path

import torch
from icml_fptquant import QuantizeConfig, apply_fpt_transforms, merge_transforms
from icml_fptquant.baselines import apply_quarot
from icml_fptquant.config import TrainingOptions
from icml_fptquant.peers import have_bitsandbytes
from icml_fptquant.pipeline import ARM_LABELS, build_model, run_arms

from icml import results as R

TABLES: list[dict] = []
TIMING = {c: {"timing": True, "why": "wall time on a shared machine (or a ratio of two): shown, "
              "not compared"}
          for c in ("fp32 ms", "int8 ms", "speed-up", "ms / token", "ratio vs FP")}


def ms_per_token(model, prompt, new_tokens=32, repeats=3):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                           do_sample=False)
        best = min(best, time.perf_counter() - t0)
    return 1000 * best / new_tokens


def int8_gemm_speed() -> None:
    """Real low-bit kernel available on CPU: int8 x int8 -> int32 GEMM (torch._int_mm), the
    kernel a static W8A8 linear would use, against the fp32 GEMM of the same shape."""
    if not hasattr(torch, "_int_mm"):
        print("torch._int_mm not available: no real int8 GEMM measured\n")
        return
    print("### Real int8 GEMM (torch._int_mm) vs fp32 GEMM, 64 tokens, 1 thread\n")
    print("| in = out features | fp32 ms | int8 ms | speed-up |\n|---|---|---|---|")
    gen = torch.Generator().manual_seed(0)
    gemm_rows = []
    for d in (1024, 2048, 4096):
        a = torch.randint(-8, 8, (64, d), dtype=torch.int8, generator=gen)
        b = torch.randint(-8, 8, (d, d), dtype=torch.int8, generator=gen)
        af, bf = a.float(), b.float()
        assert torch.equal(torch._int_mm(a, b).float(), af @ bf)
        times = []
        for fn, x, y in ((torch.matmul, af, bf), (torch._int_mm, a, b)):
            fn(x, y)
            best = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                fn(x, y)
                best = min(best, time.perf_counter() - t0)
            times.append(best * 1000)
        print(f"| {d} | {times[0]:.2f} | {times[1]:.2f} | {times[0] / times[1]:.2f} |")
        gemm_rows.append([d, times[0], times[1], times[0] / times[1]])
    print()
    TABLES.append(R.make_table("Real int8 GEMM (torch._int_mm) vs fp32 GEMM, 64 tokens",
                               ["in = out features", "fp32 ms", "int8 ms", "speed-up"],
                               gemm_rows, name="int8-gemm",
                               formats={"fp32 ms": ".2f", "int8 ms": ".2f", "speed-up": ".2f"}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="")
    ap.add_argument("--train-steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arch", default="llama", choices=("llama", "qwen2"))
    ap.add_argument("--hidden-size", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--no-ablation", action="store_true")
    ap.add_argument("--out-results", default="", help="write the tables as a results file")
    args = ap.parse_args()
    clock = R.Clock()
    threads = R.apply_threads(1)  # ICML_THREADS when set (icml reproduce --threads)
    torch.manual_seed(args.seed)
    arms = ["fp", "rtn", "smoothquant", "quarot", "fptquant_local", "fptquant_e2e", "nf4"]
    if have_bitsandbytes():
        arms += ["bnb_nf4", "bnb_int8"]
    cfg = QuantizeConfig(model=args.model, arms=arms, train_steps=args.train_steps,
                         training=TrainingOptions(e2e_steps=100, local_steps=200), arch=args.arch,
                         hidden_size=args.hidden_size, num_layers=args.layers)
    base = build_model(cfg, "cpu", torch.float32, args.seed)
    fp_clean = copy.deepcopy(base["model"])
    tiny = f"tiny {args.arch} (hidden {args.hidden_size}, {args.layers} layers, 4 heads / 2 KV)"
    print(f"model: {args.model or tiny}; "
          f"outlier strength {cfg.outlier_strength}; {cfg.calib_samples} calibration and "
          f"{cfg.eval_samples} evaluation sequences of {cfg.seq_len} tokens\n")
    for setting in ((4, 4, 4), (4, 8, 8)):
        scfg = dataclasses.replace(cfg, quant=dataclasses.replace(
            cfg.quant, w_bits=setting[0], a_bits=setting[1], kv_bits=setting[2]))
        b = dict(base, model=copy.deepcopy(fp_clean))
        t0 = time.perf_counter()
        rows = run_arms(scfg, b, args.seed)["rows"]
        name = f"W{setting[0]}A{setting[1]}KV{setting[2]}"
        print(f"### {name} ({time.perf_counter() - t0:.0f} s)\n")
        print("| arm | perplexity | ppl / FP ppl | KL to FP | RTN gap closed | size vs FP16 |")
        print("|---|---|---|---|---|---|")
        trows = []
        for arm, r in rows.items():
            gap = "" if r["rtn_gap_closed"] != r["rtn_gap_closed"] else \
                f"{r['rtn_gap_closed']:.3f}"
            print(f"| {ARM_LABELS[arm]} | {r['ppl']:.3f} | {r['ppl'] / rows['fp']['ppl']:.3f} "
                  f"| {r['kl']:.4f} | {gap} | {r['bytes'] / rows['fp']['bytes']:.3f} |")
            trows.append([ARM_LABELS[arm], r["ppl"], r["ppl"] / rows["fp"]["ppl"], r["kl"],
                          None if r["rtn_gap_closed"] != r["rtn_gap_closed"]
                          else r["rtn_gap_closed"], r["bytes"] / rows["fp"]["bytes"]])
        print()
        TABLES.append(R.make_table(name, ["arm", "perplexity", "ppl / FP ppl", "KL to FP",
                                          "RTN gap closed", "size vs FP16"], trows,
                                   name=name.lower(),
                                   formats={"perplexity": ".3f", "ppl / FP ppl": ".3f",
                                            "KL to FP": ".4f", "RTN gap closed": ".3f",
                                            "size vs FP16": ".3f"}))
    if not args.no_ablation:
        print("### Ablation at W4A4KV4: FPTQuant-local with one component changed\n")
        print("| variant | perplexity | KL to FP |\n|---|---|---|")
        arows = []
        variants = {"full": {}, "no pre-RoPE transform": {"transforms": {"prerope": False}},
                    "no value transform": {"transforms": {"value": False}},
                    "no MLP scaling": {"transforms": {"mlp_scale": False}},
                    "no online Hadamard": {"transforms": {"down_hadamard": False}},
                    "no dynamic residual scaling": {
                        "transforms": {"dynamic_residual_scaling": False}},
                    "no local training (init only)": {"training": {"local_steps": 0}},
                    "GPTQ weights": {"quant": {"weight_quantizer": "gptq"}}}
        for label, change in variants.items():
            sections = {sec: dataclasses.replace(getattr(cfg, sec), **kv)
                        for sec, kv in change.items()}
            vcfg = dataclasses.replace(cfg, arms=["fp", "fptquant_local"], **sections)
            r = run_arms(vcfg, dict(base, model=copy.deepcopy(fp_clean)), args.seed)["rows"]
            print(f"| {label} | {r['fptquant_local']['ppl']:.3f} | "
                  f"{r['fptquant_local']['kl']:.4f} |")
            arows.append([label, r["fptquant_local"]["ppl"], r["fptquant_local"]["kl"]])
        print()
        TABLES.append(R.make_table("Ablation at W4A4KV4: FPTQuant-local with one component "
                                   "changed", ["variant", "perplexity", "KL to FP"], arows,
                                   name="ablation",
                                   formats={"perplexity": ".3f", "KL to FP": ".4f"}))
    int8_gemm_speed()
    # cost of the online parts (quantizers off: only the transforms' runtime overhead)
    prompt = base["eval"][:1, :16]
    fpt = apply_fpt_transforms(copy.deepcopy(fp_clean), dataclasses.replace(cfg))
    merge_transforms(fpt)
    quarot = apply_quarot(copy.deepcopy(fp_clean))
    t_fp = ms_per_token(fp_clean, prompt)
    t_fpt = ms_per_token(fpt, prompt)
    t_qr = ms_per_token(quarot, prompt)
    print("### Online overhead (greedy generate, 32 new tokens, batch 1, quantizers off)\n")
    print("| model | ms / token | ratio vs FP |\n|---|---|---|")
    rows = (("FP", t_fp), ("FPTQuant merged (online Hadamard + residual scaling)", t_fpt),
            ("QuaRot-style merged (online Hadamards R3 + R4)", t_qr))
    for label, t in rows:
        print(f"| {label} | {t:.2f} | {t / t_fp:.3f} |")
    TABLES.append(R.make_table("Online overhead (greedy generate, 32 new tokens, batch 1, "
                               "quantizers off)", ["model", "ms / token", "ratio vs FP"],
                               [[lb, t, t / t_fp] for lb, t in rows], name="overhead",
                               formats={"ms / token": ".2f", "ratio vs FP": ".3f"}))
    if args.out_results:
        old = R.load(args.out_results).get("tolerance") if Path(args.out_results).is_file() \
            else None
        R.write(args.out_results, TABLES, plugin="fptquant", seeds=[args.seed], clock=clock,
                threads=threads, quick=False, tolerance={**TIMING, **(old or {})},
                command=" ".join(["python", "plugins/fptquant/benchmarks/bench.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]))


if __name__ == "__main__":
    main()
