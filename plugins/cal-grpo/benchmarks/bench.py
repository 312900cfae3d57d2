"""CAL-GRPO benchmark: every estimator under the same scaling and baseline, in one run.

The std scaling is an explicit axis of every table (``none`` = CAL's default, ``group`` =
TRL's default); the baseline is leave-one-out everywhere unless a row says ``mean`` (TRL's).

1. Tabular probe environment (K=3), G=8: exact bias and exact total variance (enumeration over
   outcome types, no sampling) at the uniform and at a random policy; exact variance ratio
   CAL / trajectory vs G.
2. Tiny Qwen2 (hidden 64) on the LM probe task: naive vs trajectory GRPO vs CAL, each with and
   without group-std scaling, over seeds; exact Ver@3, Ver@1 and steps to Ver@3 >= 0.85.
3. Peer: TRL's own GRPOTrainer vs CALGRPOTrainer on the same multi-attempt rollouts, with TRL's
   scale_rewards and CAL's cal_scale set alike (skipped when trl is not installed).

    python plugins/cal-grpo/benchmarks/bench.py --parts tabular \
        [--out-results plugins/cal-grpo/results/bench.json]            # exact tables, ~20 s
    python plugins/cal-grpo/benchmarks/bench.py --parts lm [--seeds 4] [--steps 30] \
        [--out-results plugins/cal-grpo/results/tiny_lm.json]          # ~5 min
    python plugins/cal-grpo/benchmarks/bench.py --parts trl [--trl-steps 20] \
        [--out-results plugins/cal-grpo/results/trl_peer.json]      # needs trl ([bench] extra)

``--out-results FILE`` writes the tables of the parts run as a results file (``icml.results``),
its command the command line as typed from the repository root. Every number is exact
(enumeration) or a deterministic function of the seeds at one thread; the seed-level tables
carry the MDE of each estimator's difference from trajectory GRPO over the paired seeds
(``icml.stats.mde_mean``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time

import torch
from icml_cal_grpo.config import AdvantageConfig
from icml_cal_grpo.experiment import estimator_table, summarize, torch_threads, train_probe_lm
from icml_cal_grpo.tabular import enumerate_trajectories, probe_env

BASE = {"trajectory": {"mode": "trajectory"}, "cal": {"mode": "cal"},
        "naive": {"mode": "naive"}, "td(0.5)": {"mode": "td", "lam": 0.5},
        "td(0)": {"mode": "td", "lam": 0.0}}
SCALES = ("none", "group")
TABLES: list[dict] = []  # every table printed, for --out-results


def emit(title: str, cols: list[str], rows: list[list], name: str) -> None:
    """Print a Markdown table and keep it for the results file (cells as printed)."""
    from icml import results

    print(f"\n#### {title}\n")
    print("| " + " | ".join(c.replace("|", "\\|") for c in cols) + " |")
    print("|---" * len(cols) + "|")
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |", flush=True)
    TABLES.append(results.make_table(title, cols, rows, name=name))


def _diff_mde(values: dict[str, list[float]], arm: str, ref: str = "trajectory") -> list[str]:
    """Mean paired (same seed) difference ``arm - ref`` and its minimum detectable effect
    (alpha 0.05, power 0.8, ``icml.stats.mde_mean`` on the per-seed differences)."""
    from icml.stats import mde_mean

    if arm == ref or ref not in values:
        return ["-", "-"]
    d = [a - b for a, b in zip(values[arm], values[ref], strict=True)]
    sd = statistics.stdev(d) if len(d) > 1 else float("nan")
    mde = mde_mean(sd, len(d)) if sd == sd else float("inf")
    return [f"{statistics.fmean(d):+.3f}", f"{mde:.3f}"]


def table1(groups: int) -> None:
    tr = enumerate_trajectories(probe_env(), 3)
    rnd = torch.randn((tr.n_states, tr.n_arms), dtype=torch.float64,
                      generator=torch.Generator().manual_seed(0))
    est = {f"{name} | {sc} | loo": {**kw, "scale": sc} for sc in SCALES
           for name, kw in BASE.items()}
    est["trajectory | group | mean (TRL default)"] = {"mode": "trajectory", "scale": "group",
                                                      "baseline": "mean"}
    est["cal | group | mean"] = {"mode": "cal", "scale": "group", "baseline": "mean"}
    for name, logits in (("uniform", None), ("random N(0,1) logits", rnd)):
        rows = estimator_table(estimators=est, logits=logits, group_size=8)
        base = {sc: next(r["variance"] for r in rows
                         if r["estimator"] == f"trajectory | {sc} | loo") for sc in SCALES}
        out = []
        for r in rows:
            arm, sc, bl = str(r["estimator"]).split(" | ")
            out.append([arm, sc, bl, f"{r['rel_bias']:.3g}", f"{r['cosine']:.3f}",
                        f"{r['variance']:.4f}", f"{r['variance'] / base[sc]:.3f}",
                        f"{r['rel_variance']:.3f}"])
        emit(f"Tabular probe env, {name} policy (G=8, exact)",
             ["estimator", "scaling", "baseline", "relative bias", "cosine to grad J",
              "total variance", "variance / trajectory (same scaling)", "variance / |E g|^2"],
             out, name="uniform" if logits is None else "random")


def table0(seeds: int = 5, steps: int = 100) -> None:
    from icml_cal_grpo.tabular import exact_objective, train_tabular

    env = probe_env()
    tr1 = enumerate_trajectories(env, 1)
    rows = []
    for sc in SCALES:
        per: dict[str, list[float]] = {}
        v1s: dict[str, list[float]] = {}
        for mode in ("naive", "trajectory", "cal"):
            v3, v1 = [], []
            for s in range(seeds):
                keep: list = []
                v3.append(float(train_tabular(env, mode, steps=steps, lr=1.0, seed=s, scale=sc,
                                              keep=keep)[-1]))
                v1.append(float(exact_objective(keep[0][:1], tr1)))
            per[mode], v1s[mode] = v3, v1
        for mode in ("naive", "trajectory", "cal"):
            v3 = per[mode]
            rows.append([mode, sc, f"{statistics.fmean(v3):.3f} +- {statistics.stdev(v3):.3f}",
                         f"{min(v3):.3f}", f"{statistics.fmean(v1s[mode]):.3f}",
                         *_diff_mde(per, mode)])
    emit(f"Tabular probe env, policy-gradient training ({seeds} seeds x {steps} steps, G=8, "
         "lr 1, leave-one-out; exact Ver@k)",
         ["estimator", "scaling", "Ver@3 (mean +- sd)", "min", "Ver@1 (mean)",
          "Ver@3 - trajectory (paired seeds)", "MDE"], rows, name="tabular-training")


def table1b(groups: int) -> None:
    from icml_cal_grpo.tabular import exact_estimator_moments

    tr = enumerate_trajectories(probe_env(), 3)
    logits = torch.zeros((tr.n_states, tr.n_arms), dtype=torch.float64)
    sizes = (2, 3, 4, 6, 8, 16)
    rows = []
    for sc in SCALES:
        cells = []
        for g in sizes:
            v = {m: exact_estimator_moments(logits, tr, g, mode=m, scale=sc)[1]
                 for m in ("trajectory", "cal")}
            cells.append(f"{float(v['cal'] / v['trajectory']):.4f}")
        rows.append([sc, *cells])
    emit("CAL / trajectory-GRPO variance ratio vs group size (uniform policy, exact)",
         ["scaling", *(f"G={g}" for g in sizes)], rows, name="variance-ratio")


def table1c() -> None:
    """Why CAL's variance is above trajectory GRPO's at small G: the exact split of each
    estimator's variance into the part with its baselines at their expectations (centred) and
    the cost of estimating them from the other G-1 rollouts (noise)."""
    from icml_cal_grpo.tabular import variance_split

    tr = enumerate_trajectories(probe_env(), 3)
    rnd = torch.randn((tr.n_states, tr.n_arms), dtype=torch.float64,
                      generator=torch.Generator().manual_seed(0))
    rows = []
    for name, logits in (("uniform", torch.zeros_like(rnd)), ("random N(0,1) logits", rnd)):
        for g in (2, 3, 4, 6, 8, 16):
            t, c = (variance_split(logits, tr, g, mode=m) for m in ("trajectory", "cal"))
            gain, extra = t["centred"] - c["centred"], c["noise"] - t["noise"]
            gain, extra = (0.0 if abs(x) < 1e-12 else x for x in (gain, extra))  # G=2: equal
            rows.append([name, g, f"{c['total'] / t['total']:.4f}", f"{t['centred']:.5f}",
                         f"{c['centred']:.5f}", f"{t['noise']:.5f}", f"{c['noise']:.5f}",
                         f"{gain:+.5f}", f"{extra:+.5f}",
                         f"{extra / gain:.2f}" if abs(gain) > 1e-12 else "-"])
    emit("CAL vs trajectory GRPO: exact variance split into centred (baselines at their "
         "expectations) and noise (baselines estimated from the other G-1 rollouts); no "
         "scaling, leave-one-out",
         ["policy", "G", "CAL / trajectory (total)", "centred: trajectory", "centred: CAL",
          "noise: trajectory", "noise: CAL", "centring gain (traj - CAL)",
          "extra noise (CAL - traj)", "extra noise / gain"], rows, name="variance-split")


def _make(seed: int):
    from icml.models import byte_tokenizer, tiny_causal_lm

    return tiny_causal_lm("qwen2", seed=seed, hidden_size=64), byte_tokenizer()


def _cell(v: float, steps: int) -> str:
    return f"> {steps}" if v != v else f"{v:.0f}"


def table2(seeds: int, steps: int) -> None:
    from icml_cal_grpo.tasks import ProbeTask

    t0 = time.perf_counter()
    rows = []
    for sc in SCALES:
        curves, ver1 = [], {}
        for mode in ("naive", "trajectory", "cal"):
            keep: list = []
            for s in range(seeds):
                curves.append(train_probe_lm(mode, s, make_model=_make, steps=steps,
                                             advantage=AdvantageConfig(scale=sc), keep=keep))
            tok = _make(0)[1]
            task = ProbeTask(max_attempts=1)
            ver1[mode] = statistics.fmean(task.exact_verification(m, tok) for m in keep)
        per = {m: [float(c.ver[-1]) for c in curves if c.mode == m]
               for m in ("naive", "trajectory", "cal")}
        for s in summarize(curves, steps):
            finals = per[s["estimator"]]
            sd = statistics.stdev(finals) if len(finals) > 1 else 0.0
            rows.append([s["estimator"], sc, f"{s['final_ver']:.3f} +- {sd:.3f}",
                         f"{s['min_ver']:.3f}", f"{ver1[s['estimator']]:.3f}",
                         f"{s['probe_first']:.3f}", _cell(s["median_steps_to_target"], steps),
                         f"{s['reached']}/{s['seeds']}", *_diff_mde(per, s["estimator"])])
    emit(f"Tiny Qwen2 on the LM probe task ({seeds} seeds x {steps} steps, G=8, 2 prompts/step, "
         "leave-one-out baselines)",
         ["estimator", "scaling", "exact Ver@3 (mean +- sd)", "min", "exact Ver@1 (mean)",
          "P(probe first)", "median steps to 0.85", "reached",
          "Ver@3 - trajectory (paired seeds)", "MDE"], rows, name="tiny-lm")
    print(f"\n({time.perf_counter() - t0:.0f} s)")


def table3(seeds: int, steps: int) -> None:
    try:
        from datasets import Dataset
        from transformers import PrinterCallback
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        raise SystemExit("the trl part needs trl: pip install 'icml-cal-grpo[bench]'") from None
    from icml_cal_grpo.tasks import ProbeTask
    from icml_cal_grpo.trl_adapter import (
        CALGRPOTrainer,
        make_rollout_func,
        verification_reward_func,
    )

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    arms = {"TRL GRPOTrainer (its own advantage: mean baseline)": None,
            "CALGRPOTrainer trajectory, mean baseline (= TRL's advantage)":
                {"cal_mode": "trajectory", "cal_baseline": "mean"},
            "CALGRPOTrainer cal, mean baseline": {"cal_mode": "cal", "cal_baseline": "mean"},
            "CALGRPOTrainer cal, leave-one-out": {"cal_mode": "cal", "cal_baseline": "loo"}}
    import trl

    rows = []
    for sc in SCALES:
        per: dict[str, list[float]] = {}
        for name, cal in arms.items():
            res = []
            for s in range(seeds):
                model, tok = _make(s)
                model.train()
                task = ProbeTask(seed=s)
                args = GRPOConfig(output_dir="/tmp/cal_grpo_bench", num_generations=8,
                                  per_device_train_batch_size=16, max_steps=steps,
                                  learning_rate=3e-3, use_cpu=True, report_to="none",
                                  logging_steps=1000, save_strategy="no", beta=0.0,
                                  loss_type="dapo", seed=s, disable_tqdm=True,
                                  max_completion_length=16, scale_rewards=sc)
                ds = Dataset.from_dict({"prompt": [task.prompt] * 16 * steps})
                rc = task.rollout_config(tok)
                if cal is not None:
                    tr = CALGRPOTrainer(model, args=args, train_dataset=ds,
                                        processing_class=tok, verifier=task, rollout_config=rc,
                                        cal_scale=sc, **cal)
                else:
                    tr = GRPOTrainer(model, reward_funcs=[verification_reward_func], args=args,
                                     train_dataset=ds, processing_class=tok,
                                     rollout_func=make_rollout_func(task, rc, s))
                tr.remove_callback(PrinterCallback)
                tr.train()
                res.append(float(task.exact_verification(tr.accelerator.unwrap_model(tr.model),
                                                         tok)))
            per[name] = res
        ref = next(iter(arms))  # TRL's own GRPOTrainer
        for name, res in per.items():
            sd = statistics.stdev(res) if len(res) > 1 else 0.0
            rows.append([name, sc, f"{statistics.fmean(res):.3f} +- {sd:.3f}", f"{min(res):.3f}",
                         ", ".join(f"{x:.3f}" for x in res), *_diff_mde(per, name, ref)])
    emit(f"Peer: TRL {trl.__version__} GRPOTrainer vs CALGRPOTrainer ({seeds} seeds x {steps} "
         "steps, same multi-attempt rollout_func, beta=0, loss dapo)",
         ["trainer", "scaling", "exact Ver@3 (mean +- sd)", "min", "per seed",
          "Ver@3 - TRL GRPOTrainer (paired seeds)", "MDE"], rows, name="trl-peer")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="tabular,lm",
                    help="comma-separated: tabular (exact tables), lm (tiny Qwen2), trl (peer)")
    ap.add_argument("--tabular-seeds", type=int, default=5)
    ap.add_argument("--tabular-steps", type=int, default=100)
    ap.add_argument("--groups", type=int, default=20000)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--trl-seeds", type=int, default=3)
    ap.add_argument("--trl-steps", type=int, default=20)
    ap.add_argument("--out-results", default="",
                    help="also write the tables as a results file "
                         "(plugins/cal-grpo/results/NAME.json)")
    a = ap.parse_args()
    parts = a.parts.split(",")
    bad = sorted(set(parts) - {"tabular", "lm", "trl"})
    if bad:
        raise SystemExit(f"--parts: unknown {bad}; allowed: tabular, lm, trl")
    from icml import results

    clock = results.Clock()
    with torch_threads(1):
        t0 = time.perf_counter()
        if "tabular" in parts:
            table0(a.tabular_seeds, a.tabular_steps)
            table1(a.groups)
            table1b(a.groups)
            table1c()
        if "lm" in parts:
            table2(a.seeds, a.steps)
        if "trl" in parts:
            table3(a.trl_seeds, a.trl_steps)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s, torch {torch.__version__}")
    if a.out_results:
        command = "python " + shlex.join(["plugins/cal-grpo/benchmarks/bench.py", *sys.argv[1:]])
        seeds = range(max(a.tabular_seeds if "tabular" in parts else 0,
                          a.seeds if "lm" in parts else 0,
                          a.trl_seeds if "trl" in parts else 0))
        out = results.write(a.out_results, TABLES, command=command, plugin="cal-grpo",
                            seeds=list(seeds), clock=clock, threads=1,
                            # the exact tables run in well under 90 s: `icml reproduce --quick`
                            quick=set(parts) <= {"tabular"})
        print(f"# wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
