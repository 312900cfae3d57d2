"""CapKV vs eviction baselines, in one run: tensor-level output error, model-level accuracy/KL
(several independently trained tiny models, bootstrap 95% intervals, the tied-best verdict), and
cost (scoring time as a fraction of prefill time, measured in the same run, cache bytes).
Prints Markdown tables; ``--out-results FILE`` also writes the named tables (model and LM
parts, tensor level) as a results file (``icml.results``), rendered into the README:

    python plugins/capkv/benchmarks/bench.py --parts tensor,model \
        --out-results plugins/capkv/results/bench_model.json
    python plugins/capkv/benchmarks/bench.py --parts lm \
        --out-results plugins/capkv/results/bench_lm.json

Intervals: :func:`icml_capkv.fidelity.summarize`, i.e. ``icml.stats.hierarchical_ci`` over
seeds, then questions within each drawn seed (seed variance counts).

    python benchmarks/bench.py --parts model            # ~1-2 min: 3 seeds x 8 policies x 4 ratios
    python benchmarks/bench.py --parts cost             # T = 1024, 4096; tiny and d_h = 128 models
    python benchmarks/bench.py --parts tensor
    python benchmarks/bench.py --parts lm               # ~2 min: LM continuation fidelity, 3 seeds
"""

from __future__ import annotations

import argparse
import platform
import shlex
import sys
import time

import torch
from icml_capkv import POLICIES, CapKVPress, prefill
from icml_capkv.config import PressConfig
from icml_capkv.fidelity import fidelity_table, summarize, tensor_benchmark, verdict
from icml_capkv.recall import RecallTask, train_recall_model

RATIOS = (0.25, 0.5, 0.75, 0.9)
# The default job's task and training (InferConfig defaults).
TASK = dict(context_len=64, n_pairs=8, n_keys=8, n_values=8, n_fillers=4, n_queries=16)
TRAIN = dict(steps=400, batch_size=16, lr=3e-3)
# LM continuation fidelity: GrammarCorpus defaults, context T, continuation M (M + 1 tokens fed).
LM = dict(context=96, continuation=32, steps=800, docs=128)
# A model with a realistic head size for the cost rows: one Llama-3-8B-style layer shape narrowed
# to hidden 1024 (8 query heads of d_h = 128, 2 KV heads, FFN 3.5x), 2 layers, random weights.
REALISTIC = dict(hidden_size=1024, num_layers=2, num_heads=8, num_kv_heads=2,
                 intermediate_size=3584)


TABLES: list[dict] = []  # the named tables, written by --out-results
# the cost part's clock columns: shown, never compared (icml.results)
COST_TIMING = {c: {"timing": True, "why": "wall-clock seconds (or their ratio) of one run on a "
                   "shared machine: they depend on the machine and its load"}
               for c in ("full prefill (s)", "CapKV scoring, all layers (s)", "scoring / prefill")}


