"""Where the time of one decoding step goes: XSpecMesh speculative decoding on the tiny mesh
backbone, split into backbone forward (without its lm_head), the backbone's lm_head, the
heads' residual blocks, the heads' projections through the shared lm_head, the acceptance
rule (drafting and verification), the cache crop, and the rest of the Python loop.

    python plugins/xspecmesh/benchmarks/profile_step.py \
        --out-results plugins/xspecmesh/results/profile_step.json

The backbone and KL heads are trained as the default job trains them (2000 meshes, hidden 64,
3 layers, 300 + 200 steps, seed 0); then every mesh prompt is decoded with the speculative
decoder (greedy rule, K=3) and with AR greedy through the same loop, once as the loop ran up
to 0.1.5 (autograd left on: the backbone's weights require grad and the loop did not turn it
off; reproduced by calling the undecorated function, ``speculative_generate.__wrapped__``) and
once under ``torch.no_grad()`` (as the loop runs from 0.1.6), interleaved prompt by prompt.
Components are timed by wrapping the loop's functions (exclusive time: a nested call is charged
to itself, not to its caller); "other" is the loop's wall time less every component; per step =
over the verification calls, the prefill call included in the totals. Every cell is a clock
reading
(declared ``timing``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections import defaultdict
from contextlib import nullcontext
from typing import Any

import torch

from icml import results as icml_results

COMPONENTS = ("backbone forward (no lm_head)", "backbone lm_head", "heads: residual blocks",
              "heads: lm_head projections", "drafting (argmax / sampling of drafts)",
              "verification (acceptance rule)", "cache crop")


class StepProfiler:
    """Exclusive wall time per component, by wrapping the decoding loop's functions."""

    def __init__(self) -> None:
        self.t: dict[str, float] = defaultdict(float)
        self._stack: list[list[float]] = []  # [start, time of children]

    def enter(self) -> None:
        self._stack.append([time.perf_counter(), 0.0])

    def leave(self, name: str) -> None:
        start, children = self._stack.pop()
        elapsed = time.perf_counter() - start
        self.t[name] += elapsed - children
        if self._stack:
            self._stack[-1][1] += elapsed

    def wrap(self, fn: Any, name: str) -> Any:
        def wrapped(*a: Any, **k: Any) -> Any:
            self.enter()
            try:
                return fn(*a, **k)
            finally:
                self.leave(name)
        return wrapped

    def reset(self) -> None:
        self.t = defaultdict(float)


def install(prof: StepProfiler, model: Any, heads: Any) -> Any:
    """Wrap the loop's functions; returns a function that undoes every wrap."""
    from icml_xspecmesh import speculative as S

    undo: list[Any] = []

    def patch(obj: Any, name: str, component: str) -> None:
        old = getattr(obj, name)
        in_dict = name in vars(obj)
        setattr(obj, name, prof.wrap(old, component))
        undo.append(lambda: setattr(obj, name, old) if in_dict else delattr(obj, name))

    patch(S, "_forward", COMPONENTS[0])
    patch(heads, "forward", COMPONENTS[2])
    patch(heads, "project", COMPONENTS[3])
    patch(S, "_draft_chains", COMPONENTS[4])
    patch(S.Sampler, "verify", COMPONENTS[5])
    patch(S.Sampler, "n_matching", COMPONENTS[5])
    patch(S, "crop_cache", COMPONENTS[6])
    hooks = [model.lm_head.register_forward_pre_hook(lambda *_: prof.enter()),
             model.lm_head.register_forward_hook(lambda *_: prof.leave(COMPONENTS[1]))]

    def restore() -> None:
        for h in hooks:
            h.remove()
        for u in reversed(undo):
            u()
    return restore


def main() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--meshes", type=int, default=18, help="prompts (class tokens, cycled)")
    ap.add_argument("--max-new-tokens", type=int, default=200)
    ap.add_argument("--n-train", type=int, default=2000)
    ap.add_argument("--backbone-steps", type=int, default=300)
    ap.add_argument("--distill-steps", type=int, default=200)
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out-results", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    clock = icml_results.Clock()

    from icml_xspecmesh.distill import distill_heads
    from icml_xspecmesh.heads import SpeculativeHeads
    from icml_xspecmesh.timing import tiny_mesh_backbone

    tok, data, model = tiny_mesh_backbone(args.n_train, args.backbone_steps, args.device)
    heads = SpeculativeHeads.from_model(model, num_heads=args.heads)
    distill_heads(model, heads, data, loss="kl", steps=args.distill_steps, batch_size=16,
                  lr=1e-2, seed=0)
    prof = StepProfiler()
    restore = install(prof, model, heads)
    try:
        acc = _decode(args, tok, model, heads, prof)
    finally:
        restore()
    _report(args, acc, clock)


