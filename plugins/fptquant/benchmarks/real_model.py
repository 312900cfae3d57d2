"""The headline benchmark: every arm on the real pretrained SmolLM2-135M-Instruct (offline,
``icml.models.load_pretrained``) at W4A4KV4, W4A8KV8 and W8A8, evaluated on the core's
evaluation text (The Jargon File, ``icml.data.eval_token_ids``): perplexity, KL to the FP
model, and greedy zero-shot answers on fixed prompts that the FP model gets right.

    python plugins/fptquant/benchmarks/real_model.py                 # the README table
    python plugins/fptquant/benchmarks/real_model.py --bits w4a4kv4 --arms fp,rtn,quarot

Fair by construction of the loop: one weight quantizer per row for every arm (RTN, and GPTQ
rows for the arms in ``--gptq-arms`` at the widths in ``--gptq-bits``), the same calibration
sequences (tokens disjoint from the evaluation tokens) and the same evaluation windows.
Runs on one thread; prints CPU seconds per arm and in total.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import time

import torch
import torch.nn.functional as F

PROMPTS = (  # (prompt, expected answer in the first new tokens); only FP-correct ones count
    ("The capital of France is", "Paris"), ("The capital of Japan is", "Tokyo"),
    ("The capital of Italy is", "Rome"), ("The capital of Germany is", "Berlin"),
    ("The capital of Spain is", "Madrid"),
    ("The largest planet in our solar system is", "Jupiter"),
    ("Water freezes at a temperature of 0 degrees", "Celsius"),
    ("The chemical symbol for gold is", "Au"), ("Monday, Tuesday, Wednesday,", "Thursday"),
    ("January, February, March,", "April"), ("one, two, three, four,", "five"),
    ("The opposite of hot is", "cold"), ("The Earth orbits the", "Sun"),
    ("Romeo and Juliet was written by William", "Shakespeare"), ("A, B, C, D,", "E"),
    ("Cats say meow and dogs say", "woof"), ("The sun rises in the", "east"),
    ("2 + 2 =", "4"), ("The first president of the United States was", "Washington"),
    ("The color of the sky on a clear day is", "blue"),
)
BITS = {"w4a4kv4": (4, 4, 4), "w4a8kv8": (4, 8, 8), "w8a8": (8, 8, 16)}
LABELS = {"fp": "FP (de-quantised Q4_1 checkpoint)", "rtn": "no transform",
          "smoothquant": "SmoothQuant (alpha 0.5)", "quarot": "QuaRot (dynamic per-token)",
          "quarot_static": "QuaRot (static per-tensor)", "fptquant_local": "FPTQuant-local",
          "fptquant_e2e": "FPTQuant-end-to-end"}


@torch.no_grad()
def evaluate(model, windows, ref_logp=None):
    """Perplexity, KL(FP || model) per token and the model's log-probs (for FP)."""
    nll, kl, n, logps = 0.0, 0.0, 0, []
    for i, w in enumerate(windows):
        logits = model(w.unsqueeze(0), use_cache=False).logits[0, :-1].float()
        logp = F.log_softmax(logits, -1)
        nll += float(-logp.gather(1, w[1:, None]).sum())
        if ref_logp is not None:
            t = ref_logp[i]
            kl += float((t.exp() * (t - logp)).sum())
        else:
            logps.append(logp)
        n += w.numel() - 1
    return math.exp(nll / n), kl / n, logps


