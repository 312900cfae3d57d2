"""XSpecMesh heads (chain and batched tree verification) against transformers' assisted
generation with a draft model and prompt-lookup decoding, on the same mesh prompts and the same
backbone, all greedy (lossless), with where each arm's time goes.

    python plugins/xspecmesh/benchmarks/peers_mesh.py --threads 1 \
        --out-results plugins/xspecmesh/results/peers_mesh.json

The backbone is trained as the default job trains it (2000 meshes, hidden 64, 3 layers, 300
steps, seed 0); one set of K KL heads per ``--distill`` entry: ``data:200`` as the jobs distil
(teacher-forced on the training meshes, 200 steps), ``greedy:800`` on the backbone's own greedy
continuations of the training prefixes (800 steps; Medusa-2's self-distillation). The draft
model for transformers' ``generate(assistant_model=...)`` is a smaller Llama of the same
vocabulary (hidden 32, one layer) trained here on the same data and steps. Prompts: held-out
meshes (dataset seed 1), ``[BOS, class, first face]`` (11 tokens), so that every prompt has its
own greedy continuation.

Arms, interleaved prompt by prompt in a rotating order, each timed by the same
``time.perf_counter`` around one call that turns the prompt into the finished sequence:

* AR greedy through our loop (``speculative_generate(heads=None)``), the baseline;
* transformers ``generate`` greedy (transformers' own loop, a second baseline);
* transformers assisted generation, ``assistant_model`` = the draft model, ``K`` drafts per call
  (constant schedule, no confidence stop);
* transformers prompt lookup, ``prompt_lookup_num_tokens=K`` (n-grams of the sequence so far);
* XSpecMesh greedy with K heads, chain (one draft per head), and trees of ``--tree-widths``
  alternative first drafts verified in the same backbone call (a batch of chains sharing the
  cache).

Backbone calls are counted by a forward hook on the backbone (the prefill included); the draft
model's calls by a hook on it. Speed-ups are ratios of summed times (and calls) over prompts,
with paired bootstrap intervals over prompts (``icml.stats.ratio_ci``). "Tokens per call needed
for 1.5x" is ``1.5 x`` (this arm's time per backbone call) / (AR's time per call): the measured
floor that a decoder must clear at its own per-call cost. Clock columns are declared ``timing``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np
import torch

from icml import results as icml_results
from icml import stats

LABEL = {"data": "data", "greedy": "greedy outputs"}


def _strip(seq: list[int], eos: int) -> list[int]:
    """The sequence up to and including the first EOS after the prompt's BOS and class."""
    return seq[:seq.index(eos, 2) + 1] if eos in seq[2:] else seq


def _distill_spec(spec: str) -> tuple[str, int]:
    source, _, steps = spec.partition(":")
    if source not in ("data", "greedy") or not steps.isdigit():
        raise ValueError(f"--distill {spec!r}: use SOURCE:STEPS with SOURCE data (the training "
                         "meshes) or greedy (the backbone's greedy continuations), e.g. data:200")
    return source, int(steps)


def build(args: argparse.Namespace) -> dict[str, Any]:
    from icml_xspecmesh.backbone import build_backbone, train_backbone
    from icml_xspecmesh.dataset import make_primitive_dataset
    from icml_xspecmesh.distill import distill_heads
    from icml_xspecmesh.heads import SpeculativeHeads
    from icml_xspecmesh.timing import tiny_mesh_backbone

    tok, data, model = tiny_mesh_backbone(args.n_train, args.backbone_steps, args.device)
    model.eval()
    draft = build_backbone(tok, hidden_size=args.draft_hidden, num_layers=args.draft_layers,
                           num_heads=4, num_kv_heads=2, seed=1, device=args.device,
                           max_positions=512)
    train_backbone(draft, data, steps=args.backbone_steps, batch_size=16, lr=5e-3, seed=1)
    draft.eval()
    heads = {}
    for spec in args.distill:
        source, steps = _distill_spec(spec)
        hd = SpeculativeHeads.from_model(model, num_heads=args.heads)
        # "greedy": the backbone's own greedy continuations of the training prefixes
        # ([BOS, class, first faces], the prompts' form), the sequences greedy decoding verifies
        kw = {} if source == "data" else {"source": "samples", "sample_top_k": 1,
                                          "condition_len": 2 + 9 * args.prompt_faces}
        distill_heads(model, hd, data, loss="kl", steps=steps, batch_size=16, lr=1e-2, seed=0,
                      **kw)
        heads[spec] = hd.eval()
    held = make_primitive_dataset(args.prompts, seed=1, tokenizer=tok)
    prompts = [held.sequences[i][:2 + 9 * args.prompt_faces] for i in range(args.prompts)]
    for m in (model, draft):
        for p in m.parameters():
            p.requires_grad_(False)
    return {"tok": tok, "model": model, "draft": draft, "heads": heads, "prompts": prompts}