def md(title: str, cols: list[str], rows: list[list], name: str | None = None) -> str:
    if name is not None:
        from icml.results import make_table

        TABLES.append(make_table(title, cols, rows, name=name))

    def cell(v):
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    out = [f"\n**{title}**\n", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(out)


def grid(rows, key, policies, ratios, ref=None):
    out = []
    for p in policies:
        vals = []
        for r in ratios:
            v = next(x[key] for x in rows if x["policy"] == p and x["ratio"] == r)
            if ref is not None:
                base = next(x[key] for x in rows if x["policy"] == ref and x["ratio"] == r)
                vals.append(f"{v:.3g} ({v / base:.2f}x)" if base > 0 else f"{v:.3g}")
            else:
                vals.append(v)
        out.append([p] + vals)
    return out


def ci_grid(summary, policies, ratios, digits=3):
    return [[p] + [f"{summary[p, r][0]:.{digits}g} [{summary[p, r][1]:.{digits}g}, "
                   f"{summary[p, r][2]:.{digits}g}]" for r in ratios] for p in policies]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=TRAIN["steps"])
    ap.add_argument("--samples", type=int, default=256, help="questions per seed")
    ap.add_argument("--seeds", default="0,1,2", help="independently trained models")
    ap.add_argument("--layout", default="fused", choices=("fused", "split"))
    ap.add_argument("--taus", default="0,0.5,1,2,5", help="CapKV tau sensitivity (post hoc, "
                    "reported apart from the verdict)")
    ap.add_argument("--cost-T", default="1024,4096")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--parts", default="tensor,model,cost", help="which parts to run (also: lm)")
    ap.add_argument("--lm-steps", type=int, default=LM["steps"])
    ap.add_argument("--lm-docs", type=int, default=LM["docs"], help="held-out documents per seed")
    ap.add_argument("--out-results", default="", help="write the named tables to this results "
                    "file (icml.results; the command recorded is this one, from the repo root)")
    args = ap.parse_args()
    from icml import results

    clock = results.Clock()
    threads = results.apply_threads(args.threads)  # $ICML_THREADS wins (icml reproduce)
    pol = list(POLICIES)
    cols = ["policy"] + [f"r={r}" for r in RATIOS]
    print(f"machine: {platform.machine()} {torch.get_num_threads()} threads, torch "
          f"{torch.__version__}")
    try:
        import kvpress  # noqa: F401

        print("kvpress importable: comparing against it is left to a future version")
    except ImportError:
        print("kvpress: not installed (it pins transformers<5.3), peers are our native baselines")

    parts = args.parts.split(",")
    for mode in ("retrieval", "diffuse") if "tensor" in parts else ():
        t0 = time.perf_counter()
        rows, rho = tensor_benchmark(RATIOS, pol, (0, 1, 2), query_mode=mode)
        print(f"tensor level, {mode}: {time.perf_counter() - t0:.0f} s")
        print(md(f"Tensor level, {mode} queries: relative attention-output error (x = ratio to "
                 f"capkv); Spearman(capacity, error) = {rho:.2f}", cols,
                 grid(rows, "error", pol, RATIOS, ref="capkv"), name=f"tensor-{mode}"))

    if "model" in parts:
        model_level(args, pol, cols)
    if "cost" in parts:
        cost(args)
    if "lm" in parts:
        lm_level(args, pol, cols)
    if args.out_results:
        seeds = [int(x) for x in args.seeds.split(",")]
        cmd = shlex.join(["python", "plugins/capkv/benchmarks/bench.py", *sys.argv[1:]])
        path = results.write(args.out_results, TABLES, command=cmd, plugin="capkv", seeds=seeds,
                             quick=False, clock=clock, threads=threads,
                             tolerance=COST_TIMING if "cost" in parts else None)
        print(f"results file: {path}")


