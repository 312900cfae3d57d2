"""Benchmark: LED against temperature sampling, DoLa and LED's own base path, in one run.

1. Trains the tiny model on the task (SFT, then post-training to entropy collapse), exactly as
   `icml run led` does, and prints pass@1 / pass@16 per method and temperature over several
   sampling seeds (95% CIs over seeds x problems, icml.stats) with the ratio to sampling.
2. Measures per-token decoding cost (ms/token, batch 64, fixed length) of LED, DoLa and plain
   sampling in the same token loop, and of transformers' native sampler.

    python plugins/led/benchmarks/bench.py [--seeds 3] [--temperatures 0.6,1.0,1.4]

No peers are pip-installable (the official code is a patched CUDA SGLang; transformers' DoLa lives
on the Hub), so DoLa is this plugin's own re-implementation.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from icml_led.config import InferConfig
from icml_led.evaluation import run_method
from icml_led.job import _methods, prepare
from icml_led.task import make_problems

import icml
from icml.config import build_config


def quality(args: argparse.Namespace, tables: list) -> None:
    from icml_led.metrics import pass_at_k

    from icml import stats
    from icml.results import make_table

    cfg = build_config(InferConfig, {}, args.set)
    ctx = icml.RunContext(out_dir=Path(tempfile.mkdtemp()), seed=0, device=args.device,
                          show_progress=False)
    t0 = time.perf_counter()
    info = prepare(ctx, cfg)
    print(f"trained in {time.perf_counter() - t0:.1f} s; final-layer entropy on the thinking "
          f"span {info['profile_before'][-1]:.3f} -> {info['profile_after'][-1]:.3f} nats; "
          f"profile after: {[round(x, 2) for x in info['profile_after']]}\n")
    model, tok, led_cfg = info["model"], info["tok"], info["led_config"]
    problems = make_problems(args.problems, cfg.num_terms, cfg.base, seed=12345,
                             min_terms=cfg.min_terms)
    n = cfg.num_samples
    ks = [1, n]
    cols = ["T", "method", "pass@1 [95% CI]", f"pass@{n} [95% CI]",
            f"d pass@{n} vs sampling [95% CI]", f"MDE d pass@{n}", f"pass@{n} / sampling"]
    rows = []
    for t in args.temperatures:
        # seeds x problems per method: the same problems under every sampling seed (crossed)
        per: dict[str, dict[int, list[list[float]]]] = {}
        for seed in range(args.seeds):
            for m in _methods(cfg, led_cfg, t):
                r = run_method(model, tok, problems, m, num_samples=n, ks=ks,
                               seed=1000 + seed, max_new_tokens=cfg.num_terms + 4)
                for k in ks:
                    per.setdefault(m.name, {}).setdefault(k, []).append(
                        [pass_at_k(n, c, k) for c in r.correct])
        ref = per["sampling"][n]
        ref_mean = statistics.mean(x for row in ref for x in row)
        for name, by_k in per.items():
            mean_n = statistics.mean(x for row in by_k[n] for x in row)
            diff = [[a - b for a, b in zip(ra, rb)] for ra, rb in zip(by_k[n], ref)]
            rows.append([f"{t:g}", name, stats.hierarchical_ci(by_k[1], seed=0),
                         stats.hierarchical_ci(by_k[n], seed=0),
                         stats.hierarchical_diff_ci(by_k[n], ref, seed=0),
                         stats.mde_from_samples(diff, seed=0),
                         mean_n / ref_mean if ref_mean else float("nan")])
    tables.append(make_table(
        f"pass@k on the tiny model ({args.problems} problems x {n} samples x {args.seeds} "
        "sampling seeds; 95% CIs: bootstrap over seeds x problems)", cols, rows, name="quality",
        formats={c: ".3f" for c in cols[2:]}))
    for r in rows:
        print("| " + " | ".join(v.fmt(".3f") if hasattr(v, "fmt") else
                                (v if isinstance(v, str) else f"{v:.3f}") for v in r) + " |")
    sys.stdout.flush()


def cost(args: argparse.Namespace, tables: list) -> None:
    from icml_led import DoLaDecoding, LEDConfig, LEDDecoding, SamplingDecoding

    from icml.models import tiny_causal_lm

    device = torch.device(args.device if args.device != "auto" else
                          ("cuda" if torch.cuda.is_available() else "cpu"))
    rows = []
    for layers, depth in ((8, 4), (16, 8)):
        model = tiny_causal_lm("llama", num_layers=layers, hidden_size=64, device=device)
        ids = torch.randint(4, 260, (64, 16), generator=torch.Generator().manual_seed(0)).to(device)
        kw = dict(do_sample=True, temperature=0.6, top_k=20, top_p=0.95,
                  max_new_tokens=args.tokens, min_new_tokens=args.tokens, pad_token_id=0)
        def g() -> torch.Generator:
            return torch.Generator(device).manual_seed(0)

        methods = {
            "transformers sampling": None,
            "sampling (same loop)": lambda: SamplingDecoding(g()),
            "dola (high)": lambda: DoLaDecoding("high", 0.1, g()),
            f"led (d={depth}, k=8)": lambda d=depth: LEDDecoding(
                LEDConfig(depth=d, top_k=8, think_only=False), g()),
        }
        times = {}
        for name, make in methods.items():
            best = float("inf")
            for _ in range(args.repeats):
                extra = {} if make is None else {"custom_generate": make()}
                t0 = time.perf_counter()
                model.generate(ids, **kw, **extra)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                best = min(best, time.perf_counter() - t0)
            times[name] = 1000 * best / (args.tokens * ids.shape[0])
        base = times["transformers sampling"]
        same = times["sampling (same loop)"]
        for name, ms in times.items():
            rows.append([layers, name, ms, ms / base, ms / same])
    from icml.results import make_table

    cols = ["layers", "decoder", "ms/token", "vs transformers sampling",
            "vs sampling in the same loop"]
    tables.append(make_table(f"per-token decoding cost (batch 64, {args.tokens} new tokens, "
                             f"random prompts, best of {args.repeats})", cols, rows, name="cost",
                             formats={"ms/token": ".4f", "vs transformers sampling": ".2f",
                                      "vs sampling in the same loop": ".2f"}))
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:.4f} | {r[3]:.2f} | {r[4]:.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--problems", type=int, default=48)
    p.add_argument("--temperatures", type=lambda s: [float(x) for x in s.split(",")],
                   default=[0.6, 1.0, 1.4])
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--set", action="append", default=[], help="InferConfig override key=value")
    p.add_argument("--skip-quality", action="store_true")
    p.add_argument("--out-results", default=None,
                   help="write the tables as an icml results file (path from the repo root)")
    args = p.parse_args()
    from icml import results

    clock = results.Clock()
    threads = results.apply_threads(args.threads)     # $ICML_THREADS overrides --threads
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, device {args.device}")
    tables: list = []
    if not args.skip_quality:
        quality(args, tables)
    cost(args, tables)
    if args.out_results:
        import shlex

        command = "python plugins/led/benchmarks/bench.py " + shlex.join(sys.argv[1:])
        path = results.write(args.out_results, tables, command=command, plugin="led",
                             seeds=list(range(args.seeds)), quick=True, clock=clock,  # ~70 s here
                             threads=threads)
        print(f"results file: {path}")


if __name__ == "__main__":
    main()