def arms(args: argparse.Namespace, built: dict[str, Any]) -> dict[str, Any]:
    from icml_xspecmesh.speculative import speculative_generate

    model, draft, heads = built["model"], built["draft"], built["heads"]
    K, new = args.heads, args.max_new_tokens
    gc = draft.generation_config
    gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = K, "constant"
    gc.assistant_confidence_threshold = 0.0

    def hf(**kw: Any) -> Any:
        def f(p: torch.Tensor) -> list[int]:
            out = model.generate(p, max_new_tokens=new, do_sample=False, eos_token_id=2,
                                 pad_token_id=0, **kw)
            return out[0].tolist()
        return f

    def ours(hd: Any, width: int = 1) -> Any:
        def f(p: torch.Tensor) -> list[int]:
            out = speculative_generate(model, hd, p, max_new_tokens=new, acceptance="greedy",
                                       eos_token_id=2, pad_token_id=0, tree_width=width)
            return out.sequences[0].tolist()
        return f

    out = {"AR greedy (our loop)": ours(None),
           "transformers generate, greedy": hf(),
           f"transformers assisted, draft model (hidden {args.draft_hidden}, "
           f"{args.draft_layers} layer), K={K}": hf(assistant_model=draft),
           f"transformers prompt lookup, K={K}": hf(prompt_lookup_num_tokens=K),
           }
    for spec, hd in heads.items():
        source, steps = _distill_spec(spec)
        what = f"K={K} heads distilled {steps} steps on {LABEL[source]}"
        out[f"XSpecMesh greedy, {what}, chain"] = ours(hd)
        for w in args.tree_widths:
            out[f"XSpecMesh greedy, {what}, tree of {w} first drafts"] = ours(hd, w)
    return out


def run(args: argparse.Namespace, built: dict[str, Any], fns: dict[str, Any]) -> dict:
    from icml_xspecmesh.timing import interleaved

    prompts = [torch.tensor([ids], device=args.device) for ids in built["prompts"]]
    with torch.no_grad():
        raw = interleaved(prompts, fns, counters={"calls": built["model"],
                                                  "dcalls": built["draft"]},
                          warmup=prompts[0])
    rec = {}
    for name, r in raw.items():
        seqs = [_strip(seq, 2) for seq in r["out"]]
        rec[name] = {"sec": r["sec"], "calls": r["calls"], "dcalls": r["dcalls"], "seq": seqs,
                     "tokens": [len(s) - len(ids) for s, ids in zip(seqs, built["prompts"],
                                                                   strict=True)]}
    return rec


COLS = ["decoder", "output = AR greedy", "tokens/call", "speed-up (calls) [95% CI]",
        "draft-model calls/token", "ms/token", "ms per backbone call",
        "speed-up (wall) vs AR [95% CI]", "speed-up (wall) vs transformers generate",
        "tokens/call needed for 1.5x"]
TIMING = COLS[5:]


def table(args: argparse.Namespace, rec: dict) -> tuple[list[list[Any]], dict[str, Any]]:
    base = rec["AR greedy (our loop)"]
    hfb = rec["transformers generate, greedy"]
    n = len(base["sec"])
    ar_ms_call = 1e3 * sum(base["sec"]) / sum(base["calls"])
    rows, metrics = [], {}
    for name, r in rec.items():
        same = sum(a == b for a, b in zip(r["seq"], base["seq"], strict=True))
        toks = sum(r["tokens"])
        tpc = toks / sum(r["calls"])
        ms_call = 1e3 * sum(r["sec"]) / sum(r["calls"])
        sp_calls = stats.ratio_ci(base["calls"], r["calls"])
        sp_wall = stats.ratio_ci(base["sec"], r["sec"])
        rows.append([name, f"{same}/{n}", tpc, sp_calls.to_dict(), sum(r["dcalls"]) / toks,
                     1e3 * sum(r["sec"]) / toks, ms_call, sp_wall.to_dict(),
                     sum(hfb["sec"]) / sum(r["sec"]), 1.5 * ms_call / ar_ms_call])
        # per-prompt log speed-up: its bootstrap MDE sizes what this run could detect
        logs = np.log(np.asarray(base["sec"]) / np.asarray(r["sec"]))
        metrics[name] = {"tokens_per_call": tpc, "identical": same, "prompts": n,
                         "mde_log_wall_speedup": stats.mde_from_samples(logs),
                         "per_call_cost_vs_ar": ms_call / ar_ms_call}
    return rows, metrics


def main() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=32, help="held-out mesh prompts")
    ap.add_argument("--prompt-faces", type=int, default=1, help="faces given in each prompt")
    ap.add_argument("--max-new-tokens", type=int, default=240)
    ap.add_argument("--n-train", type=int, default=2000)
    ap.add_argument("--backbone-steps", type=int, default=300)
    ap.add_argument("--distill", nargs="+", default=["data:200", "greedy:800"],
                    help="head sets, SOURCE:STEPS each: data (teacher-forced on the training "
                    "meshes, as the jobs distil) or greedy (on the backbone's greedy "
                    "continuations of the training prefixes)")
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--tree-widths", type=int, nargs="*", default=[2, 4])
    ap.add_argument("--draft-hidden", type=int, default=32)
    ap.add_argument("--draft-layers", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out-results", default=None)
    args = ap.parse_args()
    if args.prompts < 2:
        ap.error("--prompts must be >= 2 (intervals over prompts)")
    for spec in args.distill:
        try:
            _distill_spec(spec)
        except ValueError as exc:
            ap.error(str(exc))
    torch.set_num_threads(args.threads)
    clock = icml_results.Clock()
    built = build(args)
    t_build = clock.wall()
    rec = run(args, built, arms(args, built))
    rows, metrics = table(args, rec)
    title = (f"Tiny mesh backbone (hidden 64, 3 layers), {args.prompts} held-out prompts "
             f"([BOS, class, {args.prompt_faces} face]), greedy, up to {args.max_new_tokens} new "
             f"tokens; K={args.heads} KL heads; {args.threads} "
             f"thread(s), load {clock.load0} to {icml_results.load_average()}")
    from icml_xspecmesh.timing import print_and_write

    print_and_write(args, script="plugins/xspecmesh/benchmarks/peers_mesh.py", name="peers_mesh",
                    title=title, cols=COLS, rows=rows, timing=TIMING, metrics=metrics,
                    clock=clock, t_build=t_build)


if __name__ == "__main__":
    main()