def _decode(args: argparse.Namespace, tok: Any, model: Any, heads: Any,
            prof: StepProfiler) -> dict:
    from icml_xspecmesh.dataset import CLASSES
    from icml_xspecmesh.speculative import speculative_generate
    from icml_xspecmesh.timing import interleaved

    arms = {("spec", "grad"): heads, ("ar", "grad"): None, ("spec", "nograd"): heads,
            ("ar", "nograd"): None}

    def arm(key: tuple[str, str]) -> Any:
        def f(prompt: torch.Tensor) -> tuple[Any, dict[str, float]]:
            prof.reset()
            # the grad arm: the loop as it ran up to 0.1.5, without its @torch.no_grad()
            fn = speculative_generate if key[1] == "nograd" else speculative_generate.__wrapped__
            with torch.no_grad() if key[1] == "nograd" else nullcontext():
                out = fn(model, arms[key], prompt, max_new_tokens=args.max_new_tokens,
                         acceptance="greedy", eos_token_id=2, pad_token_id=0)
            return out, dict(prof.t)
        return f

    prompts = [torch.tensor([tok.prefix(i % len(CLASSES))], device=args.device)
               for i in range(args.meshes)]
    rec = interleaved(prompts, {key: arm(key) for key in arms})
    acc = {k: {"t": defaultdict(float), "sec": 0.0, "steps": 0, "tokens": 0} for k in arms}
    for key, r in rec.items():
        a = acc[key]
        for out, t in r["out"]:
            for name, v in t.items():
                a["t"][name] += v
            a["sec"] += out.seconds
            a["steps"] += len(out.accepted_lengths[0])  # calls after the prefill
            a["tokens"] += out.n_new_tokens[0]
    return acc


def _report(args: argparse.Namespace, acc: dict, clock: Any) -> None:
    def per_step(key: tuple[str, str], name: str | None) -> float:
        a = acc[key]
        v = a["sec"] - sum(a["t"].values()) if name is None else a["t"].get(name, 0.0)
        return 1e3 * v / max(a["steps"], 1)

    cols = ["component", "XSpecMesh ms/step (autograd on, the loop up to 0.1.5)", "share",
            "XSpecMesh ms/step (no_grad)", "share (no_grad)", "AR ms/step (no_grad)"]
    rows = []
    for name in (*COMPONENTS, None):
        g, n = per_step(("spec", "grad"), name), per_step(("spec", "nograd"), name)
        rows.append([name or "other (Python loop, tensors, cache bookkeeping)", g,
                     g / per_step_total(acc, ("spec", "grad")), n,
                     n / per_step_total(acc, ("spec", "nograd")),
                     per_step(("ar", "nograd"), name)])
    rows.append(["total per step", per_step_total(acc, ("spec", "grad")), 1.0,
                 per_step_total(acc, ("spec", "nograd")), 1.0,
                 per_step_total(acc, ("ar", "nograd"))])
    tpc = {k: acc[k]["tokens"] / max(acc[k]["steps"] + args.meshes, 1) for k in acc}
    ms_tok = {k: 1e3 * acc[k]["sec"] / max(acc[k]["tokens"], 1) for k in acc}
    rows.append(["ms per generated token", ms_tok[("spec", "grad")], "-",
                 ms_tok[("spec", "nograd")], "-", ms_tok[("ar", "nograd")]])

    def fwd(key: tuple[str, str]) -> float:  # backbone forward incl. its lm_head, per step
        return per_step(key, COMPONENTS[0]) + per_step(key, COMPONENTS[1])

    for mode, col in (("grad", 1), ("nograd", 3)):
        spec, ar = ("spec", mode), ("ar", mode)
        derived = {
            "backbone call cost, verification / AR": fwd(spec) / fwd(ar),
            "tokens per call needed for 1.5x at this step cost":
                1.5 * per_step_total(acc, spec) / per_step_total(acc, ar),
            "speed-up bound if only the backbone call cost time":
                tpc[spec] * per_step_total(acc, ar) / fwd(spec)}
        for label, v in derived.items():
            row = next((r for r in rows if r[0] == label), None)
            if row is None:
                row = [label, "-", "-", "-", "-", "-"]
                rows.append(row)
            row[col] = v
    rows.append(["wall speed-up vs AR (same grad mode)",
                 ms_tok[("ar", "grad")] / ms_tok[("spec", "grad")], "-",
                 ms_tok[("ar", "nograd")] / ms_tok[("spec", "nograd")], "-", 1.0])
    title = (f"Per-step time, tiny mesh backbone (hidden 64, 3 layers), K={args.heads} KL heads, "
             f"greedy rule, {args.meshes} meshes; tokens per backbone call "
             f"{tpc[('spec', 'nograd')]:.2f} (AR 1.00); {args.threads} thread(s), "
             f"load {icml_results.load_average()}")
    print(title)
    print("| " + " | ".join(cols) + " |")
    for r in rows:
        print("| " + " | ".join(c if isinstance(c, str) else f"{c:.3g}" for c in r) + " |")
    if args.out_results:
        command = "python plugins/xspecmesh/benchmarks/profile_step.py " + shlex.join(sys.argv[1:])
        why = "clock reading on a shared machine"
        table = icml_results.make_table(title, cols, rows, name="profile_step",
                                        formats={c: ".3g" for c in cols[1:]})
        icml_results.write(args.out_results, [table], command=command, plugin="xspecmesh",
                           seeds=[0], quick=False, clock=clock, threads=args.threads,
                           tolerance={c: {"timing": True, "why": why} for c in cols[1:]},
                           metrics={f"tokens_per_call_{k[0]}_{k[1]}": v for k, v in tpc.items()})
        print(f"results file: {args.out_results}", file=sys.stderr)


def per_step_total(acc: dict, key: tuple[str, str]) -> float:
    return 1e3 * acc[key]["sec"] / max(acc[key]["steps"], 1)


if __name__ == "__main__":
    main()
