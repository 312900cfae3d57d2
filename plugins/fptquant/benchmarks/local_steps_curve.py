"""How many local-objective steps on the real model: one 120-step run of FPTQuant's local
objective on SmolLM2-135M-Instruct (row fraction 0.125, as in real_model.py), snapshots of the
transforms at 0/10/20/40/60/90/120 steps, each merged and quantized at W4A4KV4 with RTN weights
and evaluated like real_model.py (4 windows of 256 tokens; calibration from token 200,000).

    python plugins/fptquant/benchmarks/local_steps_curve.py   # about 7 CPU minutes
    python plugins/fptquant/benchmarks/local_steps_curve.py \
        --out-results plugins/fptquant/results/local_steps.json

``--out-results`` writes the curve as a results file (``icml.results``; the training CPU
seconds are a clock reading, declared ``timing``). One torch thread.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import shlex
import sys
import time

import torch
import torch.nn.functional as F
from icml_fptquant.config import TrainingOptions, TransformOptions

from icml import results as R

SNAP = (0, 10, 20, 40, 60, 90, 120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-results", default="", help="write the curve as a results file")
    ap.add_argument("--model", default="smollm2-135m-instruct",
                    help="packaged model name or a model folder (tests: a tiny model)")
    ap.add_argument("--snap", default=",".join(map(str, SNAP)), help="snapshot steps")
    ap.add_argument("--window", type=int, default=256, help="tokens per window")
    args = ap.parse_args()
    snap = tuple(int(x) for x in args.snap.split(","))
    win = args.window
    clock = R.Clock()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    from icml_fptquant import FPTQuantConfig
    from icml_fptquant.apply import apply_fpt_transforms
    from icml_fptquant.quantize import merge_and_quantize
    from icml_fptquant.training import optimize_local, outlier_norm

    from icml.data import eval_token_ids
    from icml.models import load_pretrained

    if args.model == "smollm2-135m-instruct":
        fp, tok = load_pretrained(args.model)
    else:
        from icml.compose import load_model

        fp, tok = load_model(args.model)
    fp.eval()
    ev = torch.tensor(eval_token_ids(tok, 4 * win)).view(-1, win)
    calib = torch.tensor(eval_token_ids(tok, 4 * win, offset=200_000)).view(-1, win)

    @torch.no_grad()
    def logp(m):
        return F.log_softmax(m(ev, use_cache=False).logits[:, :-1].float(), -1)

    ref = logp(fp)
    cfg = FPTQuantConfig(transforms=TransformOptions(untie_embeddings=True),
                         training=TrainingOptions(local_steps=max(snap), local_row_fraction=0.125))
    model = apply_fpt_transforms(copy.deepcopy(fp), cfg)
    snaps = {}

    def progress(it, desc=""):
        for i in it:
            if i in snap:  # the state after i steps
                snaps[i] = (copy.deepcopy(model.fpt_transforms.state_dict()), time.process_time())
            yield i

    t0 = time.process_time()
    hist = optimize_local(model, cfg, progress=progress)
    snaps[max(snap)] = (copy.deepcopy(model.fpt_transforms.state_dict()), time.process_time())
    print(f"train {time.process_time() - t0:.0f} CPU s, loss {hist[0]:.3f} -> {hist[-1]:.3f}")
    rows = []
    for s in snap:
        q = apply_fpt_transforms(copy.deepcopy(fp), cfg)
        q.fpt_transforms.load_state_dict(snaps[s][0])
        with torch.no_grad():
            obj = float(outlier_norm(q, 4.0))
        merge_and_quantize(q, calib, cfg)
        lq = logp(q)
        nll = float(-lq.gather(-1, ev[:, 1:, None]).mean())
        kl = float((ref.exp() * (ref - lq)).sum(-1).mean())
        rows.append({"steps": s, "cpu_s_train": snaps[s][1] - t0, "objective_exact": obj,
                     "ppl": math.exp(nll), "kl": kl})
        print(rows[-1], flush=True)
    print(json.dumps(rows))
    if args.out_results:
        cols = ["local steps", "local objective (exact, all rows)", "perplexity W4A4KV4",
                "KL to FP", "training CPU s"]
        table = R.make_table(
            "Local steps on SmolLM2-135M-Instruct (row fraction 0.125; snapshots merged and "
            "quantized at W4A4KV4, RTN weights)", cols,
            [[r["steps"], r["objective_exact"], r["ppl"], r["kl"], r["cpu_s_train"]]
             for r in rows], name="local_steps",
            formats={"local objective (exact, all rows)": ".2f", "perplexity W4A4KV4": ".1f",
                     "KL to FP": ".3f", "training CPU s": ".0f"})
        R.write(args.out_results, [table], plugin="fptquant", seeds=[0], clock=clock,
                threads=1, quick=False,
                tolerance={"training CPU s": {"timing": True, "why": "CPU time of this machine "
                                              "under its load: shown, not compared"}},
                command=" ".join(["python", "plugins/fptquant/benchmarks/local_steps_curve.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]))


if __name__ == "__main__":
    main()
