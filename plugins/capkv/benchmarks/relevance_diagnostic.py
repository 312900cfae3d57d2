"""Is CapKV's relevance step what makes it lose on the default job? A diagnostic on the default
job's tiny recall model (same task, seed and training as ``icml run capkv``).

Prints (1) the mean relevance ``w`` (tau 5) on pair tokens vs filler tokens, (2) how many of the
pair tokens each policy keeps per KV head at ratio 0.5, and (3) the Spearman
correlation between ``w`` and the attention the later question ``? k_j`` actually pays to the
context, for the implemented anchor and for a negated anchor (a sign check).

    python plugins/capkv/benchmarks/relevance_diagnostic.py \
        --out-results plugins/capkv/results/relevance_diagnostic.json

``--out-results FILE`` writes the three tables (model, relevance, pairs-kept) as a results file
(``icml.results``; one thread, deterministic). ``--steps``, ``--samples``, ``--layout`` change
the setting (tests run it tiny).
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys

import torch
from icml_capkv import CapKVCache, make_press, prefill
from icml_capkv.fidelity import spearman
from icml_capkv.presses import post_rope_queries, query_anchor
from icml_capkv.recall import RecallTask, train_recall_model
from icml_capkv.scorers import capkv_relevance


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--layout", default="fused", choices=("fused", "split"))
    ap.add_argument("--out-results", default="", help="write the tables to this results file "
                    "(icml.results; the command recorded is this one, from the repo root)")
    args = ap.parse_args()
    from icml import results

    clock = results.Clock()
    threads = results.apply_threads(1)  # $ICML_THREADS wins (icml reproduce)
    # The default job's task and training (see InferConfig).
    task = RecallTask(context_len=64, n_pairs=8, n_keys=8, n_values=8, n_fillers=4,
                      n_queries=16, layout=args.layout)
    model, stats = train_recall_model(task, steps=args.steps, batch_size=16, lr=3e-3, seed=0)
    ctx, q, a = task.eval_batch(args.samples, torch.Generator().manual_seed(1))
    T = ctx.shape[1]
    pair = task.carries_pair(ctx)
    with torch.no_grad():
        from icml_capkv import continuation_logits

        full_acc = float((continuation_logits(model, prefill(model, ctx), q)[:, -1].argmax(-1)
                          == a).float().mean())
    print(f"layout {args.layout}: final loss {stats['train_loss']:.3f}, full-cache accuracy "
          f"{full_acc:.3f}, {int(pair[0].sum())} pair tokens of {T}\n")
    rows = []

    def hook(mod, a, kw, out):
        h = kw["hidden_states"]
        cache = kw.get("cache", kw.get("past_key_values"))
        K = cache.layers[mod.layer_idx].keys[:, :, :T]
        anchor = query_anchor(mod, h[:, :T], model.model.rotary_emb, 512, 4)
        qs = post_rope_queries(mod, h, kw["position_embeddings"])[:, :, T:]
        rep = qs.shape[1] // K.shape[1]
        att = (torch.einsum("bhqd,bhtd->bhqt", qs, K.repeat_interleave(rep, 1))
               / math.sqrt(K.shape[-1])).softmax(-1).mean(2)
        att = att.reshape(att.shape[0], K.shape[1], rep, T).mean(2)
        w = capkv_relevance(K, anchor, 5.0, True, 4).mean(2)
        wn = capkv_relevance(K, -anchor, 5.0, True, 4).mean(2)
        p = pair[:, None].expand_as(w)[..., 4:]

        def rho(x):
            n = min(8, x.shape[0])
            return sum(spearman(x[b, j, 4:].tolist(), att[b, j, 4:].tolist())
                       for b in range(n) for j in range(K.shape[1])) / (n * K.shape[1])

        rows.append((mod.layer_idx, float(w[..., 4:][p].mean()), float(w[..., 4:][~p].mean()),
                     rho(w), rho(wn)))
        return out

    hs = [la.self_attn.register_forward_hook(hook, with_kwargs=True) for la in model.model.layers]
    with torch.no_grad():
        model(input_ids=torch.cat([ctx, q], 1), cache=CapKVCache(), use_cache=True)
    for h in hs:
        h.remove()
    print("| layer | mean w on pairs | mean w on fillers | Spearman(w, question attn) | "
          "same, negated anchor |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]:.3f} | {r[2]:.3f} | {r[3]:.2f} | {r[4]:.2f} |")
    n_pair = int(pair[0].sum())
    print(f"\n| policy (r=0.5) | pair tokens kept per KV head, of {n_pair} "
          "(layer 0 / layer 1) |")
    print("|---|---|")
    kept_rows = []
    for pol, kw in [("capkv", {}), ("capkv", {"tau": 1.0}), ("leverage", {}),
                    ("snapkv", {}), ("h2o", {})]:
        cache = prefill(model, ctx, make_press(pol, 0.5, **kw))
        kept = [float(pair[:, None].expand(-1, la.positions.shape[1], -1)
                      .gather(2, la.positions).float().sum(-1).mean()) for la in cache.layers]
        name = pol + (f" (tau {kw['tau']})" if kw else "")
        kept_rows.append([name, *kept])
        print(f"| {name} | " + " / ".join(f"{k:.1f}" for k in kept) + " |")
    if args.out_results:
        from icml.results import make_table

        layers = [f"layer {i}" for i in range(len(kept_rows[0]) - 1)]
        tables = [
            make_table(f"Tiny recall model (layout {args.layout}, {args.steps} training steps, "
                       f"seed 0, {args.samples} questions)",
                       ["layout", "final train loss", "full-cache accuracy",
                        "pair tokens in the context", "context tokens"],
                       [[args.layout, stats["train_loss"], full_acc, n_pair, T]],
                       name="model", formats={"final train loss": ".3f",
                                              "full-cache accuracy": ".3f"}),
            make_table("CapKV relevance w (tau 5, mean over query heads) on pair and filler "
                       "tokens, and its Spearman correlation with the attention the later "
                       "question pays to the context",
                       ["layer", "mean w on pairs", "mean w on fillers",
                        "Spearman(w, question attn)", "same, negated anchor"],
                       [list(r) for r in rows], name="relevance",
                       formats={"mean w on pairs": ".3f", "mean w on fillers": ".3f",
                                "Spearman(w, question attn)": ".2f",
                                "same, negated anchor": ".2f"}),
            make_table(f"Pair tokens kept per KV head at r = 0.5, of {n_pair}",
                       ["policy (r=0.5)", *layers], kept_rows, name="pairs-kept",
                       formats={c: ".1f" for c in layers}),
        ]
        cmd = shlex.join(["python", "plugins/capkv/benchmarks/relevance_diagnostic.py",
                          *sys.argv[1:]])
        path = results.write(args.out_results, tables, command=cmd, plugin="capkv", seeds=[0],
                             quick=False, clock=clock, threads=threads)
        print(f"results file: {path}")


if __name__ == "__main__":
    main()
