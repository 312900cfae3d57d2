"""Benchmark: wall time per round of the same federated run in-process, in Flower's simulation
runtime (Ray) and in Flower's deployment mode on loopback (a SuperLink and one SuperNode per
client as local processes), with a check that all three end with identical adapters.

    OMP_NUM_THREADS=1 python plugins/het-cpflora/benchmarks/bench_flower.py \
        --out-results plugins/het-cpflora/results/bench_flower.json
    (needs flwr: pip install -e "./plugins/het-cpflora[flower-simulation]")

``--out-results`` writes the table as an ``icml.results`` file: the time columns are clock
readings (declared ``timing``: shown, never compared); the byte counts and the identity check
are exact.

Every arm runs the default study's clients (4, ranks (2,2),(4,2),(3,1),(6,2)) from the same
saved pre-trained tiny Llama (pre-trained once here, loaded by every node), and each round is
timed the same way: from the start of the round (the server sending its messages / the
simulator's loop) to the end of its aggregation. Round 1 also pays Flower's start-up (Ray
actors; a ClientApp process per message in deployment mode), so it is reported apart.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from icml_het_cpflora import FederationConfig, read_adapter, simulate
from icml_het_cpflora.flower import FlowerRun, run_flower_simulation, synthetic_task
from icml_het_cpflora.flower_deploy import LoopbackDeployment
from icml_het_cpflora.task import pretrain

from icml import results as R
from icml.models import byte_tokenizer, tiny_causal_lm

COLUMNS = ["backend", "round 1 s", "rounds 2+ s/round", "vs in-process", "total s",
           "upload B/round (tensors)", "upload B/round (Flower serialised)",
           "final adapters identical to in-process"]
TOLERANCE = {c: {"timing": True, "why": "wall time on a shared machine"}
             for c in ("round 1 s", "rounds 2+ s/round", "vs in-process", "total s")}


def _later(xs: list[float]) -> float:
    return statistics.mean(xs[1:]) if len(xs) > 1 else xs[0]


def table_rows(rows: list[tuple], same: dict[str, bool | None]) -> list[list]:
    """The results table's rows from ``(label, round_seconds, total, up, wire, arm)`` tuples
    (the in-process row first when it ran) and each arm's identity check."""
    base_s = _later(rows[0][1]) if rows and rows[0][5] == "inprocess" else None
    return [[label, secs[0], _later(secs), _later(secs) / base_s if base_s else None, total,
             up, wire, same.get(arm)] for label, secs, total, up, wire, arm in rows]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--local-steps", type=int, default=30)
    ap.add_argument("--strategy", default="het-cpflora")
    ap.add_argument("--pretrain-steps", type=int, default=300)
    ap.add_argument("--arms", nargs="+", default=["inprocess", "simulation", "deployment"])
    ap.add_argument("--out-results", default="", help="write the table as a results file")
    args = ap.parse_args()
    clock = R.Clock()
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="hetcp-flower-bench-"))
    base = tiny_causal_lm("llama", seed=0, hidden_size=64, num_layers=2, num_heads=4,
                          num_kv_heads=2)
    pretrain(base, byte_tokenizer(), steps=args.pretrain_steps, length=4, seed=0)
    base.save_pretrained(work / "base")
    fed = FederationConfig(rounds=args.rounds, local_steps=args.local_steps, lr=3e-3,
                           batch_size=16)
    common = {"r_shared": [2, 4, 3, 6], "r_personal": [2, 2, 1, 2], "federation": fed,
              "strategy": args.strategy, "num_threads": 1,
              "task_kwargs": {"model_path": str(work / "base")}}
    rows, finals = [], {}
    if "inprocess" in args.arms:
        run = FlowerRun(**common)
        parts = [synthetic_task(i, run.num_clients, run.seed, **run.task_kwargs)
                 for i in range(run.num_clients)]
        t0 = time.perf_counter()
        res = simulate(parts[0][0], [d for _, d in parts], run.specs(), run.make_strategy(),
                       run.federation, seed=run.seed)
        total = time.perf_counter() - t0
        finals["inprocess"] = [{k: (f.A, f.B) for k, f in read_adapter(
            res.model, res.adapter(i)).items()} for i in range(run.num_clients)]
        up = sum(map(sum, res.bytes_up)) / run.federation.rounds
        rows.append(("in-process simulator", res.round_seconds, total, up, None, "inprocess"))
    for arm in ("simulation", "deployment"):
        if arm not in args.arms:
            continue
        run = FlowerRun(**common, out_dir=str(work / arm))
        t0 = time.perf_counter()
        if arm == "simulation":
            result = run_flower_simulation(run).result
        else:
            with LoopbackDeployment(run.num_clients, work / "deploy") as dep:
                result = dep.run(run)
        total = time.perf_counter() - t0
        finals[arm] = []
        for i in range(run.num_clients):
            flat = torch.load(Path(run.out_dir) / f"client{i}.pt")
            mods = {k.rsplit("|", 1)[0] for k in flat}
            finals[arm].append({m: (flat[f"{m}|A"], flat[f"{m}|B"]) for m in mods})
        up = sum(map(sum, result.bytes_up)) / run.federation.rounds
        wire = sum(map(sum, result.wire_up)) / run.federation.rounds
        label = ("Flower simulation runtime (Ray, 2 actors)" if arm == "simulation"
                 else f"Flower deployment, loopback (SuperLink + {run.num_clients} "
                 "SuperNodes)")
        rows.append((label, result.round_seconds, total, up, wire, arm))
    ref = finals.get("inprocess")
    print(f"strategy {args.strategy}, 4 clients, {args.rounds} rounds x {args.local_steps} "
          "local steps; loaded 2-core CPU machine, one torch thread per client\n")
    print("| backend | round 1 s | rounds 2+ s/round | vs in-process | total s | "
          "upload B/round (tensors) | upload B/round (Flower serialised) |")
    print("|---|---|---|---|---|---|---|")
    base_s = _later(rows[0][1]) if ref is not None else None
    for label, secs, total, up, wire, _ in rows:
        ratio = f"{_later(secs) / base_s:.2f}" if base_s else "n/a"
        print(f"| {label} | {secs[0]:.2f} | {_later(secs):.2f} | {ratio} | {total:.1f} | "
              f"{up:.0f} | {wire:.0f} |" if wire else
              f"| {label} | {secs[0]:.2f} | {_later(secs):.2f} | {ratio} | {total:.1f} | "
              f"{up:.0f} | n/a |")
    same: dict[str, bool | None] = {}
    if ref is not None:
        for arm, fin in finals.items():
            same[arm] = all(torch.equal(a[m][0], b[m][0]) and torch.equal(a[m][1], b[m][1])
                            for a, b in zip(ref, fin) for m in a)
            print(f"\nfinal adapters of {arm} identical to in-process: {same[arm]}")
    if args.out_results:
        table = R.make_table(
            f"Strategy {args.strategy}, 4 clients, {args.rounds} rounds x {args.local_steps} "
            "local steps, one torch thread per client (round 1 includes Flower's start-up; "
            "'vs in-process' compares rounds 2+)", COLUMNS, table_rows(rows, same),
            name="flower",
            formats={"round 1 s": ".2f", "rounds 2+ s/round": ".2f", "vs in-process": ".2f",
                     "total s": ".1f", "upload B/round (tensors)": ".0f",
                     "upload B/round (Flower serialised)": ".0f"})
        print("results file:", R.write(
            args.out_results, [table], plugin="het-cpflora", seeds=[0], clock=clock, threads=1,
            quick=False, tolerance=TOLERANCE,
            command=" ".join(["OMP_NUM_THREADS=1 python",
                              "plugins/het-cpflora/benchmarks/bench_flower.py"]
                             + [shlex.quote(x) for x in sys.argv[1:]])))


if __name__ == "__main__":
    main()
