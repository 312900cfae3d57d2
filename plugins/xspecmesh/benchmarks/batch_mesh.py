"""Rows of a batch decoded together (``decode.batch_rows``) against rows one after another, for
AR greedy and XSpecMesh greedy (chain), on the same mesh prompts and backbone.

    python plugins/xspecmesh/benchmarks/batch_mesh.py --threads 1 \
        --out-results plugins/xspecmesh/results/batch_mesh.json

The backbone and K=3 KL heads are trained as the default job trains them (2000 meshes, hidden
64, 3 layers, 300 + 200 steps, seed 0). Prompts: held-out meshes (dataset seed 1),
``[BOS, class, first face]``, grouped into batches of ``--batch``. Each arm decodes each batch
(greedy, up to ``--max-new-tokens`` new tokens, EOS stops a row), interleaved batch by batch in a
rotating order through the plugin's shared timing loop (``icml_xspecmesh.timing``); backbone
calls are counted by a forward hook. "Rows one after another" is ``speculative_generate`` with
``batch_rows=False`` (each row its own cache and calls); "rows together" is ``batch_rows=True``
(one backbone call per iteration for all rows of the batch, each row accepting its own drafts).
Every row is compared with the AR greedy output of its prompt. Speed-ups are ratios of summed
times (and calls) over batches with paired bootstrap intervals over batches
(``icml.stats.ratio_ci``); clock columns are declared ``timing``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np
import torch

from icml import results as icml_results
from icml import stats

COLS = ["decoder", "rows = AR greedy", "backbone calls / batch", "tokens/call",
        "speed-up (calls) vs AR one by one [95% CI]", "ms/token",
        "speed-up (wall) vs AR one by one [95% CI]", "speed-up (wall) vs AR together [95% CI]"]
TIMING = COLS[5:]


def _strip(seq: list[int], eos: int, start: int) -> list[int]:
    return seq[:seq.index(eos, start) + 1] if eos in seq[start:] else seq


def main() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=64, help="held-out mesh prompts")
    ap.add_argument("--batch", type=int, default=8, help="rows per batch")
    ap.add_argument("--max-new-tokens", type=int, default=240)
    ap.add_argument("--n-train", type=int, default=2000)
    ap.add_argument("--backbone-steps", type=int, default=300)
    ap.add_argument("--distill-steps", type=int, default=200)
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out-results", default=None)
    args = ap.parse_args()
    if args.batch < 2 or args.prompts < 2 * args.batch or args.prompts % args.batch:
        ap.error("--batch must be >= 2 and --prompts a multiple of it, at least two batches "
                 "(intervals over batches)")
    torch.set_num_threads(args.threads)
    clock = icml_results.Clock()

    from icml_xspecmesh.dataset import make_primitive_dataset
    from icml_xspecmesh.distill import distill_heads
    from icml_xspecmesh.heads import SpeculativeHeads
    from icml_xspecmesh.speculative import speculative_generate
    from icml_xspecmesh.timing import interleaved, tiny_mesh_backbone

    tok, data, model = tiny_mesh_backbone(args.n_train, args.backbone_steps, args.device)
    heads = SpeculativeHeads.from_model(model, num_heads=args.heads)
    distill_heads(model, heads, data, loss="kl", steps=args.distill_steps, batch_size=16,
                  lr=1e-2, seed=0)
    model.eval().requires_grad_(False)
    heads.eval().requires_grad_(False)
    t_build = clock.wall()
    held = make_primitive_dataset(args.prompts, seed=1, tokenizer=tok)
    plen = 2 + 9  # [BOS, class, first face]: every prompt has the same length
    ids = torch.tensor([held.sequences[i][:plen] for i in range(args.prompts)],
                       device=args.device)
    batches = list(ids.split(args.batch))

    def arm(hd: Any, together: bool) -> Any:
        def f(batch: torch.Tensor) -> list[list[int]]:
            out = speculative_generate(model, hd, batch, max_new_tokens=args.max_new_tokens,
                                       acceptance="greedy", eos_token_id=2, pad_token_id=0,
                                       batch_rows=together)
            return [_strip(s, 2, plen) for s in out.sequences.tolist()]
        return f

    K = args.heads
    arms = {"AR greedy, rows one after another": arm(None, False),
            "AR greedy, rows together": arm(None, True),
            f"XSpecMesh greedy, K={K} heads, rows one after another": arm(heads, False),
            f"XSpecMesh greedy, K={K} heads, rows together": arm(heads, True)}
    with torch.no_grad():
        rec = interleaved(batches, arms, counters={"calls": model}, warmup=batches[0])
    base, together = rec["AR greedy, rows one after another"], rec["AR greedy, rows together"]
    rows, metrics = [], {}
    for name, r in rec.items():
        same = sum(a == b for x, y in zip(r["out"], base["out"], strict=True)
                   for a, b in zip(x, y, strict=True))
        tokens = sum(len(s) - plen for batch in r["out"] for s in batch)
        calls = sum(r["calls"])
        sp_calls = stats.ratio_ci(base["calls"], r["calls"])
        sp_wall = stats.ratio_ci(base["sec"], r["sec"])
        sp_together = stats.ratio_ci(together["sec"], r["sec"])
        rows.append([name, f"{same}/{args.prompts}", calls / len(batches), tokens / calls,
                     sp_calls.to_dict(), 1e3 * sum(r["sec"]) / tokens, sp_wall.to_dict(),
                     sp_together.to_dict()])
        logs = np.log(np.asarray(base["sec"]) / np.asarray(r["sec"]))
        logs_t = np.log(np.asarray(together["sec"]) / np.asarray(r["sec"]))
        metrics[name] = {"identical_rows": same, "rows": args.prompts, "batches": len(batches),
                         "mde_log_wall_speedup_vs_ar_one_by_one": stats.mde_from_samples(logs),
                         "mde_log_wall_speedup_vs_ar_together": stats.mde_from_samples(logs_t)}
    title = (f"Tiny mesh backbone (hidden 64, 3 layers), {args.prompts} held-out prompts "
             f"([BOS, class, 1 face]) in batches of {args.batch}, greedy, up to "
             f"{args.max_new_tokens} new tokens; K={K} KL heads; {args.threads} thread(s), "
             f"load {clock.load0} to {icml_results.load_average()}")
    from icml_xspecmesh.timing import print_and_write

    print_and_write(args, script="plugins/xspecmesh/benchmarks/batch_mesh.py", name="batch_mesh",
                    title=title, cols=COLS, rows=rows, timing=TIMING, metrics=metrics,
                    clock=clock, t_build=t_build)


if __name__ == "__main__":
    main()