def model_level(args, pol, cols) -> None:
    task = RecallTask(**{**TASK, "layout": args.layout})
    seeds = [int(x) for x in args.seeds.split(",")]
    runs, fulls, taus = [], [], [float(t) for t in args.taus.split(",") if t]
    tau_runs = []
    t0 = time.perf_counter()
    for seed in seeds:
        model, stats = train_recall_model(task, **{**TRAIN, "steps": args.steps}, seed=seed)
        ctx, q, a = task.eval_batch(args.samples, torch.Generator().manual_seed(seed + 1))
        rows = fidelity_table(model, ctx, q, a, pol, RATIOS)
        full = next(r for r in rows if r["policy"] == "full")
        fulls.append((seed, stats["train_loss"], full["accuracy"]))
        print(f"seed {seed}: trained in {stats['train_s']:.0f} s, full-cache accuracy "
              f"{full['accuracy']:.3f} [{time.perf_counter() - t0:.0f} s]", flush=True)
        runs.append(rows)
        if taus:
            tr = []
            for t in taus:
                for r in fidelity_table(model, ctx, q, a, ["capkv"], RATIOS,
                                        press=PressConfig(tau=t)):
                    if r["policy"] == "capkv":
                        tr.append({**r, "policy": f"capkv tau={t:g}"})
            tau_runs.append(tr)
    print(f"\ntiny Llama (hidden 64, 2 layers, GQA 4/2), layout {args.layout}, trained "
          f"{args.steps} steps per seed; {args.samples} questions per seed; "
          f"{time.perf_counter() - t0:.0f} s in all")
    print(md("Trained models", ["seed", "final train loss", "full-cache accuracy"],
             [[seed, f"{loss:.3f}", f"{acc:.3f}"] for seed, loss, acc in fulls],
             name="model-seeds"))
    skl, sacc = summarize(runs, "kl"), summarize(runs, "accuracy")
    n = len(seeds) * args.samples
    print(md(f"Model level: KL(full || compressed), mean over {n} questions [95% bootstrap CI]",
             cols, ci_grid(skl, pol, RATIOS), name="model-kl"))
    print(md(f"Model level: answer accuracy (full cache "
             f"{sum(f[2] for f in fulls) / len(fulls):.3f}), mean [95% bootstrap CI]",
             cols, ci_grid(sacc, pol, RATIOS), name="model-accuracy"))
    vrows = []
    for r in RATIOS:
        row = [r]
        for s, lower in ((skl, True), (sacc, False)):
            v, best = verdict(s, r, lower=lower, exclude=("full", "greedy_logdet"))
            vg, _ = verdict(s, r, lower=lower, exclude=("full",))
            row += [f"{best} {s[best, r][0]:.3g}", f"{v} (incl. greedy_logdet: {vg})"]
        vrows.append(row)
    print(md("Verdict (rule fixed beforehand: tied = CapKV's 95% CI overlaps the best other "
             "policy's; competitors = the six baselines)", ["ratio", "best other (KL)",
                                                            "CapKV on KL", "best other (acc.)",
                                                            "CapKV on accuracy"], vrows,
             name="model-verdict"))
    if tau_runs:
        names = [f"capkv tau={t:g}" for t in taus]
        print(md("CapKV tau sensitivity (post hoc; NOT used for the verdict): KL mean [95% CI]",
                 cols, ci_grid(summarize(tau_runs, "kl"), names, RATIOS), name="tau-kl"))
        print(md("CapKV tau sensitivity: accuracy mean [95% CI]", cols,
                 ci_grid(summarize(tau_runs, "accuracy"), names, RATIOS), name="tau-accuracy"))


