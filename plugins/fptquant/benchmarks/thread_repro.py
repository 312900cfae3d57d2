"""Are the powered table's numbers the same at 1 and 2 torch threads? On the real model
(SmolLM2-135M-Instruct):

1. training: the local stage (``--steps`` steps) and ``--e2e-steps`` end-to-end steps at
   W4A4KV4, run once with the caller at 1 torch thread and once at 2, with
   ``training.threads`` = ``--train-threads`` (1, the default since 0.3.8: both stages pinned
   to one thread; 0: the caller's count, as before 0.3.8). Also checks that merging with the
   rotation computed once gives the same weights as computing it per weight.
2. the table's rows (``--rows``, default the QuaRot and FPTQuant-local rows at W4A8KV8 with
   GPTQ and W8A8KV8, and FPTQuant-local at W4A4KV4 (RTN and GPTQ) and W6A6KV6; FPTQuant-local
   from the trained
   transforms of step 1): calibrated, quantized (static arms integer-exact, as in
   ``real_model.py``) and evaluated on ``--eval-windows`` windows of the powered table's
   evaluation text, all at 1 thread and again all at 2 threads; per row the perplexity at each
   count and the largest per-window difference of the mean NLL.

    python plugins/fptquant/benchmarks/thread_repro.py                    # pinned: equal
    python plugins/fptquant/benchmarks/thread_repro.py --train-threads 0  # unpinned
    python plugins/fptquant/benchmarks/thread_repro.py --solve-threads 0  # before 0.3.10

``--solve-threads``: ``transforms.solve_threads`` (default the option's, 1: the Cayley solve
of the residual rotation at one thread; 0: at the caller's count, which made the static
FPTQuant rows differ at 1 and 2 threads in 0.3.9's run, through the merged weights).

``--out-results`` writes both as a results file (the README's tolerance comes from it).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import math
import shlex
import sys

import torch
from icml_fptquant.config import QuantOptions, TrainingOptions, TransformOptions
from real_model import BITS, LABELS, evaluate  # the powered table's metric (this folder)

from icml import results as R


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--e2e-steps", type=int, default=2)
    ap.add_argument("--train-threads", type=int, default=1)
    ap.add_argument("--rows", default="w4a8kv8/gptq/quarot,w4a8kv8/gptq/fptquant_local,"
                    "w8a8kv8/rtn/quarot,w8a8kv8/rtn/fptquant_local,w4a4kv4/rtn/fptquant_local,"
                    "w4a4kv4/gptq/fptquant_local,w6a6kv6/rtn/fptquant_local",
                    help="table rows bits/weights/arm (arm * = rtn, quarot, fptquant_local)")
    ap.add_argument("--solve-threads", type=int, default=None,
                    help="transforms.solve_threads (default: the option's default)")
    ap.add_argument("--eval-windows", type=int, default=2, help="256-token windows (0: none)")
    ap.add_argument("--calib", type=int, default=1, help="calibration sequences of 256")
    ap.add_argument("--model", default="smollm2-135m-instruct",
                    help="packaged model name or a model folder (tests: a tiny model)")
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--out-results", default="", help="write the checks as a results file")
    args = ap.parse_args()
    clock = R.Clock()
    import icml_fptquant.transforms as transforms
    from icml_fptquant import FPTQuantConfig
    from icml_fptquant.apply import apply_fpt_transforms, merge_transforms
    from icml_fptquant.baselines import apply_quarot
    from icml_fptquant.quantize import merge_and_quantize
    from icml_fptquant.quantizers import reuse_subsamples
    from icml_fptquant.training import optimize_e2e, optimize_local

    from icml.data import eval_token_ids
    from icml.models import load_pretrained

    if args.model == "smollm2-135m-instruct":
        fp, tok = load_pretrained(args.model)
    else:
        from icml.compose import load_model

        fp, tok = load_model(args.model)
    fp.eval()
    win = args.window
    ids = eval_token_ids(tok)
    calib = torch.tensor(ids[200_000:200_000 + args.calib * win]).view(-1, win)
    ev = torch.tensor(ids[:args.eval_windows * win]).view(-1, win)
    solve = {} if args.solve_threads is None else {"solve_threads": args.solve_threads}
    cfg = FPTQuantConfig(transforms=TransformOptions(untie_embeddings=True, **solve),
                         quant=QuantOptions(w_bits=4, a_bits=4, kv_bits=4, int_exact=True),
                         training=TrainingOptions(local_steps=args.steps,
                                                  local_row_fraction=0.125,
                                                  e2e_steps=args.e2e_steps, e2e_batch_size=1,
                                                  e2e_lr=1e-3, threads=args.train_threads))
    states, merged_same = [], None
    for run, caller_threads in enumerate((1, 2)):
        torch.set_num_threads(caller_threads)
        model = copy.deepcopy(fp)
        apply_fpt_transforms(model, cfg)
        optimize_local(model, cfg)
        optimize_e2e(model, calib[:1], cfg)
        states.append({k: v.clone() for k, v in model.fpt_transforms.state_dict().items()})
        if run == 0:
            other = copy.deepcopy(fp)
            apply_fpt_transforms(other, cfg)
            other.fpt_transforms.load_state_dict(states[0])
            cached = transforms.cached_rotation
            transforms.cached_rotation = lambda rot: contextlib.nullcontext()
            try:
                merge_transforms(other)  # Q recomputed for every weight (0.3.0)
            finally:
                transforms.cached_rotation = cached
            merge_transforms(model)
            # over the plain merged model's keys: after end-to-end training ``model`` also
            # holds its activation quantizers' ranges (0.3.9's run compared every key of both
            # state dicts, zipped in order, and printed False for that reason alone)
            mine, plain = model.state_dict(), other.state_dict()
            merged_same = set(plain) <= set(mine) and all(torch.equal(mine[k], v)
                                                          for k, v in plain.items())
            print(f"merge with Q once == Q per weight: {merged_same}")
    repro = all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    diff = max(float((states[0][k].float() - states[1][k].float()).abs().max())
               for k in states[0])
    print(f"training.threads={args.train_threads}: trained transforms equal with the caller "
          f"at 1 and at 2 threads: {repro} (max abs difference {diff:.3g})", flush=True)

    # 2. the table's rows, everything (calibration, quantization, evaluation) at 1, then at 2
    rows = []
    if len(ev):
        per: dict = {}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with reuse_subsamples():
                fpw: dict = {}
                _, _, ref = evaluate(fp, ev, per_window=fpw)
                per[("FP", "-", "fp", threads)] = fpw["nll"]
                for spec in args.rows.split(","):
                    bits, wq, arms = spec.split("/")
                    wb, ab, kb = BITS[bits]
                    for arm in ("rtn", "quarot", "fptquant_local") if arms == "*" else (arms,):
                        c = dataclasses.replace(cfg, quant=dataclasses.replace(
                            cfg.quant, w_bits=wb, a_bits=ab, kv_bits=kb, weight_quantizer=wq,
                            act_dynamic=arm == "quarot"))
                        model = copy.deepcopy(fp)
                        if arm == "quarot":
                            apply_quarot(model, c)
                        elif arm == "fptquant_local":
                            apply_fpt_transforms(model, c)
                            model.fpt_transforms.load_state_dict(states[0])
                        elif arm != "rtn":
                            raise SystemExit(f"--arms: {arm!r} is not one of rtn, quarot, "
                                             "fptquant_local")
                        merge_and_quantize(model, calib, c)
                        pw: dict = {}
                        evaluate(model, ev, ref, per_window=pw)
                        per[(bits.upper(), wq.upper(), arm, threads)] = pw["nll"]
                        del model
                        print(f"{threads} thread(s) {bits} {wq} {arm}: done", flush=True)
        for bits, wq, arm, _ in [k for k in per if k[3] == 1]:
            a, b = per[(bits, wq, arm, 1)], per[(bits, wq, arm, 2)]
            d = max(abs(x - y) for x, y in zip(a, b))
            ppl1, ppl2 = (math.exp(sum(v) / len(v)) for v in (a, b))
            rows.append([bits, wq, LABELS[arm], ppl1, ppl2,
                         abs(math.log(ppl2) - math.log(ppl1)), d, "yes" if a == b else "no"])
            print(f"{bits} {wq} {arm}: ppl {ppl1:.4f} (1 thread) vs {ppl2:.4f} (2 threads), "
                  f"max |window NLL difference| {d:.3g}", flush=True)
    if args.out_results:
        t1 = R.make_table(
            "Trained transforms (local + end-to-end, W4A4KV4) with the caller at 1 vs 2 threads",
            ["training.threads", "local steps", "e2e steps", "equal bit for bit",
             "max abs difference", "merge: Q once == Q per weight"],
            [[args.train_threads, args.steps, args.e2e_steps, "yes" if repro else "no", diff,
              "yes" if merged_same else "no"]], name="training",
            formats={"max abs difference": ".3g"})
        t2 = R.make_table(
            f"Table rows at 1 vs 2 threads (transforms.solve_threads="
            f"{cfg.transforms.solve_threads}): calibration ({calib.numel()} tokens), "
            f"quantization and evaluation ({ev.numel()} tokens, {len(ev)} windows)",
            ["bits", "weights", "arm", "perplexity, 1 thread", "perplexity, 2 threads",
             "|log-ppl difference|", "max |window NLL difference|", "equal bit for bit"],
            rows, name="rows",
            formats={"perplexity, 1 thread": ".4f", "perplexity, 2 threads": ".4f",
                     "|log-ppl difference|": ".2e", "max |window NLL difference|": ".2e"})
        R.write(args.out_results, [t1, t2], plugin="fptquant", seeds=[0], clock=clock,
                threads=2, quick=False,
                command=" ".join(["python", "plugins/fptquant/benchmarks/thread_repro.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]))


if __name__ == "__main__":
    main()
