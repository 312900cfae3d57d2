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

    python plugins/cal-grpo/benchmarks/bench.py [--seeds 4] [--steps 30] [--trl-steps 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from icml_cal_grpo.config import AdvantageConfig
from icml_cal_grpo.experiment import estimator_table, summarize, torch_threads, train_probe_lm
from icml_cal_grpo.tabular import enumerate_trajectories, probe_env

BASE = {"trajectory": {"mode": "trajectory"}, "cal": {"mode": "cal"},
        "naive": {"mode": "naive"}, "td(0.5)": {"mode": "td", "lam": 0.5},
        "td(0)": {"mode": "td", "lam": 0.0}}
SCALES = ("none", "group")


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
        print(f"\n#### Tabular probe env, {name} policy (G=8, exact)\n")
        print("| estimator | scaling | baseline | relative bias | cosine to grad J | "
              "total variance | variance / trajectory (same scaling) | variance / "
              "\\|E g\\|^2 |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            sc = str(r["estimator"]).split(" | ")[1]
            print(f"| {r['estimator']} | {r['rel_bias']:.3g} | {r['cosine']:.3f} | "
                  f"{r['variance']:.4f} | {r['variance'] / base[sc]:.3f} | "
                  f"{r['rel_variance']:.3f} |")


def table0(seeds: int = 5, steps: int = 100) -> None:
    from icml_cal_grpo.tabular import exact_objective, train_tabular

    env = probe_env()
    tr1 = enumerate_trajectories(env, 1)
    print(f"\n#### Tabular probe env, policy-gradient training ({seeds} seeds x {steps} steps, "
          "G=8, lr 1, leave-one-out; exact Ver@k)\n")
    print("| estimator | scaling | Ver@3 (mean +- sd) | min | Ver@1 (mean) |")
    print("|---|---|---|---|---|")
    for sc in SCALES:
        for mode in ("naive", "trajectory", "cal"):
            v3, v1 = [], []
            for s in range(seeds):
                keep: list = []
                v3.append(train_tabular(env, mode, steps=steps, lr=1.0, seed=s, scale=sc,
                                        keep=keep)[-1])
                v1.append(float(exact_objective(keep[0][:1], tr1)))
            print(f"| {mode} | {sc} | {statistics.fmean(v3):.3f} +- {statistics.stdev(v3):.3f} "
                  f"| {min(v3):.3f} | {statistics.fmean(v1):.3f} |")


def table1b(groups: int) -> None:
    from icml_cal_grpo.tabular import exact_estimator_moments

    tr = enumerate_trajectories(probe_env(), 3)
    logits = torch.zeros((tr.n_states, tr.n_arms), dtype=torch.float64)
    sizes = (2, 3, 4, 6, 8, 16)
    print("\n#### CAL / trajectory-GRPO variance ratio vs group size (uniform policy, exact)\n")
    print("| scaling | " + " | ".join(f"G={g}" for g in sizes) + " |")
    print("|---" * (len(sizes) + 1) + "|")
    for sc in SCALES:
        cells = []
        for g in sizes:
            v = {m: exact_estimator_moments(logits, tr, g, mode=m, scale=sc)[1]
                 for m in ("trajectory", "cal")}
            cells.append(f"{float(v['cal'] / v['trajectory']):.4f}")
        print(f"| {sc} | " + " | ".join(cells) + " |")


def _make(seed: int):
    from icml.models import byte_tokenizer, tiny_causal_lm

    return tiny_causal_lm("qwen2", seed=seed, hidden_size=64), byte_tokenizer()


def _cell(v: float, steps: int) -> str:
    return f"> {steps}" if v != v else f"{v:.0f}"


def table2(seeds: int, steps: int) -> None:
    from icml_cal_grpo.tasks import ProbeTask

    t0 = time.perf_counter()
    print(f"\n#### Tiny Qwen2 on the LM probe task ({seeds} seeds x {steps} steps, G=8, "
          "2 prompts/step, leave-one-out baselines)\n")
    print("| estimator | scaling | exact Ver@3 (mean +- sd) | min | exact Ver@1 (mean) | "
          "P(probe first) | median steps to 0.85 | reached |")
    print("|---|---|---|---|---|---|---|---|")
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
        for s in summarize(curves, steps):
            finals = [c.ver[-1] for c in curves if c.mode == s["estimator"]]
            sd = statistics.stdev(finals) if len(finals) > 1 else 0.0
            print(f"| {s['estimator']} | {sc} | {s['final_ver']:.3f} +- {sd:.3f} | "
                  f"{s['min_ver']:.3f} | {ver1[s['estimator']]:.3f} | {s['probe_first']:.3f} | "
                  f"{_cell(s['median_steps_to_target'], steps)} | "
                  f"{s['reached']}/{s['seeds']} |")
    print(f"\n({time.perf_counter() - t0:.0f} s)")


def table3(seeds: int, steps: int) -> None:
    try:
        from datasets import Dataset
        from transformers import PrinterCallback
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        print("\n(trl not installed: peer table skipped; pip install 'icml-cal-grpo[bench]')")
        return
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
    print(f"\n#### Peer: TRL 1.16 GRPOTrainer vs CALGRPOTrainer ({seeds} seeds x {steps} "
          "steps, same multi-attempt rollout_func, beta=0, loss dapo)\n")
    print("| trainer | scaling | exact Ver@3 (mean +- sd) | min | per seed |")
    print("|---|---|---|---|---|")
    for sc in SCALES:
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
                res.append(task.exact_verification(tr.accelerator.unwrap_model(tr.model), tok))
            sd = statistics.stdev(res) if len(res) > 1 else 0.0
            print(f"| {name} | {sc} | {statistics.fmean(res):.3f} +- {sd:.3f} | {min(res):.3f} | "
                  f"{', '.join(f'{x:.3f}' for x in res)} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=20000)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--trl-seeds", type=int, default=3)
    ap.add_argument("--trl-steps", type=int, default=20)
    a = ap.parse_args()
    with torch_threads(1):
        t0 = time.perf_counter()
        table0()
        table1(a.groups)
        table1b(a.groups)
        table2(a.seeds, a.steps)
        table3(a.trl_seeds, a.trl_steps)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s, torch {torch.__version__}")


if __name__ == "__main__":
    main()
