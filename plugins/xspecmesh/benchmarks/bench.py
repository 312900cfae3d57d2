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


def _draft_model(model: torch.nn.Module, layer: int) -> torch.nn.Module:
    """A one-layer draft for transformers' assisted generation: the target's own embedding,
    final norm and lm_head (shared, frozen) around a copy of its decoder layer ``layer`` (the
    only trained part)."""
    import copy

    cfg = copy.deepcopy(model.config)
    cfg.num_hidden_layers = 1
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[:1]
    with torch.device("meta"):
        draft = type(model)(cfg)
    draft.model.embed_tokens = model.model.embed_tokens
    draft.model.norm = model.model.norm
    draft.model.rotary_emb = model.model.rotary_emb
    draft.lm_head = model.lm_head
    block = copy.deepcopy(model.model.layers[layer])
    block.self_attn.layer_idx = 0
    draft.model.layers = torch.nn.ModuleList([block])
    draft.generation_config = copy.deepcopy(model.generation_config)
    draft.eval()
    for prm in block.parameters():
        prm.requires_grad_(True)
    return draft


def _sparse_kl(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) per position on a shared token subset, renormalised there."""
    logp = torch.log_softmax(teacher.float(), dim=-1)
    return (logp.exp() * (logp - torch.log_softmax(student.float(), dim=-1))).sum(-1).mean()


AR_SAMPLING = "AR sampling (our loop, top-5)"


def text(args: argparse.Namespace) -> None:
    from icml_xspecmesh.distill import distillation_loss
    from icml_xspecmesh.heads import SpeculativeHeads
    from icml_xspecmesh.speculative import speculative_generate
    from icml_xspecmesh.timing import interleaved

    from icml import stats
    from icml.data import eval_token_ids
    from icml.models import load_pretrained

    clock = icml_results.Clock()
    torch.manual_seed(0)
    model, tok = load_pretrained("smollm2-135m-instruct")
    model.eval()
    for prm in model.parameters():
        prm.requires_grad_(False)
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
    # the draft model for transformers' assisted generation, trained with the same budget
    # (steps, batches, data, sparse-KL support, learning rate) as the heads
    draft = _draft_model(model, args.draft_layer)
    block = draft.model.layers[0]
    dopt = torch.optim.AdamW(block.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    dlosses = []
    draft.train()
    for _ in range(args.steps):
        idx = torch.randint(0, len(hidden), (args.batch,), generator=gen)
        S = torch.unique(top[idx])
        WS = W[S]
        hd = draft.model(input_ids=train[idx]).last_hidden_state
        loss = _sparse_kl(hd @ WS.T, hidden[idx] @ WS.T)
        dopt.zero_grad()
        loss.backward()
        dopt.step()
        dlosses.append(float(loss.detach()))
    draft.eval()
    for prm in block.parameters():
        prm.requires_grad_(False)
    t_draft = time.perf_counter() - t0
    print(f"draft model {args.steps} steps {t_draft:.0f} s, KL {dlosses[0]:.3f} -> "
          f"{statistics.mean(dlosses[-5:]):.3f}", file=sys.stderr)
    gc = draft.generation_config
    gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = args.heads, "constant"
    gc.assistant_confidence_threshold = 0.0
    held = ids[n_train:].view(args.prompts, 2 * args.prompt_len)[:, :args.prompt_len]
    eos = tok.eos_token_id
    new = args.new_tokens

    def hf(**kw: object) -> object:
        def f(p: torch.Tensor) -> list[int]:
            out = model.generate(p, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                 pad_token_id=eos, **kw)
            return out[0].tolist()
        return f

    def ours(hd: object, rule: str) -> object:
        def f(p: torch.Tensor) -> list[int]:
            out = speculative_generate(model, hd, p, max_new_tokens=new, acceptance=rule,
                                       top_k=5, accept_top_k=args.accept_top_k, eos_token_id=[],
                                       generator=torch.Generator().manual_seed(0))
            return out.sequences[0].tolist()
        return f

    arms = {"AR greedy (our loop)": ours(None, "greedy"),
            "transformers prompt lookup (10), greedy": hf(prompt_lookup_num_tokens=10),
            f"transformers assisted, draft model (layer {args.draft_layer} + shared embedding "
            f"and lm_head, {args.steps} steps), K={args.heads}, greedy":
                hf(assistant_model=draft),
            f"XSpecMesh greedy, K={args.heads}": ours(heads, "greedy"),
            f"XSpecMesh top-k (accept_top_k={args.accept_top_k}), K={args.heads}":
                ours(heads, "topk"),
            AR_SAMPLING: ours(None, "exact"),
            f"XSpecMesh exact sampling, K={args.heads}": ours(heads, "exact")}
    prompts = [held[i:i + 1] for i in range(args.prompts)]
    with torch.no_grad():
        model(input_ids=prompts[0])  # one untimed forward: first-call costs
        rec = interleaved(prompts, arms, counters={"calls": model, "dcalls": draft})
    base = rec["AR greedy (our loop)"]
    title = (f"SmolLM2-135M-Instruct, {args.prompts} prompts of {args.prompt_len} tokens, {new} "
             f"new tokens each; heads and draft model distilled (sparse KL, top-{args.support} "
             f"support) {args.steps} steps x {args.batch} x {args.seq_len} tokens; "
             f"{args.threads} thread(s), load {clock.load0} to {icml_results.load_average()}")
    cols = ["decoder", "backbone calls / sequence", "draft-model calls / sequence",
            "tokens/call", "speed-up (calls) [95% CI]", "speed-up (wall) [95% CI]",
            "output = AR greedy"]
    print(f"\n### {title}\n")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    rows, metrics = [], {}
    for name, r in rec.items():
        # greedy arms against AR greedy; the sampling rules (top-k, exact) against AR sampling
        # with the same sampler (top-5), as on meshes
        sampled = "top-k" in name or "exact" in name or name == AR_SAMPLING
        ref = rec[AR_SAMPLING] if sampled else base
        cps = sum(r["calls"]) / args.prompts
        same = sum(a == b for a, b in zip(r["out"], base["out"], strict=True))
        sp_calls = stats.ratio_ci(ref["calls"], r["calls"])
        sp_wall = stats.ratio_ci(ref["sec"], r["sec"])
        row = [name, cps, sum(r["dcalls"]) / args.prompts, new / cps, sp_calls.to_dict(),
               sp_wall.to_dict(), "-" if sampled else f"{same}/{args.prompts}"]
        rows.append(row)
        print("| " + " | ".join(icml_results.render_cell(c, ".3g") for c in row) + " |")
        logs = np.log(np.asarray(ref["sec"]) / np.asarray(r["sec"]))
        lcalls = np.log(np.asarray(ref["calls"], float) / np.asarray(r["calls"], float))
        metrics[name] = {"identical": same, "prompts": args.prompts,
                         "baseline": AR_SAMPLING if sampled else "AR greedy (our loop)",
                         "mde_log_wall_speedup": stats.mde_from_samples(logs),
                         "mde_log_calls_speedup": stats.mde_from_samples(lcalls)}
    timing = {"speed-up (wall) [95% CI]": {"timing": True,
                                          "why": "wall-clock ratio on a shared machine"}}
    if args.out_results:
        command = "python plugins/xspecmesh/benchmarks/bench.py " + shlex.join(sys.argv[1:])
        tab = icml_results.make_table(
            title, cols, rows, name="text",
            formats={c: ".3g" for c in cols[1:6]})
        icml_results.write(args.out_results, [tab], command=command, plugin="xspecmesh",
                           seeds=[0], quick=False, clock=clock, threads=args.threads,
                           tolerance=timing,
                           metrics={"arms": metrics, "distill_seconds": round(t_distill, 1),
                                    "draft_seconds": round(t_draft, 1),
                                    "hidden_seconds": round(t_hidden, 1),
                                    "heads_kl_last5": statistics.mean(losses[-5:]),
                                    "draft_kl_last5": statistics.mean(dlosses[-5:])})
        print(f"results file: {args.out_results}", file=sys.stderr)


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
    t.add_argument("--draft-layer", type=int, default=0, help="the target's decoder layer "
                   "copied into the one-layer draft model (the trained part)")
    t.add_argument("--support", type=int, default=32, help="teacher top tokens per position "
                   "in the sparse KL")
    args = ap.parse_args()
    args.threads = threads
    mesh(args) if args.part == "mesh" else text(args)


if __name__ == "__main__":
    main()