def cost(args) -> None:
    """Scoring time of the CapKV hook (anchor, relevance, leverage, top-k, gather; all layers)
    over the full prefill time, measured alternately in the same run (median of repeats)."""
    from icml.models import tiny_causal_lm

    configs = {"tiny (hidden 64, 4 heads of d_h 16, 2 KV heads, 2 layers)":
               dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2),
               "d_h 128 (hidden 1024, 8 heads of d_h 128, 2 KV heads, FFN 3584, 2 layers)":
               REALISTIC}
    rows = []
    for name, cfg in configs.items():
        for T in [int(x) for x in args.cost_T.split(",")]:
            model = tiny_causal_lm("llama", seed=0, vocab_size=256, max_positions=2 * T + 1024,
                                   **cfg)
            ids = torch.randint(4, 256, (1, T), generator=torch.Generator().manual_seed(2))
            reps = 5 if cfg["hidden_size"] <= 128 else 3
            tf, ts = [], []
            prefill(model, ids)  # warm-up
            for _ in range(reps):
                t0 = time.perf_counter()
                full_cache = prefill(model, ids)
                tf.append(time.perf_counter() - t0)
                press = CapKVPress(0.5)
                comp = prefill(model, ids, press)
                ts.append(press.last_scoring_s)
            med = lambda x: sorted(x)[len(x) // 2]  # noqa: E731
            rows.append([name, T, med(tf), med(ts), med(ts) / med(tf),
                         comp.nbytes() / full_cache.nbytes()])
            del model
    print(md("Cost at ratio 0.5 (median of repeats, same run): CapKV scoring / full prefill",
             ["model", "T", "full prefill (s)", "CapKV scoring, all layers (s)",
              "scoring / prefill", "cache bytes kept / full"], rows, name="cost"))


def lm_level(args, pol, cols) -> None:
    """Train a tiny Llama LM per seed on GrammarCorpus; continuation fidelity per policy/ratio."""
    from icml_capkv.generation import continuation_logits
    from icml_capkv.lm import GrammarCorpus, continuation_fidelity, train_lm_model
    from icml_capkv.presses import make_press

    corpus = GrammarCorpus()
    T, M = LM["context"], LM["continuation"]
    seeds = [int(x) for x in args.seeds.split(",")]
    runs, info = [], []
    t0 = time.perf_counter()
    for seed in seeds:
        model, stats = train_lm_model(corpus, seq_len=T + M + 1, steps=args.lm_steps, seed=seed)
        docs = corpus.sample(args.lm_docs, T + M + 1, seed=seed)  # eval seeds < 10**6
        rows = continuation_fidelity(model, docs, T, pol, RATIOS, entity_mask=corpus.is_name)
        runs.append(rows)
        # Does the model copy the document's entities? At the continuation's name tokens: the
        # probability mass on names of this document (they recur) over the mass on all names,
        # on the full cache and on a cache of the 4 sinks + the last 10% of the context.
        inp, tg = docs[:, T:-1], docs[:, T + 1:]
        names = torch.arange(corpus.name0, corpus.noun0)
        in_doc = (docs[:, :, None] == names).any(1)  # (N, n_names)
        copy = {}
        for name, press in (("full", None), ("recent", make_press("streaming", 0.9))):
            pr = continuation_logits(model, prefill(model, docs[:, :T], press), inp).softmax(-1)
            pn = pr[..., corpus.name0:corpus.noun0]
            frac = (pn * in_doc[:, None]).sum(-1) / pn.sum(-1)
            copy[name] = float(frac[corpus.is_name(tg)].mean())
        chance = corpus.n_entities / corpus.n_names
        full = next(r for r in rows if r["policy"] == "full")
        info.append((seed, stats["train_loss"], full["nll"], copy["full"], copy["recent"], chance))
        print(f"seed {seed}: trained in {stats['train_s']:.0f} s, loss {stats['train_loss']:.3f} "
              f"[{time.perf_counter() - t0:.0f} s]", flush=True)
    print(f"\nLM continuation: tiny Llama (hidden 64, 2 layers, GQA 4/2) trained {args.lm_steps} "
          f"steps per seed on GrammarCorpus (vocab {corpus.vocab_size}); context T = {T}, "
          f"continuation M = {M}; {args.lm_docs} held-out documents per seed; "
          f"{time.perf_counter() - t0:.0f} s in all")
    print(md("LM models", ["seed", "final train loss", "continuation NLL (full cache)",
                           "share of name mass on this document's names, full cache",
                           "same, sinks + last 10% only", "chance"],
             [[seed] + [f"{v:.3f}" for v in vals] for seed, *vals in info], name="lm-seeds"))
    n = len(seeds) * args.lm_docs
    skl, spr = summarize(runs, "kl"), summarize(runs, "ppl_ratio")
    print(md(f"LM continuation: mean KL(full || compressed) per token, mean over {n} documents "
             "[95% bootstrap CI]", cols, ci_grid(skl, pol, RATIOS), name="lm-kl"))
    print(md("LM continuation: perplexity ratio compressed / full, mean over documents [95% "
             "bootstrap CI]", cols, ci_grid(spr, pol, RATIOS, digits=4), name="lm-ppl"))
    ent = {(r["policy"], r["ratio"]): [] for r in runs[0]}
    for rows in runs:
        for r in rows:
            ent[r["policy"], r["ratio"]].append(r["entities_kept"])
    print(md("LM context: fraction of name (entity) tokens kept, mean over layers, KV heads and "
             "seeds", cols, [[p] + [sum(ent[p, r]) / len(ent[p, r]) for r in RATIOS]
                             for p in pol], name="lm-entities"))
    vrows = []
    for r in RATIOS:
        row = [r]
        for s in (skl, spr):
            v, best = verdict(s, r, lower=True, exclude=("full", "greedy_logdet"))
            vg, _ = verdict(s, r, lower=True, exclude=("full",))
            row += [f"{best} {s[best, r][0]:.4g}", f"{v} (incl. greedy_logdet: {vg})"]
        vrows.append(row)
    print(md("LM verdict (same rule: tied = CapKV's 95% CI overlaps the best other policy's; "
             "competitors = the six baselines)", ["ratio", "best other (KL)", "CapKV on KL",
                                                  "best other (ppl ratio)",
                                                  "CapKV on ppl ratio"], vrows,
             name="lm-verdict"))


if __name__ == "__main__":
    main()
