"""End-to-end learning rate on the real model: FPTQuant's local stage (as in real_model.py,
120 steps), then end-to-end training at W4A4KV4 (RTN weights, 8 steps of one 256-token
sequence, recalibrating every 4) from that same local state at each learning rate, merged,
quantized and evaluated like real_model.py. The local state is saved to / loaded from
``--local-state`` so that real_model.py can reuse it.

    python plugins/fptquant/benchmarks/e2e_lr.py --lrs 3e-3,1e-3
    python plugins/fptquant/benchmarks/e2e_lr.py --lrs 1e-2,3e-3,1e-3 \
        --out-results plugins/fptquant/results/e2e_lr.json

The first row ("none") is the local state alone, merged and quantized the same way.
``--out-results`` writes the rows as a results file (``icml.results``; CPU seconds are a clock
reading, declared ``timing``). One torch thread.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import shlex
import sys
import time

import torch
import torch.nn.functional as F
from icml_fptquant.config import TrainingOptions, TransformOptions

from icml import results as R


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lrs", default="3e-3,1e-3")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--local-state", default="")
    ap.add_argument("--out-results", default="", help="write the rows as a results file")
    ap.add_argument("--model", default="smollm2-135m-instruct",
                    help="packaged model name or a model folder (tests: a tiny model)")
    ap.add_argument("--local-steps", type=int, default=120)
    ap.add_argument("--window", type=int, default=256, help="tokens per window")
    args = ap.parse_args()
    clock = R.Clock()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    from icml_fptquant import FPTQuantConfig
    from icml_fptquant.apply import apply_fpt_transforms
    from icml_fptquant.quantize import merge_and_quantize
    from icml_fptquant.training import optimize_e2e, optimize_local

    from icml.data import eval_token_ids
    from icml.models import load_pretrained

    if args.model == "smollm2-135m-instruct":
        fp, tok = load_pretrained(args.model)
    else:
        from icml.compose import load_model

        fp, tok = load_model(args.model)
    fp.eval()
    ids = eval_token_ids(tok)
    win = args.window
    ev = torch.tensor(ids[:4 * win]).view(-1, win)
    calib = torch.tensor(ids[200_000:200_000 + 4 * win]).view(-1, win)

    @torch.no_grad()
    def logp(m):
        return F.log_softmax(m(ev, use_cache=False).logits[:, :-1].float(), -1)

    ref = logp(fp)
    cfg = FPTQuantConfig(transforms=TransformOptions(untie_embeddings=True),
                         training=TrainingOptions(local_steps=args.local_steps,
                                                  local_row_fraction=0.125,
                                                  e2e_steps=args.steps, e2e_batch_size=1,
                                                  e2e_recalibrate_every=4))
    model = apply_fpt_transforms(copy.deepcopy(fp), cfg)
    if args.local_state and os.path.exists(args.local_state):
        state = torch.load(args.local_state)
    else:
        optimize_local(model, cfg)
        state = copy.deepcopy(model.fpt_transforms.state_dict())
        if args.local_state:
            torch.save(state, args.local_state)
    rows = []

    def evaluate(q, label, loss, c0):
        merge_and_quantize(q, calib, cfg)
        lq = logp(q)
        nll = float(-lq.gather(-1, ev[:, 1:, None]).mean())
        kl = float((ref.exp() * (ref - lq)).sum(-1).mean())
        rows.append([label, math.exp(nll), kl, time.process_time() - c0])
        print(json.dumps({"lr": label, "steps": args.steps, "loss": loss, "ppl": math.exp(nll),
                          "kl": kl, "cpu_s": time.process_time() - c0}), flush=True)

    c0 = time.process_time()
    q = apply_fpt_transforms(copy.deepcopy(fp), cfg)
    q.fpt_transforms.load_state_dict(state)
    evaluate(q, "none (local only)", [], c0)
    for lr in (float(x) for x in args.lrs.split(",")):
        c0 = time.process_time()
        q = apply_fpt_transforms(copy.deepcopy(fp), cfg)
        q.fpt_transforms.load_state_dict(state)
        at_lr = dataclasses.replace(cfg.training, e2e_lr=lr)
        h = optimize_e2e(q, calib, dataclasses.replace(cfg, training=at_lr))
        evaluate(q, f"{lr:g}", h["loss"], c0)
    if args.out_results:
        table = R.make_table(
            f"End-to-end learning rate on SmolLM2-135M-Instruct (W4A4KV4, RTN weights; "
            f"{args.steps} steps from the {args.local_steps}-step local state)",
            ["end-to-end lr", "perplexity W4A4KV4", "KL to FP", "CPU s"], rows, name="e2e_lr",
            formats={"perplexity W4A4KV4": ".1f", "KL to FP": ".3f", "CPU s": ".0f"})
        R.write(args.out_results, [table], plugin="fptquant", seeds=[0], clock=clock,
                threads=1, quick=False,
                tolerance={"CPU s": {"timing": True, "why": "CPU time of this machine under "
                                     "its load: shown, not compared"}},
                command=" ".join(["python", "plugins/fptquant/benchmarks/e2e_lr.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]))

if __name__ == "__main__":
    main()
