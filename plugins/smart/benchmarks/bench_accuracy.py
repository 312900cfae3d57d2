"""Error vs parameters vs training time of SMART, its last-layer ablation, PointNet-MLP and the
Transolver-style peer over seeds (all trained by the same loop, timed the same way).

    python plugins/smart/benchmarks/bench_accuracy.py --seeds 0 1 2 --steps 500
    # the README table from the committed raw rows, without training (a second):
    python plugins/smart/benchmarks/bench_accuracy.py --from-raw \
        plugins/smart/benchmarks/results_accuracy.json \
        --out-results plugins/smart/results/accuracy.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

from icml_smart.baselines import num_params
from icml_smart.config import SMARTSettings
from icml_smart.job import ARM_LABELS, build_arm, make_data
from icml_smart.training import evaluate_surrogate, train_surrogate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--dim", type=int, default=48)
    ap.add_argument("--n-train", type=int, default=512)
    ap.add_argument("--n-test", type=int, default=128)
    ap.add_argument("--case", default="ellipse")
    ap.add_argument("--models", nargs="+", default=["smart", "last_layer", "pointnet",
                                                      "transolver"])
    ap.add_argument("--out", default="plugins/smart/benchmarks/results_accuracy.json")
    ap.add_argument("--from-raw", default="",
                    help="tabulate the raw rows of an earlier --out file instead of training")
    ap.add_argument("--out-results", default="",
                    help="also write the table as a results file (plugins/smart/results/*.json)")
    a = ap.parse_args()
    from icml import results

    clock = results.Clock()
    if a.from_raw:
        raw = json.loads(Path(a.from_raw).read_text())
        table(raw["rows"], raw["args"]["models"], a, clock, raw["args"])
        return
    threads = results.apply_threads(1)
    cfg = SimpleNamespace(case=a.case, n_train=a.n_train, n_test=a.n_test, n_boundary=64,
                          n_queries=256, min_aspect=0.4, max_circulation=0.2,
                          model=SMARTSettings(dim=a.dim, depth=3, heads=4, num_supernodes=32,
                                              num_neighbors=8, supernode_radius=None,
                                              fourier_features=16, max_freq=4.0,
                                              param_conditioning="both"))
    rows = []
    for seed in a.seeds:
        train, test = make_data(cfg, seed)
        for name in a.models:
            model = build_arm(name, cfg, train, seed)
            t0 = time.perf_counter()
            train_surrogate(model, train, steps=a.steps, batch_size=a.batch_size, lr=2e-3,
                            query_subsample=128, surface_weight=0.1, seed=seed)
            ev = evaluate_surrogate(model, test)
            rows.append({"seed": seed, "model": name, "params": num_params(model),
                         "train_s": time.perf_counter() - t0, **ev})
            print(json.dumps(rows[-1]), flush=True)
            Path(a.out).write_text(json.dumps({"args": vars(a), "rows": rows}, indent=1))
    table(rows, a.models, a, clock, vars(a), threads)


COLUMNS = ["model", "params", "train s", "rel-L2 mean", "sd over seeds", "u/U", "v/U", "C_p",
           "surface C_p", "C_D MAE", "C_L MAE", "error vs SMART", "SMART better in"]


def table(rows: list[dict], models: list[str], a: argparse.Namespace, clock: object,
          run_args: dict, threads: int = 1) -> None:
    """Print the Markdown table (and write ``--out-results``) from raw per-seed rows."""
    print("\n| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    ref = {r["seed"]: r["rel_l2"] for r in rows if r["model"] == "smart"}
    out = []
    for name in models:
        rs = [r for r in rows if r["model"] == name]
        m = lambda k, rs=rs: statistics.mean(r[k] for r in rs)  # noqa: E731
        sd = statistics.stdev([r["rel_l2"] for r in rs]) if len(rs) > 1 else 0.0
        ch = [statistics.mean(r["rel_l2_per_channel"][i] for r in rs) for i in range(3)]
        wins = sum(ref[r["seed"]] < r["rel_l2"] for r in rs) if name != "smart" else "-"
        ratio = m("rel_l2") / statistics.mean(ref.values()) if ref else float("nan")
        out.append([ARM_LABELS[name], rs[0]["params"], m("train_s"), m("rel_l2"), sd, *ch,
                    m("surface_cp_rel_l2"), m("drag_mae"), m("lift_mae"), ratio,
                    wins if wins == "-" else f"{wins}/{len(rs)} seeds"])
        print(f"| {ARM_LABELS[name]} | {rs[0]['params']:,} | {m('train_s'):.0f} | "
              f"{m('rel_l2'):.4f} | {sd:.4f} | {ch[0]:.4f} | {ch[1]:.4f} | {ch[2]:.4f} | "
              f"{m('surface_cp_rel_l2'):.4f} | {m('drag_mae'):.4f} | {m('lift_mae'):.4f} | "
              f"{ratio:.2f} | {out[-1][-1]} |")
    if not a.out_results:
        return
    import shlex
    import sys

    from icml import results

    seeds = sorted({r["seed"] for r in rows})
    title = (f"test error, {run_args['n_test']} held-out {run_args['case']} cases per seed, "
             f"{run_args['steps']} steps, dim {run_args['dim']}; means over seeds {seeds}")
    four = dict.fromkeys(COLUMNS[3:11], ".4f")
    tab = results.make_table(title, COLUMNS, out, name="accuracy",
                             formats={**four, "train s": ".0f", "error vs SMART": ".2f"})
    results.write(a.out_results, [tab], plugin="smart", seeds=seeds, clock=clock,
                  threads=threads, quick=bool(a.from_raw),
                  command="python " + shlex.join(["plugins/smart/benchmarks/bench_accuracy.py",
                                                  *sys.argv[1:]]),
                  tolerance={"train s": {"timing": True, "why": "wall-clock training time under "
                                         "load: compare within a table, never across runs"}},
                  notes="" if not a.from_raw else f"tabulated from the raw rows in {a.from_raw}")


if __name__ == "__main__":
    main()
