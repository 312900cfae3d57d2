"""Benchmark: XSpecMesh speculative decoding against autoregressive decoding, in one run.

Part ``mesh`` (the paper's setting at CPU scale): for each seed, train the backbone on the
synthetic primitives exactly as ``icml run xspecmesh`` does, distil KL heads and train CE heads,
then decode the same class prompts with AR sampling, AR greedy and every acceptance rule with
both head types, all arms interleaved mesh by mesh. Reports backbone calls, accepted tokens per
call, wall-clock speed-up, valid-mesh rate and Chamfer distance (mean over seeds, per-mesh
bootstrap CIs pooled over seeds).

Part ``text`` (the same decoder on a real pretrained LLM): SmolLM2-135M-Instruct from
``icml.models.load_pretrained``; K heads distilled briefly (KL) on cached hidden states of the
core's evaluation text; greedy decoding of held-out text prompts with AR, XSpecMesh greedy and
top-k rules, transformers ``generate`` (greedy) and transformers' prompt-lookup assisted decoding
(``prompt_lookup_num_tokens``, the peer), backbone calls counted by a forward hook.

    python plugins/xspecmesh/benchmarks/bench.py mesh --seeds 3
    python plugins/xspecmesh/benchmarks/bench.py text

``--out-results plugins/xspecmesh/results/<name>.json`` also writes the printed table as an
``icml.results`` file whose command is this invocation (run from the repository root); the
README renders it and ``icml reproduce xspecmesh <name>`` reruns it. Wall-clock speed-ups are
declared ``timing`` (shown, not compared).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from icml_xspecmesh.config import EvaluateConfig
from icml_xspecmesh.evaluation import Arm
from icml_xspecmesh.job import LABEL, _base_of, _baseline_arms, _refs, _run, make_heads, prepare
from icml_xspecmesh.metrics import bootstrap_ci, bootstrap_diff_ci

import icml
from icml import results as icml_results
from icml.config import build_config

WALL_TOL = {"speed-up (wall)": {"timing": True, "why": "wall-clock ratio on a shared machine"}}


def _write(args: argparse.Namespace, table: dict, seeds: list[int], clock: object) -> None:
    if not args.out_results:
        return
    command = "python plugins/xspecmesh/benchmarks/bench.py " + shlex.join(sys.argv[1:])
    path = icml_results.write(args.out_results, [table], command=command, plugin="xspecmesh",
                              seeds=seeds, quick=False, clock=clock, threads=args.threads,
                              tolerance=None if os.path.isfile(args.out_results) else WALL_TOL)
    print(f"results file: {path}", file=sys.stderr)


def _ms(xs: list[float], f: str = ".2f") -> str:
    if len(xs) == 1:
        return format(xs[0], f)
    return f"{format(statistics.mean(xs), f)} ± {format(statistics.stdev(xs), f)}"


def mesh(args: argparse.Namespace) -> None:
    clock = icml_results.Clock()
    cfg = build_config(EvaluateConfig, {"num_meshes": args.meshes}, args.set)
    per: dict[str, dict[str, list]] = {}
    order: list[str] = []
    for seed in range(args.seeds):
        ctx = icml.RunContext(out_dir=Path(tempfile.mkdtemp()), seed=seed, device=args.device,
                              show_progress=False)
        t0 = time.perf_counter()
        info = prepare(ctx, cfg)
        refs = _refs(ctx, cfg, info)
        arms = _baseline_arms(cfg.acceptance)
        for loss in cfg.losses:
            heads, _ = make_heads(ctx, cfg, info, loss)
            arms += [Arm(f"{loss.upper()} heads, {LABEL[r]}", heads, r) for r in cfg.acceptance]
        results = _run(ctx, cfg, info, arms, refs)
        for r in results:
            base = _base_of(results, r.rule)
            d = per.setdefault(r.name, {k: [] for k in ("tpc", "calls", "wall", "acc", "valid",
                                                        "cd", "valid_all", "cd_all", "base",
                                                        "same")})
            if r.name not in order:
                order.append(r.name)
            d["tpc"].append(r.tokens_per_call)
            d["calls"].append(base.calls_per_mesh / r.calls_per_mesh)
            d["wall"].append(base.seconds / r.seconds)
            d["acc"].append(r.acceptance_rate)
            d["valid"].append(r.valid_rate)
            d["cd"].append(r.chamfer_ci()[0])
            d["valid_all"] += [float(v) for v in r.valid]
            d["cd_all"] += r.chamfer
            d["base"] = base.name
            d["same"].append(r.sequences == base.sequences)
        print(f"seed {seed}: backbone loss {info['backbone_loss']:.3f}, "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    print(f"\n### Meshes: {args.seeds} seeds x {args.meshes} meshes per decoder, K="
          f"{cfg.num_heads}, top_k={cfg.decode.top_k}, accept_top_k={cfg.decode.accept_top_k}\n")
    print("| decoder | tokens/call | speed-up (calls) | speed-up (wall) | draft acceptance | "
          "valid rate [95% CI] | Chamfer [95% CI] | valid diff vs AR [95% CI] | "
          "Chamfer diff vs AR [95% CI] |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for name in order:
        d = per[name]
        b = per[d["base"]]
        v, vlo, vhi = bootstrap_ci(d["valid_all"])
        c, clo, chi = bootstrap_ci(d["cd_all"])
        if name == d["base"]:
            diffs = "-", "-"
        else:
            dv = bootstrap_diff_ci(d["valid_all"], b["valid_all"])
            dc = bootstrap_diff_ci(d["cd_all"], b["cd_all"])
            diffs = (f"{dv[0]:+.3f} [{dv[1]:+.3f}, {dv[2]:+.3f}]",
                     f"{dc[0]:+.4f} [{dc[1]:+.4f}, {dc[2]:+.4f}]")
        acc = "-" if all(np.isnan(d["acc"])) else _ms(d["acc"], ".3f")
        same = " (= AR greedy)" if name != d["base"] and all(d["same"]) else ""
        print(f"| {name}{same} | {_ms(d['tpc'])} | {_ms(d['calls'])}x | {_ms(d['wall'])}x | "
              f"{acc} | {v:.3f} [{vlo:.3f}, {vhi:.3f}] | {c:.4f} [{clo:.4f}, {chi:.4f}] | "
              f"{diffs[0]} | {diffs[1]} |")
        def est(t: tuple) -> dict | None:
            return None if np.isnan(t[0]) else {"value": t[0], "lo": t[1], "hi": t[2]}

        rows.append([name + same, statistics.mean(d["tpc"]), statistics.mean(d["calls"]),
                     statistics.mean(d["wall"]),
                     None if all(np.isnan(d["acc"])) else statistics.mean(d["acc"]),
                     est((v, vlo, vhi)), est((c, clo, chi)),
                     None if name == d["base"] else est(dv),
                     None if name == d["base"] else est(dc)])
    cols = ["decoder", "tokens/call", "speed-up (calls)", "speed-up (wall)", "draft acceptance",
            "valid rate [95% CI]", "Chamfer [95% CI]", "valid diff vs AR [95% CI]",
            "Chamfer diff vs AR [95% CI]"]
    fmts = {"tokens/call": ".2f", "speed-up (calls)": ".2f", "speed-up (wall)": ".2f",
            "draft acceptance": ".3f", "valid rate [95% CI]": ".3f", "Chamfer [95% CI]": ".4f",
            "valid diff vs AR [95% CI]": "+.3f", "Chamfer diff vs AR [95% CI]": "+.4f"}
    _write(args, icml_results.make_table(
        f"Meshes: {args.seeds} seeds x {args.meshes} meshes per decoder (means over seeds; CIs: "
        "per-mesh bootstrap pooled over seeds)", cols, rows, name="mesh", formats=fmts),
        list(range(args.seeds)), clock)


class _CallCounter:
    def __init__(self, model: torch.nn.Module) -> None:
        self.n = 0
        model.register_forward_pre_hook(self._hook)

    def _hook(self, *_: object) -> None:
        self.n += 1


def text(args: argparse.Namespace) -> None:
    from icml_xspecmesh.distill import distillation_loss
    from icml_xspecmesh.heads import SpeculativeHeads
    from icml_xspecmesh.speculative import speculative_generate

    from icml.data import eval_token_ids
    from icml.models import load_pretrained

    clock = icml_results.Clock()
    torch.manual_seed(0)
    model, tok = load_pretrained("smollm2-135m-instruct")
    model.eval()
    counter = _CallCounter(model)
    n_train = args.train_seqs * args.seq_len
    ids = torch.tensor(eval_token_ids(tok, n_train + args.prompts * 2 * args.prompt_len))
    train = ids[:n_train].view(args.train_seqs, args.seq_len)
    t0 = time.perf_counter()
    with torch.no_grad():
        hidden = torch.cat([model(input_ids=train[i:i + 4], output_hidden_states=True)
                            .hidden_states[-1] for i in range(0, len(train), 4)])
    t_hidden = time.perf_counter() - t0
    heads = SpeculativeHeads.from_model(model, num_heads=args.heads)
    W = model.get_output_embeddings().weight.detach()
    with torch.no_grad():  # the teacher's top tokens at every position, once
        top = torch.cat([torch.topk(h @ W.T, args.support, dim=-1).indices for h in hidden])
    top = top.view(*hidden.shape[:2], args.support)
    opt = torch.optim.AdamW(heads.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    losses = []
    heads.train()
    for _ in range(args.steps):
        # sparse KL distillation: full-vocabulary logits of 3 heads x 49k tokens are too slow
        # on this CPU, so teacher and heads are compared on the union S of the teacher's
        # top-`support` tokens over the batch (renormalised on S)
        idx = torch.randint(0, len(hidden), (args.batch,), generator=gen)
        h = hidden[idx]
        S = torch.unique(top[idx])
        WS = W[S]
        z = torch.stack([head(h) for head in heads.heads], dim=2)
        loss = distillation_loss(z @ WS.T, h @ WS.T, loss="kl", decay=0.8)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    heads.eval()
    t_distill = time.perf_counter() - t0
    print(f"hidden states {t_hidden:.0f} s, distillation {args.steps} steps {t_distill:.0f} s, "
          f"KL {losses[0]:.3f} -> {statistics.mean(losses[-5:]):.3f}", file=sys.stderr)
    held = ids[n_train:].view(args.prompts, 2 * args.prompt_len)[:, :args.prompt_len]
    eos = tok.eos_token_id
    new = args.new_tokens

    def hf(p: torch.Tensor, **kw: object) -> tuple[list[int], int]:
        out = model.generate(p, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                             pad_token_id=eos, **kw)
        return out[0].tolist(), 0

    def ours(hd: object, rule: str) -> object:
        def f(p: torch.Tensor) -> tuple[list[int], int]:
            out = speculative_generate(model, hd, p, max_new_tokens=new, acceptance=rule,
                                       top_k=5, accept_top_k=args.accept_top_k, eos_token_id=[],
                                       generator=torch.Generator().manual_seed(0))
            return out.sequences[0].tolist(), out.n_accepted[0]
        return f

    arms = {"AR greedy (our loop)": ours(None, "greedy"),
            "transformers generate, greedy": hf,
            "transformers prompt lookup (10), greedy":
                lambda p: hf(p, prompt_lookup_num_tokens=10),
            f"XSpecMesh greedy, K={args.heads}": ours(heads, "greedy"),
            f"XSpecMesh top-k (accept_top_k={args.accept_top_k}), K={args.heads}":
                ours(heads, "topk")}
    stats = {k: {"calls": 0, "sec": 0.0, "seqs": []} for k in arms}
    with torch.no_grad():
        for i in range(args.prompts):
            p = held[i:i + 1]
            names = list(arms)
            for j in range(len(names)):
                name = names[(i + j) % len(names)]
                c0, t0 = counter.n, time.perf_counter()
                seq, _ = arms[name](p)
                stats[name]["sec"] += time.perf_counter() - t0
                stats[name]["calls"] += counter.n - c0
                stats[name]["seqs"].append(seq)
    base = stats["AR greedy (our loop)"]
    print(f"\n### SmolLM2-135M-Instruct (pretrained), {args.prompts} prompts of "
          f"{args.prompt_len} tokens, {new} new tokens each; heads distilled (sparse KL, top-"
          f"{args.support} support) {args.steps} steps x {args.batch} x {args.seq_len} tokens\n")
    print("| decoder | backbone calls / sequence | tokens/call | speed-up (calls) | "
          "speed-up (wall) | output = AR greedy |")
    print("|---|---|---|---|---|---|")
    rows = []
    for name, s in stats.items():
        cps = s["calls"] / args.prompts
        same = sum(a == b for a, b in zip(s["seqs"], base["seqs"], strict=True))
        print(f"| {name} | {cps:.1f} | {new / cps:.2f} | {base['calls'] / s['calls']:.2f}x | "
              f"{base['sec'] / s['sec']:.2f}x | {same}/{args.prompts} |")
        rows.append([name, cps, new / cps, base["calls"] / s["calls"], base["sec"] / s["sec"],
                     f"{same}/{args.prompts}"])
    cols = ["decoder", "backbone calls / sequence", "tokens/call", "speed-up (calls)",
            "speed-up (wall)", "output = AR greedy"]
    _write(args, icml_results.make_table(
        f"SmolLM2-135M-Instruct, {args.prompts} prompts of {args.prompt_len} tokens, {new} new "
        f"tokens each; heads distilled (sparse KL, top-{args.support} support) {args.steps} "
        f"steps x {args.batch} x {args.seq_len} tokens", cols, rows, name="text",
        formats={"backbone calls / sequence": ".1f", "tokens/call": ".2f",
                 "speed-up (calls)": ".2f", "speed-up (wall)": ".2f"}), [0], clock)


def main() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    threads = icml_results.apply_threads(1)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="part", required=True)
    m = sub.add_parser("mesh")
    m.add_argument("--seeds", type=int, default=3)
    m.add_argument("--meshes", type=int, default=30)
    m.add_argument("--device", default="cpu")
    m.add_argument("--set", action="append", default=[], help="config key=value")
    m.add_argument("--out-results", default=None, help="also write an icml.results file")
    t = sub.add_parser("text")
    t.add_argument("--heads", type=int, default=3)
    t.add_argument("--steps", type=int, default=300,
                   help="distillation steps (300 made the README's table)")
    t.add_argument("--out-results", default=None, help="also write an icml.results file")
    t.add_argument("--batch", type=int, default=2)
    t.add_argument("--seq-len", type=int, default=128)
    t.add_argument("--train-seqs", type=int, default=32)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--prompts", type=int, default=6)
    t.add_argument("--prompt-len", type=int, default=64)
    t.add_argument("--new-tokens", type=int, default=48)
    t.add_argument("--accept-top-k", type=int, default=2)
    t.add_argument("--support", type=int, default=32, help="teacher top tokens per position "
                   "in the sparse KL")
    args = ap.parse_args()
    args.threads = threads
    mesh(args) if args.part == "mesh" else text(args)


if __name__ == "__main__":
    main()
