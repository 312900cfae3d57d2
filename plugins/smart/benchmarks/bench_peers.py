"""SMART against its peers (PointNet-MLP, GINO from neuraloperator 2.0.0, the last-layer
ablation) at equal steps and at equal wall time, fields and forces, over seeds; and the
cross-layer vs last-layer ablation over more seeds.

    pip install --no-deps --target .peers/gino neuraloperator==2.0.0 tensorly \\
        tensorly-torch opt-einsum zencfg configmypy ruamel-yaml   # GINO, beside the dev venv
    python plugins/smart/benchmarks/bench_peers.py --gino-path .peers/gino \\
        --out plugins/smart/benchmarks/results_peers.json \\
        --out-results plugins/smart/results/peers.json

Protocol (one process, one thread, every arm through the same loop and timed the same way):

- per seed: the same 512 training / 128 test ellipse cases for every arm; every arm of
  ``--arms`` trains ``--steps`` steps (equal steps); then every arm of ``--time-arms`` trains
  again for ``round(steps * t_SMART / t_arm)`` steps, with ``t`` the wall time of that seed's
  equal-step runs (equal time: SMART's budget; SMART's equal-time row is its equal-step run);
- ``smart+qp`` (SMART with ``model.query_params``: the parameter embedding also added to every
  query) is a candidate fix of SMART's force error, trained at equal steps beside the others;
- per ablation seed (``--ablation-seeds``): SMART and the last-layer decoder only, equal steps;
- diagnostic: ``--alt-arms`` retrained at ``--alt-surface-weight`` on ``--alt-seeds``;
- forces against the exact coefficients (``evaluate_forces``): the same trapezoid quadrature
  for every arm and for the exact ``C_p`` at the cloud's 64 random points and at 512 dense
  surface points.

Intervals: 95% percentile bootstrap over seeds and test cases (``icml.stats``, nested: each seed
has its own test cases); differences paired by seed and case; the ablation also paired by seed
alone (``paired_diff_ci`` over per-seed means). MDE at alpha 0.05, power 0.8.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

LABELS = {"smart": "SMART (cross-layer decoder)", "last_layer": "last-layer decoder (ablation)",
          "smart+qp": "SMART, parameters also added to each query",
          "pointnet": "PointNet-MLP", "gino": "GINO (neuraloperator 2.0.0)",
          "exact": "exact C_p (quadrature only)", "free_stream": "free stream (u = U e, C_p = 0)"}


def build(name: str, cfg: SimpleNamespace, train: object, seed: int) -> object:
    import torch
    from icml_smart.baselines import num_params
    from icml_smart.job import build_arm

    if name == "smart+qp":  # SMART with the parameter embedding added to every query
        import dataclasses

        from icml_smart.configuration_smart import SMARTConfig
        from icml_smart.modeling_smart import SMARTModel

        torch.manual_seed(seed)
        settings = dataclasses.replace(cfg.model, query_params=True)
        return SMARTModel(SMARTConfig.from_config(settings, space_dim=train.space_dim,
                                                  param_dim=train.param_dim,
                                                  out_dim=train.out_dim))
    if name != "gino":
        return build_arm(name, cfg, train, seed)
    from icml_smart.gino import gino_for_params

    target = num_params(build_arm("smart", cfg, train, seed))
    torch.manual_seed(seed)
    return gino_for_params(target, param_dim=train.param_dim, out_dim=train.out_dim)


def run_arm(name: str, regime: str, steps: int, cfg: SimpleNamespace, train: object,
            test: object, seed: int, a: argparse.Namespace,
            surface_weight: float | None = None) -> dict:
    from icml_smart.baselines import num_params
    from icml_smart.training import evaluate_forces, evaluate_surrogate, train_surrogate

    model = build(name, cfg, train, seed)
    t0 = time.perf_counter()
    train_surrogate(model, train, steps=steps, batch_size=a.batch_size, lr=2e-3,
                    query_subsample=128, seed=seed,
                    surface_weight=a.surface_weight if surface_weight is None else surface_weight)
    train_s = time.perf_counter() - t0
    ev = evaluate_surrogate(model, test, per_case=True)
    fo = evaluate_forces(model, test, dense=a.dense)
    return {"seed": seed, "model": name, "regime": regime, "steps": steps,
            "params": num_params(model), "train_s": train_s, **ev, **fo}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--ablation-seeds", type=int, nargs="*", default=[3, 4, 5, 6, 7])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--dim", type=int, default=48)
    ap.add_argument("--n-train", type=int, default=512)
    ap.add_argument("--n-test", type=int, default=128)
    ap.add_argument("--surface-weight", type=float, default=0.1)
    ap.add_argument("--dense", type=int, default=512, help="dense surface points for forces")
    ap.add_argument("--arms", nargs="+",
                    default=["smart", "last_layer", "pointnet", "gino", "smart+qp"])
    ap.add_argument("--time-arms", nargs="*", default=["pointnet", "gino"])
    ap.add_argument("--alt-surface-weight", type=float, default=1.0,
                    help="the surface-loss weight of the diagnostic runs")
    ap.add_argument("--alt-seeds", type=int, nargs="*", default=[0],
                    help="seeds (of --seeds) that also train --alt-arms at --alt-surface-weight")
    ap.add_argument("--alt-arms", nargs="*", default=["smart", "pointnet"])
    ap.add_argument("--gino-path", default="", help="folder neuraloperator was installed into")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="", help="raw per-seed rows (JSON), written as they come")
    ap.add_argument("--from-raw", nargs="*", default=[],
                    help="tabulate the rows of earlier --out files (the first one's settings; "
                         "the others add ablation seeds)")
    ap.add_argument("--out-results", default="", help="results file (plugins/smart/results/)")
    a = ap.parse_args()
    from icml import ConfigError, results

    if a.steps < 1 or a.n_train < 1 or a.n_test < 2 or a.dense < 8:
        raise ConfigError("--steps, --n-train >= 1, --n-test >= 2 and --dense >= 8 required")
    unknown = set(a.arms) - {"smart", "last_layer", "pointnet", "gino", "smart+qp"}
    if unknown or "smart" not in a.arms or not set(a.time_arms) <= set(a.arms) \
            or not set(a.alt_arms) <= set(a.arms) or not set(a.alt_seeds) <= set(a.seeds):
        raise ConfigError(f"--arms must include smart, from smart/last_layer/pointnet/gino/"
                          f"smart+qp (got {a.arms}); --time-arms and --alt-arms subsets of "
                          f"--arms, --alt-seeds of --seeds")
    if a.gino_path:
        sys.path.insert(0, str(Path(a.gino_path).resolve()))
    if "gino" in a.arms and not a.from_raw:
        from icml_smart.gino import _check_installed

        _check_installed()
    clock = results.Clock()
    if a.from_raw:
        raws = [json.loads(Path(f).read_text()) for f in a.from_raw]
        tabulate([r for raw in raws for r in raw["rows"]],
                 argparse.Namespace(**raws[0]["args"]), a, clock, 1,
                 [x for raw in raws for x in raw.get("load", [])])
        return
    threads = results.apply_threads(a.threads)
    from icml_smart.config import SMARTSettings
    from icml_smart.job import free_stream_predictor, make_data
    from icml_smart.training import evaluate_forces, evaluate_surrogate

    cfg = SimpleNamespace(case="ellipse", n_train=a.n_train, n_test=a.n_test, n_boundary=64,
                          n_queries=256, min_aspect=0.4, max_circulation=0.2,
                          model=SMARTSettings(dim=a.dim))
    rows: list[dict] = []
    load = []

    def keep(row: dict) -> None:
        rows.append(row)
        short = {k: v for k, v in row.items() if not k.endswith(("_cases", "_err"))}
        print(json.dumps(short), flush=True)
        if a.out:
            Path(a.out).write_text(json.dumps({"args": vars(a), "rows": rows, "load": load}))

    for seed in [*a.seeds, *a.ablation_seeds]:
        train, test = make_data(cfg, seed)
        load.append(_load())
        if seed in a.seeds:
            for ref, fn in (("exact", None), ("free_stream", free_stream_predictor(2))):
                ev = evaluate_surrogate(fn, test, per_case=True) if fn is not None else {}
                keep({"seed": seed, "model": ref, "regime": "reference", "steps": 0,
                      "params": 0, "train_s": 0.0, **ev, **evaluate_forces(fn, test,
                                                                        dense=a.dense)})
        arms = a.arms if seed in a.seeds else ["smart", "last_layer"]
        t = {}
        for name in arms:
            keep(run_arm(name, "equal_steps", a.steps, cfg, train, test, seed, a))
            t[name] = rows[-1]["train_s"]
        if seed in a.seeds:
            for name in a.time_arms:
                steps = max(1, round(a.steps * t["smart"] / t[name]))
                keep(run_arm(name, "equal_time", steps, cfg, train, test, seed, a))
    for seed in a.alt_seeds:  # diagnostic: the surface-loss weight
        train, test = make_data(cfg, seed)
        for name in a.alt_arms:
            keep(run_arm(name, "alt_surface_weight", a.steps, cfg, train, test, seed, a,
                         surface_weight=a.alt_surface_weight))
    load.append(_load())
    tabulate(rows, a, a, clock, threads, load)


def _load() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


COLUMNS = ["budget", "model", "params", "steps", "train s", "time / SMART", "rel-L2 mean",
           "95% CI", "minus SMART", "diff 95% CI", "MDE", "surface C_p rel-L2",
           "C_L MAE cloud", "C_L MAE dense", "C_L dense minus SMART", "C_L diff 95% CI",
           "C_L MDE", "C_D MAE cloud", "C_D MAE dense", "lift slope dense"]


def tabulate(rows: list[dict], run: argparse.Namespace, a: argparse.Namespace, clock: object,
             threads: int, load: list | None) -> None:
    from icml import results, stats

    by = {(r["model"], r["regime"], r["seed"]): r for r in rows}
    need = ([(m, "equal_steps") for m in run.arms] + [(m, "equal_time") for m in run.time_arms]
            + [("exact", "reference"), ("free_stream", "reference")])
    seeds = [s for s in run.seeds if all((m, g, s) in by for m, g in need)]  # complete seeds

    def nested(model: str, regime: str, key: str, fn=lambda v: v) -> list[list[float]]:
        return [[fn(v) for v in by[(model, regime, s)][key]] for s in seeds]

    def mean(model: str, regime: str, key: str) -> float:
        return statistics.mean(by[(model, regime, s)][key] for s in seeds)

    def diff(x: list[list[float]], y: list[list[float]]) -> tuple[object, float]:
        d = [[p - q for p, q in zip(u, v)] for u, v in zip(x, y)]
        est = stats.hierarchical_diff_ci(x, y, design="nested")
        return est, stats.mde_from_samples(d, design="nested")

    out = []
    t_ref = mean("smart", "equal_steps", "train_s")
    s_rel = nested("smart", "equal_steps", "rel_l2_cases")
    s_cl = nested("smart", "equal_steps", "dense_lift_err", abs)
    plan = [("reference", m) for m in ("exact", "free_stream")]
    plan += [("equal_steps", m) for m in run.arms]
    plan += [("equal_time", "smart")] + [("equal_time", m) for m in run.time_arms]
    for regime, model in plan:
        reg = "equal_steps" if (regime, model) == ("equal_time", "smart") else regime
        r0 = by[(model, reg, seeds[0])]
        rel = nested(model, reg, "rel_l2_cases") if model != "exact" else None
        cl = nested(model, reg, "dense_lift_err", abs)
        row = [regime.replace("_", " "), LABELS[model], r0["params"],
               round(statistics.mean(by[(model, reg, s)]["steps"] for s in seeds)),
               mean(model, reg, "train_s"), mean(model, reg, "train_s") / t_ref
               if model not in ("exact", "free_stream") else "-"]
        if rel is None:
            row += ["-", "-", "-", "-", "-", "-"]
        else:
            ci = stats.hierarchical_ci(rel, design="nested")
            row += [ci.value, f"[{ci.lo:.4f}, {ci.hi:.4f}]"]
            if model == "smart":
                row += ["-", "-", "-"]
            else:
                est, mde = diff(rel, s_rel)
                row += [est.value, f"[{est.lo:.4f}, {est.hi:.4f}]", mde]
            row += [mean(model, reg, "surface_cp_rel_l2")]
        row += [mean(model, reg, "cloud_lift_mae"), mean(model, reg, "dense_lift_mae")]
        if model in ("smart", "exact"):
            row += ["-", "-", "-"]
        else:
            est, mde = diff(cl, s_cl)
            row += [est.value, f"[{est.lo:.4f}, {est.hi:.4f}]", mde]
        row += [mean(model, reg, "cloud_drag_mae"), mean(model, reg, "dense_drag_mae"),
                mean(model, reg, "dense_lift_slope")]
        out.append(row)
        print(" | ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row))

    # the ablation: every seed that has both decoders at equal steps
    ab_seeds = sorted({s for (m, g, s) in by if m == "last_layer" and g == "equal_steps"
                       and ("smart", g, s) in by})
    sm = [by[("smart", "equal_steps", s)]["rel_l2"] for s in ab_seeds]
    ll = [by[("last_layer", "equal_steps", s)]["rel_l2"] for s in ab_seeds]
    per_seed = stats.paired_diff_ci(ll, sm)
    d = [x - y for x, y in zip(ll, sm)]
    mde_seed = stats.mde_mean(statistics.stdev(d), len(d)) if len(d) > 1 else float("inf")
    xs = [by[("last_layer", "equal_steps", s)]["rel_l2_cases"] for s in ab_seeds]
    ys = [by[("smart", "equal_steps", s)]["rel_l2_cases"] for s in ab_seeds]
    hier = stats.hierarchical_diff_ci(xs, ys, design="nested")
    alt_rows = []
    for model in getattr(run, "alt_arms", []):
        al = [s for s in seeds if (model, "alt_surface_weight", s) in by]
        for sw, reg in ((run.surface_weight, "equal_steps"),
                        (getattr(run, "alt_surface_weight", None), "alt_surface_weight")):
            if not al:
                continue
            rs = [by[(model, reg, s)] for s in al]
            alt_rows.append([LABELS[model], sw, len(al)] + [
                statistics.mean(r[k] for r in rs) for k in
                ("rel_l2", "surface_cp_rel_l2", "cloud_lift_mae", "dense_lift_mae",
                 "dense_lift_slope", "dense_drag_mae")])
    wins = sum(x > 0 for x in d)
    sign_p = min(1.0, 2 * sum(math.comb(len(d), k) for k in range(max(wins, len(d) - wins),
                                                                  len(d) + 1)) / 2 ** len(d))
    # The CI decides whether a gain is detected; the MDE (a design quantity: what this many
    # seeds detect with 80 % power) only qualifies how precisely its size is known.
    if per_seed.lo > 0:
        verdict = ("yes" if per_seed.value >= mde_seed
                   else "yes, small (CI excludes 0; below the MDE)")
    elif per_seed.hi < 0:
        verdict = "no (last layer better)"
    else:
        verdict = "no difference detected"
    ab_rows = [[len(ab_seeds), statistics.mean(sm), statistics.mean(ll), per_seed.value,
                f"[{per_seed.lo:.4f}, {per_seed.hi:.4f}]", mde_seed,
                f"[{hier.lo:.4f}, {hier.hi:.4f}]", wins, sign_p, verdict]]
    print("ablation:", ab_rows[0])
    if not a.out_results:
        return
    import shlex

    title = (f"{run.n_test} held-out ellipse cases per seed, seeds {seeds}, {run.steps} steps at "
             f"equal steps; equal time = SMART's wall time per seed; dim {run.dim}")
    f4 = ".4f"
    tab = results.make_table(
        title, COLUMNS, out, name="peers",
        formats={**{c: f4 for c in COLUMNS[6:] if "CI" not in c}, "train s": ".0f",
                 "time / SMART": ".2f", "lift slope dense": ".3f"})
    ab = results.make_table(
        f"cross-layer vs last-layer decoder, {run.steps} steps, seeds {ab_seeds}",
        ["seeds", "SMART rel-L2", "last-layer rel-L2", "last-layer minus SMART",
         "95% CI (paired by seed)", "MDE (by seed)", "95% CI (seeds and cases)",
         "seeds SMART better", "sign test p", "gain real?"], ab_rows, name="ablation",
        formats={"SMART rel-L2": f4, "last-layer rel-L2": f4, "last-layer minus SMART": f4,
                 "MDE (by seed)": f4, "sign test p": ".3f"})
    alt_cols = ["model", "surface weight", "seeds", "rel-L2 mean", "surface C_p rel-L2",
                "C_L MAE cloud", "C_L MAE dense", "lift slope dense", "C_D MAE dense"]
    alt = results.make_table(
        f"surface-loss weight (diagnostic), {run.steps} steps, same seeds and data",
        alt_cols, alt_rows, name="surface-weight",
        formats={**{c: f4 for c in alt_cols[3:]}, "lift slope dense": ".3f",
                 "surface weight": "g"})
    loads = [x for x in (load or []) if x == x]
    notes = (f"machine shared with other sessions: 1-min load average {min(loads):.1f} to "
             f"{max(loads):.1f} during the run" if loads else "")
    notes += (f"; training time summed over all runs: "
              f"{sum(r['train_s'] for r in rows) / 60:.1f} min at one thread")
    if a.from_raw:
        notes += f"; tabulated from the raw rows in {', '.join(a.from_raw)}"
    results.write(
        a.out_results, [tab, ab] + ([alt] if alt_rows else []), plugin="smart",
        seeds=sorted({*seeds, *ab_seeds}),
        clock=clock, threads=threads, quick=bool(a.from_raw),
        command="python " + shlex.join(["plugins/smart/benchmarks/bench_peers.py",
                                        *sys.argv[1:]]),
        tolerance={c: {"timing": True, "why": "wall-clock training time on a shared machine: "
                       "compare within this run only"} for c in ("train s", "time / SMART")},
        notes=notes)


if __name__ == "__main__":
    main()
