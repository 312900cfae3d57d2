"""Issue 23 benchmark: iterations and time to relative L2 1e-6, SNG / SPRING at their class
defaults against ENGD, Adam (learning rate tuned on a stated grid) and L-BFGS, 1D and 2D
Poisson PINNs, 3 seeds, all in one run; plus the per-step cost at equal rows.

Seeds: seed s initialises the network (``mlp(seed=s)``) and the batch sampler (SNG/SPRING).
Every arm is timed the same way (training steps only; the error evaluation is not counted)
and stops at the target or the budget. Ratios are ``other / method`` (above 1 = the method
is faster); ``>x`` when the other arm never reached the target within its budget (then its
time is at least the budget).

    python benchmarks/goals.py --parts goals,cost --dims 1 --tune1d 5
    # 2D, 60 CPU s per run, one process per arm (and per seed), merged into one table:
    python benchmarks/goals.py --parts goals --dims 2 --arms sng --seeds 0 --json sng0.json
    python benchmarks/goals.py --parts goals --dims 2 --arms engd --json engd.json
    python benchmarks/goals.py --parts goals --dims 2 --arms adam --base-budget 20 \
        --tune2d 4 --json adam.json
    python benchmarks/goals.py --merge sng0.json,engd.json,adam.json
    python benchmarks/goals.py --parts cost --dims 2
    python benchmarks/goals.py --parts cost
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch
from icml_sng import SNG, SPRING, PoissonPINN, mlp
from icml_sng.train import fit_pinn

ADAM_GRID = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2]
CLOCK = time.process_time  # CPU seconds of this process (README: the machine was shared)


def problem(dim: int, seed: int) -> PoissonPINN:
    return PoissonPINN(mlp(dim, [32], seed=seed), dim=dim, n_interior=200 if dim == 1 else 30,
                       n_boundary=30)


MAX_STEPS = 10**8


def run(method: str, dim: int, seed: int, budget: float, target: float, **kw: object) -> dict:
    every = 20 if method == "adam" else 5
    steps = MAX_STEPS if method in ("sng", "spring", "engd") else 10**8
    h = fit_pinn(problem(dim, seed), method, steps=steps, time_limit=budget, eval_every=every,
                 seed=seed, target=target, clock=CLOCK, **kw)
    hit = [(s, t) for s, t, e in zip(h.steps, h.times, h.errors) if e <= target]
    return {"steps": h.steps[-1], "time": h.times[-1], "final": h.final,
            "late_median": h.late_median(),
            "steps_to": hit[0][0] if hit else math.inf, "time_to": hit[0][1] if hit else math.inf}


def tune_adam(dim: int, budget: float) -> tuple[float, dict[float, float]]:
    """The grid learning rate with the lowest late-run median error on seed 0."""
    scores = {lr: run("adam", dim, 0, budget, 0.0, adam_lr=lr)["late_median"]
              for lr in ADAM_GRID}
    return min(scores, key=lambda lr: scores[lr]), scores


def _ratio(other: dict, mine: dict, key: str, budget_key: str) -> str:
    if not math.isfinite(mine[key]) or other is NOT_RUN:
        return "n/a"  # the method never got there, or the other arm has no run for this seed
    if math.isfinite(other[key]):
        return f"{other[key] / mine[key]:.3g}"
    return f">{other[budget_key] / mine[key]:.3g}"


RESULTS: dict = {}
#: Tables for ``--out-results`` (icml.results), filled where the Markdown tables are printed.
TABLES: list[dict] = []
#: Clock readings, or cells that depend on how far a CPU-time budget got (icml.results timing).
TIMING_COLUMNS = ("CPU s to target", "final rel L2", "steps run", "CPU-time ratio Adam/method",
                  "CPU-time ratio ENGD/method", "iteration ratio Adam/method",
                  "iteration ratio ENGD/method", "CPU ms per step", "/ ENGD (12-point grid)")
GOAL_COLUMNS = ["method", "seed", "steps to target", "CPU s to target", "final rel L2",
                "steps run"]
RATIO_COLUMNS = ["method", "seed", "CPU-time ratio Adam/method", "CPU-time ratio ENGD/method",
                 "iteration ratio Adam/method", "iteration ratio ENGD/method"]


def _cell(value: float) -> float | str:
    return value if math.isfinite(value) else "never"


def _table(title: str, columns: list[str], rows: list[list], name: str,
           formats: dict[str, str] | None = None) -> None:
    from icml import results

    TABLES.append(results.make_table(title, columns, rows, name=name, formats=formats))


def _goal_row(label: str, seed: int, r: dict) -> list:
    return [label, seed, _cell(r["steps_to"]), _cell(r["time_to"]), r["final"], r["steps"]]


def _to(value: float, spec: str = "") -> str:
    """A step count or time to the target, ``never`` when it was not reached."""
    return format(value, spec) if math.isfinite(value) else "never"


def goals(dim: int, budget: float, tune_budget: float, target: float, seeds: list[int],
          arms_wanted: list[str], adam_lr: float | None, base_budget: float) -> None:
    """``arms_wanted`` from sng, spring, engd, sng-full, sng-fixed, lbfgs, adam; Adam's lr is
    tuned on :data:`ADAM_GRID` unless ``adam_lr`` is given; Adam and L-BFGS get
    ``base_budget``."""
    t0 = time.perf_counter()
    print(f"\n### {dim}D Poisson: CPU seconds and iterations to {target:g}, budget {budget:g} "
          f"CPU s per run (Adam, L-BFGS: {base_budget:g}), at most {MAX_STEPS} steps for "
          "SNG/SPRING/ENGD\n")
    print("| method | seed | steps to target | CPU s to target | final rel L2 | steps run |")
    print("|---|---|---|---|---|---|", flush=True)
    table = {"sng": ("sng", {}), "spring": ("spring", {}), "engd": ("engd", {}),
             "sng-full": ("sng", {"line_search_on": "full"}), "lbfgs": ("lbfgs", {}),
             "sng-fixed": ("sng", {"adaptive_damping": False})}  # SNG as in 0.3 (fixed damping)
    res: dict[str, list[dict]] = {}
    goal_rows: list[list] = []
    for label in [a for a in arms_wanted if a != "adam"]:
        m, kw = table[label]
        res[label] = []
        for s in seeds:
            r = run(m, dim, s, base_budget if m == "lbfgs" else budget, target, **kw)
            res[label].append(r)
            goal_rows.append(_goal_row(label, s, r))
            print(f"| {label} | {s} | {_to(r['steps_to'])} | {_to(r['time_to'], '.2f')} | "
                  f"{r['final']:.2e} | {r['steps']} |", flush=True)
    if "adam" in arms_wanted:
        scores: dict[float, float] = {}
        lr = adam_lr
        if lr is None:
            lr, scores = tune_adam(dim, tune_budget)
        res["adam"] = []
        for s in seeds:
            r = run("adam", dim, s, base_budget, target, adam_lr=lr)
            res["adam"].append(r)
            goal_rows.append(_goal_row(f"adam (lr {lr:g})", s, r))
            print(f"| adam (lr {lr:g}) | {s} | {_to(r['steps_to'])} | "
                  f"{_to(r['time_to'], '.2f')} | {r['final']:.2e} | {r['steps']} |", flush=True)
        RESULTS.setdefault(dim, {})["adam_lr"] = lr
        RESULTS[dim]["adam_scores"] = {str(k): v for k, v in scores.items()}
        if scores:
            print(f"\nAdam lr grid {ADAM_GRID}, chosen by the late-run median error after "
                  f"{tune_budget:g} CPU s on seed 0: "
                  + ", ".join(f"{k:g}: {v:.2e}" for k, v in scores.items()) + f" -> lr {lr:g}")
    for label, rows in res.items():
        RESULTS.setdefault(dim, {}).setdefault("arms", {})[label] = dict(zip(map(str, seeds),
                                                                                rows))
    _table(f"{dim}D Poisson: CPU seconds and iterations to {target:g}, budget {budget:g} CPU s "
           f"per run (Adam, L-BFGS: {base_budget:g})", GOAL_COLUMNS, goal_rows,
           name=f"goals-{dim}d",
           formats={"CPU s to target": ".2f", "final rel L2": ".2e"})
    ratio_table(res, seeds, dim)
    print(f"\n({time.perf_counter() - t0:.0f} s wall for this table)", flush=True)


def ratio_table(res: dict[str, list[dict]], seeds: list[int], dim: int | str = "") -> None:
    """Time and iteration ratios to Adam and ENGD, per method and seed."""
    if "adam" in res and "engd" in res:
        rows = []
        print("\n| method | seed | CPU-time ratio Adam/method | CPU-time ratio ENGD/method | "
              "iteration ratio Adam/method | iteration ratio ENGD/method |")
        print("|---|---|---|---|---|---|")
        for label in res:
            for i, s in enumerate(seeds):
                r, a, e = res[label][i], res["adam"][i], res["engd"][i]
                if r is NOT_RUN:
                    continue
                cells = [_ratio(a, r, 'time_to', 'time'), _ratio(e, r, 'time_to', 'time'),
                         _ratio(a, r, 'steps_to', 'steps'), _ratio(e, r, 'steps_to', 'steps')]
                rows.append([label, s, *cells])
                print(f"| {label} | {s} | " + " | ".join(cells) + " |")
        _table(f"{dim}D Poisson: ratios to Adam and ENGD (other / method; >x: the other arm "
               "never reached the target)", RATIO_COLUMNS, rows, name=f"ratios-{dim}d")


#: A seed an arm's files do not have (merged files may cover different seeds): no row, and
#: "n/a" in the ratios.
NOT_RUN = {"steps": math.nan, "time": math.nan, "final": math.nan, "steps_to": math.nan,
           "time_to": math.nan}


def merge(paths: list[str]) -> None:
    """One table from the ``--json`` files of processes run side by side (e.g. one per arm):
    the same rows and ratios as one process would print."""
    by_dim: dict[str, dict] = {}
    for path in paths:
        with open(path) as f:
            for dim, part in json.load(f).items():
                d = by_dim.setdefault(dim, {"arms": {}})
                for label, rows in part.get("arms", {}).items():
                    d["arms"].setdefault(label, {}).update(rows)
                for key in ("adam_lr", "adam_scores"):
                    if key in part:
                        d[key] = part[key]
    for dim, d in sorted(by_dim.items()):
        seeds = sorted({int(s) for rows in d["arms"].values() for s in rows})
        print(f"\n### {dim}D Poisson (merged from {len(paths)} files)\n")
        goal_rows = []
        print("| method | seed | steps to target | CPU s to target | final rel L2 | steps run |")
        print("|---|---|---|---|---|---|")
        res = {}
        for label, rows in d["arms"].items():
            res[label] = [rows.get(str(s), NOT_RUN) for s in seeds]
            name = f"adam (lr {d['adam_lr']:g})" if label == "adam" and "adam_lr" in d \
                else label
            for s, r in zip(seeds, res[label]):
                if r is not NOT_RUN:
                    goal_rows.append(_goal_row(name, s, r))
                    print(f"| {name} | {s} | {_to(r['steps_to'])} | "
                          f"{_to(r['time_to'], '.2f')} | {r['final']:.2e} | {r['steps']} |")
        if d.get("adam_scores"):
            print("\nAdam lr grid scores (late-run median): " + ", ".join(
                f"{k}: {v:.2e}" for k, v in d["adam_scores"].items()))
        _table(f"{dim}D Poisson: CPU seconds and iterations to the target (merged from "
               f"{len(paths)} files)", GOAL_COLUMNS, goal_rows, name=f"goals-{dim}d",
               formats={"CPU s to target": ".2f", "final rel L2": ".2e"})
        ratio_table(res, seeds, dim)


def cost(dim: int, rounds: int, steps: int) -> None:
    """ms per optimizer step at equal rows k: SNG/SPRING on k sampled rows of the full problem
    vs ENGD on a problem whose data are exactly k rows; interleaved rounds, median."""
    k_int = PoissonPINN.DEFAULT_BATCH[dim]
    small = dict(n_interior=32, n_boundary=30) if dim == 1 else dict(n_interior=16,
                                                                     n_boundary=30)
    arms = {
        "SNG, class defaults (batch line search, early stop)": ("sng", "default"),
        "SPRING, class defaults": ("spring", "default"),
        "SNG, 0.1 line search (12 points on the full loss)": ("sng", "full12"),
        "SPRING, 0.1 line search (12 points on the full loss)": ("spring", "full12"),
        "SNG as in 0.1 (12-point full-loss search, autograd Laplacian and Jacobian)":
            ("sng", "v01"),
        "ENGD on k rows, 12-point grid (the ENGD paper)": ("engd", "official"),
        "ENGD on k rows, early-stopped grid": ("engd", "early"),
    }
    state = {}
    for label, (m, mode) in arms.items():
        if m == "engd":
            pinn = PoissonPINN(mlp(dim, [32], seed=0), dim=dim, **small)
            opt = SNG(pinn.model.parameters(), line_search_early_stop=(mode == "early"),
                      adaptive_damping=False)  # ENGD: fixed damping
        else:
            pinn = problem(dim, 0)
            if mode == "v01":
                pinn = PoissonPINN(mlp(dim, [32], seed=0), dim=dim,
                                   n_interior=200 if dim == 1 else 30, laplacian="autograd")
            kw = {"line_search_early_stop": False} if mode in ("full12", "v01") else {}
            if mode == "v01":
                kw["adaptive_damping"] = False
            opt = (SNG if m == "sng" else SPRING)(pinn.model.parameters(), **kw)
        state[label] = (pinn, opt, m, mode, torch.Generator().manual_seed(0), [], [])
    rows = None
    for _ in range(rounds):
        for pinn, opt, m, mode, g, ms, ev in state.values():
            def full(p: PoissonPINN = pinn) -> torch.Tensor:
                return p.batch_loss(None)

            t0 = CLOCK()
            for _ in range(steps):
                if m == "engd":
                    opt.step(full)
                else:
                    idx = pinn.sample_batch(generator=g)
                    opt.step(lambda idx=idx, p=pinn: p.batch_loss(idx),
                             line_search_closure=full if mode in ("full12", "v01") else None)
                ev.append(opt.last["line_search_evals"])
                rows = rows or int(opt.last["rows"])
            ms.append(1e3 * (CLOCK() - t0) / steps)
    ref = statistics.median(state["ENGD on k rows, 12-point grid (the ENGD paper)"][5])
    print(f"\n### {dim}D: CPU ms per step at equal rows (k = {k_int} interior + all boundary = "
          f"{state[next(iter(state))][0].sample_batch(generator=torch.Generator()).numel()} "
          f"rows), median of {rounds} interleaved rounds of {steps} steps\n")
    print("| arm | CPU ms per step | / ENGD (12-point grid) | line-search evaluations per step |")
    print("|---|---|---|---|")
    rows = []
    for label, (*_, ms, ev) in state.items():
        med = statistics.median(ms)
        rows.append([label, med, med / ref, sum(ev) / len(ev)])
        print(f"| {label} | {med:.2f} | {med / ref:.2f} | {sum(ev) / len(ev):.1f} |", flush=True)
    _table(f"{dim}D: CPU ms per step at equal rows, median of {rounds} interleaved rounds of "
           f"{steps} steps", ["arm", "CPU ms per step", "/ ENGD (12-point grid)",
                              "line-search evaluations per step"], rows, name=f"cost-{dim}d",
           formats={"CPU ms per step": ".2f", "/ ENGD (12-point grid)": ".2f",
                    "line-search evaluations per step": ".1f"})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="goals,cost")
    ap.add_argument("--dims", default="1,2")
    ap.add_argument("--budget1d", type=float, default=10.0)
    ap.add_argument("--budget2d", type=float, default=60.0)
    ap.add_argument("--tune1d", type=float, default=10.0, help="Adam tuning budget per lr (1D)")
    ap.add_argument("--tune2d", type=float, default=20.0, help="Adam tuning budget per lr (2D)")
    ap.add_argument("--target", type=float, default=1e-6)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--arms", default="sng,spring,engd,sng-full,lbfgs,adam")
    ap.add_argument("--adam-lr", type=float, default=None, help="skip the tuning, use this")
    ap.add_argument("--base-budget", type=float, default=0.0,
                    help="CPU s per Adam / L-BFGS run (0 = the budget)")
    ap.add_argument("--max-steps", type=int, default=10**8,
                    help="step cap for SNG/SPRING/ENGD runs")
    ap.add_argument("--json", default="", help="also write the goal results to this file")
    ap.add_argument("--merge", default="",
                    help="comma-separated --json files: print their merged tables and exit")
    ap.add_argument("--cost-rounds", type=int, default=5)
    ap.add_argument("--cost-steps", type=int, default=20)
    ap.add_argument("--out-results", default="",
                    help="also write the tables as a results file (plugins/sng/results/*.json)")
    args = ap.parse_args()
    from icml import results

    clock = results.Clock()
    if args.merge:
        merge(args.merge.split(","))
        _write(args, clock, 1)
        return
    threads = results.apply_threads(1)
    t0 = time.perf_counter()
    print(f"torch {torch.__version__}, {threads} thread(s), times in CPU seconds "
          "(time.process_time)")
    seeds = [int(s) for s in args.seeds.split(",")]
    global MAX_STEPS
    MAX_STEPS = args.max_steps
    for dim in (int(d) for d in args.dims.split(",")):
        if "goals" in args.parts:
            budget = args.budget1d if dim == 1 else args.budget2d
            goals(dim, budget, args.tune1d if dim == 1 else args.tune2d, args.target, seeds,
                  args.arms.split(","), args.adam_lr,
                  args.base_budget if args.base_budget else budget)
        if "cost" in args.parts:
            cost(dim, args.cost_rounds, args.cost_steps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(RESULTS, f, indent=1)
    _write(args, clock, threads, seeds)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s wall, {time.process_time():.0f} s CPU")


def _write(args: argparse.Namespace, clock: object, threads: int,
           seeds: list[int] | None = None) -> None:
    """``--out-results``: the printed tables as an icml results file, command as typed."""
    if not args.out_results or not TABLES:
        return
    import shlex
    import sys

    from icml import results

    why = ("CPU-time budgets: clock readings, and cells that depend on how far a run got "
           "within its CPU-time budget; shown, never compared")
    out = results.write(
        args.out_results, TABLES, plugin="sng", seeds=seeds or [], clock=clock,
        quick=bool(args.merge),  # a merge of committed runs takes a second
        threads=threads,
        command="python " + shlex.join(["plugins/sng/benchmarks/goals.py", *sys.argv[1:]]),
        tolerance={c: {"timing": True, "why": why} for c in TIMING_COLUMNS
                   if any(c in t["columns"] for t in TABLES)})
    print(f"# wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
