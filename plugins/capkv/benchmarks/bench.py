"""CapKV vs eviction baselines, in one run: tensor-level output error, model-level accuracy/KL,
and cost (scoring time as a fraction of prefill, cache bytes). Prints Markdown tables.

    python benchmarks/bench.py [--steps 400] [--samples 256] [--cost-T 1024] [--n-queries 4]
"""

from __future__ import annotations

import argparse
import platform
import time

import torch
from icml_capkv import POLICIES, CapKVPress, prefill
from icml_capkv.fidelity import fidelity_table, tensor_benchmark
from icml_capkv.recall import RecallTask, train_recall_model

RATIOS = (0.25, 0.5, 0.75, 0.9)


def md(title: str, cols: list[str], rows: list[list]) -> str:
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--cost-T", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-queries", type=int, default=4, help="questions per training sequence")
    ap.add_argument("--parts", default="tensor,model,cost", help="which parts to run")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
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
        print(md(f"Tensor level, {mode} queries: relative attention-output error (x = ratio to "
                 f"capkv); Spearman(capacity, error) = {rho:.2f} [{time.perf_counter() - t0:.0f}"
                 " s]", cols, grid(rows, "error", pol, RATIOS, ref="capkv")))

    task = RecallTask(context_len=64, n_pairs=8, n_queries=args.n_queries)
    t0 = time.perf_counter()
    model, stats = train_recall_model(task, steps=args.steps if "model" in parts else 0, seed=0)
    if "model" in parts:
        model_level(args, task, model, stats, t0, pol, cols)
    if "cost" in parts:
        cost(args, task, model)


def model_level(args, task, model, stats, t0, pol, cols) -> None:
    print(f"\ntiny Llama (hidden 64, 2 layers, GQA 4/2) trained {args.steps} steps in "
          f"{time.perf_counter() - t0:.0f} s, final loss {stats['train_loss']:.3f}")
    ctx, q, a = task.eval_batch(args.samples, torch.Generator().manual_seed(1))
    rows = fidelity_table(model, ctx, q, a, pol, RATIOS)
    full = next(r for r in rows if r["policy"] == "full")
    print(md(f"Model level: answer accuracy (full cache {full['accuracy']:.3f})", cols,
             grid(rows, "accuracy", pol, RATIOS)))
    print(md("Model level: KL(full || compressed) (x = ratio to capkv)", cols,
             grid(rows, "kl", pol, RATIOS, ref="capkv")))



def cost(args, task, model) -> None:
    # Cost at a longer context: scoring time / full prefill time, kept cache bytes / full.
    T = args.cost_T
    ids = torch.randint(4, task.vocab_size, (1, T), generator=torch.Generator().manual_seed(2))
    times = {"full": [], "capkv": []}
    for _ in range(5):
        t0 = time.perf_counter()
        full_cache = prefill(model, ids)
        times["full"].append(time.perf_counter() - t0)
        press = CapKVPress(0.5)
        comp = prefill(model, ids, press)
        times["capkv"].append(press.last_scoring_s)
    tf, ts = min(times["full"]), min(times["capkv"])
    print(md(f"Cost, T={T}, ratio 0.5 (min of 5)", ["quantity", "value"],
             [["full prefill (s)", tf], ["CapKV scoring, all layers (s)", ts],
              ["scoring / prefill", ts / tf],
              ["cache bytes kept / full", comp.nbytes() / full_cache.nbytes()]]))


if __name__ == "__main__":
    main()