@torch.no_grad()
def zero_shot(model, tok, prompts, new_tokens=4):
    ok = []
    for p, a in prompts:
        ids = tok(p, return_tensors="pt").input_ids
        out = model.generate(ids, max_new_tokens=new_tokens, do_sample=False,
                             pad_token_id=tok.eos_token_id)
        ok.append(a.lower() in tok.decode(out[0, ids.shape[1]:]).lower())
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bits", default="w4a4kv4,w4a8kv8,w8a8")
    ap.add_argument("--arms", default="fp,rtn,smoothquant,quarot,quarot_static,fptquant_local,"
                    "fptquant_e2e")
    ap.add_argument("--static-quarot-bits", default="w4a4kv4",
                    help="widths at which the static QuaRot option runs")
    ap.add_argument("--e2e-bits", default="w4a4kv4", help="widths with end-to-end training")
    ap.add_argument("--gptq-bits", default="w4a4kv4")
    ap.add_argument("--gptq-arms", default="rtn,quarot,fptquant_local")
    ap.add_argument("--eval-windows", type=int, default=4)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--calib", type=int, default=4, help="calibration sequences")
    ap.add_argument("--local-steps", type=int, default=60)
    ap.add_argument("--local-row-fraction", type=float, default=0.125)
    ap.add_argument("--e2e-steps", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=len(PROMPTS))
    ap.add_argument("--json", default="", help="write the rows to this file")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    from icml_fptquant import FPTQuantConfig
    from icml_fptquant.apply import apply_fpt_transforms
    from icml_fptquant.baselines import apply_quarot, apply_smoothquant
    from icml_fptquant.quantize import merge_and_quantize
    from icml_fptquant.training import optimize_e2e, optimize_local

    from icml.data import eval_token_ids
    from icml.data import perplexity as core_perplexity
    from icml.models import load_pretrained

    c_start, w_start = time.process_time(), time.perf_counter()
    fp, tok = load_pretrained("smollm2-135m-instruct")
    fp.eval()
    win = args.window
    ev = torch.tensor(eval_token_ids(tok, args.eval_windows * win)).view(-1, win)
    # calibration: tokens far from the evaluation ones (offset 200k of ~284k)
    calib = torch.tensor(eval_token_ids(tok, args.calib * win, offset=200_000)).view(-1, win)
    ppl_fp, _, ref = evaluate(fp, ev)
    core = core_perplexity(fp, ev.flatten(), window=win)
    assert abs(core - ppl_fp) < 1e-3 * ppl_fp, (core, ppl_fp)  # same metric as the core's
    prompts = PROMPTS[:args.prompts]
    fp_ok = zero_shot(fp, tok, prompts)
    keep = [p for p, ok in zip(prompts, fp_ok) if ok]
    print(f"FP: ppl {ppl_fp:.3f} (core perplexity {core:.3f}); FP answers {len(keep)}/"
          f"{len(prompts)} prompts, which are the zero-shot checks", flush=True)
    arms = args.arms.split(",")
    base = FPTQuantConfig(untie_embeddings=True, local_steps=args.local_steps,
                          local_row_fraction=args.local_row_fraction,
                          e2e_steps=args.e2e_steps, e2e_batch_size=1,
                          e2e_recalibrate_every=4)
    rows = [{"bits": "FP", "arm": "fp", "wq": "-", "ppl": ppl_fp, "kl": 0.0,
             "zero_shot": len(keep), "cpu_s": time.process_time() - c_start}]
    local_state, local_cpu = None, 0.0
    for bits in args.bits.split(","):
        wb, ab, kb = BITS[bits]
        for wq in ("rtn", "gptq"):
            if wq == "gptq" and bits not in args.gptq_bits.split(","):
                continue
            for arm in arms:
                if arm == "fp" or (wq == "gptq" and arm not in args.gptq_arms.split(",")):
                    continue
                if arm == "quarot_static" and bits not in args.static_quarot_bits.split(","):
                    continue
                if arm == "fptquant_e2e" and bits not in args.e2e_bits.split(","):
                    continue
                cfg = dataclasses.replace(base, w_bits=wb, a_bits=ab, kv_bits=kb,
                                          weight_quantizer=wq)
                c0, w0 = time.process_time(), time.perf_counter()
                model = copy.deepcopy(fp)
                extra = 0.0
                if arm == "rtn":
                    merge_and_quantize(model, calib, cfg)
                elif arm == "smoothquant":
                    apply_smoothquant(model, calib, 0.5)
                    merge_and_quantize(model, calib, cfg)
                elif arm in ("quarot", "quarot_static"):
                    dyn = arm == "quarot"
                    apply_quarot(model, cfg, dynamic=dyn)
                    merge_and_quantize(model, calib, dataclasses.replace(cfg, act_dynamic=dyn))
                else:
                    apply_fpt_transforms(model, cfg)
                    if local_state is None:
                        hist = optimize_local(model, cfg)
                        local_state = copy.deepcopy(model.fpt_transforms.state_dict())
                        local_cpu = time.process_time() - c0
                        print(f"local objective {hist[0]:.3f} -> {hist[-1]:.3f} in "
                              f"{local_cpu:.0f} CPU s", flush=True)
                    else:
                        model.fpt_transforms.load_state_dict(local_state)
                        extra = local_cpu  # the shared local stage counts for every FPT arm
                    if arm == "fptquant_e2e":
                        h = optimize_e2e(model, calib, cfg)
                        print(f"e2e loss {h['loss'][0]:.4f} -> {h['loss'][-1]:.4f}, max value "
                              f"cond {max(h['value_cond']):.2f}", flush=True)
                    merge_and_quantize(model, calib, cfg)
                q_cpu = time.process_time() - c0 + extra
                ppl, kl, _ = evaluate(model, ev, ref)
                ok = sum(zero_shot(model, tok, keep))
                row = {"bits": bits.upper(), "arm": arm, "wq": wq.upper(), "ppl": ppl, "kl": kl,
                       "zero_shot": ok, "quantize_cpu_s": q_cpu,
                       "cpu_s": time.process_time() - c0 + extra,
                       "wall_s": time.perf_counter() - w0}
                rows.append(row)
                print(f"{bits} {wq} {arm}: ppl {ppl:.3f} KL {kl:.4f} zero-shot {ok}/{len(keep)}"
                      f" ({row['cpu_s']:.0f} CPU s)", flush=True)
                del model
    # gap closed relative to the no-transform row of the same width and weight quantizer
    for r in rows:
        ref_row = next((x for x in rows if x["bits"] == r["bits"] and x["wq"] == r["wq"]
                        and x["arm"] == "rtn"), None)
        gap = ref_row["ppl"] - ppl_fp if ref_row else float("nan")
        r["gap_closed"] = (ref_row["ppl"] - r["ppl"]) / gap if ref_row and gap > 0 else \
            float("nan")
    print(f"\ntotal {time.process_time() - c_start:.0f} CPU s, "
          f"{time.perf_counter() - w_start:.0f} s wall; {ev.numel()} evaluation tokens "
          f"({len(ev)} windows of {win}), {calib.numel()} calibration tokens\n")
    print("| bits | weights | arm | perplexity | KL to FP | RTN gap closed | zero-shot | CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        g = "" if r["gap_closed"] != r["gap_closed"] else f"{r['gap_closed']:.3f}"
        print(f"| {r['bits']} | {r['wq']} | {LABELS[r['arm']]} | {r['ppl']:.3f} | "
              f"{r['kl']:.4f} | {g} | {r['zero_shot']}/{len(keep)} | {r['cpu_s']:.0f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rows": rows, "args": vars(args), "prompts_fp_correct": keep}, f,
                      indent=1)


if __name__ == "__main__":
    main()
