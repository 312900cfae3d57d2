"""CAL-GRPO benchmark: estimators vs baselines in one run, reported as ratios.

1. Tabular probe environment (K=3): exact bias of each estimator's expected gradient (enumerated
   over all groups) and its total variance at G=8 (Monte Carlo), at the uniform policy and a
   random policy. Ratios are variance / trajectory-GRPO variance.
2. Tiny Qwen2 (hidden 64) on the LM probe task: naive vs trajectory GRPO vs CAL over seeds;
   exact Ver@3 and steps to Ver@3 >= 0.85.
3. Peer: TRL's own GRPOTrainer (its scalar advantage broadcast to the completion) vs our
   CALGRPOTrainer, same multi-attempt rollouts (skipped when trl is not installed).

    python plugins/cal-grpo/benchmarks/bench.py [--seeds 4] [--steps 30] [--trl-steps 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from icml_cal_grpo.experiment import estimator_table, summarize, torch_threads, train_probe_lm
from icml_cal_grpo.tabular import enumerate_trajectories, probe_env

EST = {
    "trajectory (GRPO, LOO)": {"mode": "trajectory"},
    "cal": {"mode": "cal"},
    "naive": {"mode": "naive"},
    "td(0.5)": {"mode": "td", "lam": 0.5},
    "td(0)": {"mode": "td", "lam": 0.0},
    "trajectory + group std (TRL default)": {"mode": "trajectory", "baseline": "mean",
                                             "scale": "group"},
    "cal + position std": {"mode": "cal", "scale": "position"},
}


def table1(groups: int) -> None:
    tr = enumerate_trajectories(probe_env(), 3)
    rnd = torch.randn((tr.n_states, tr.n_arms), dtype=torch.float64,
                      generator=torch.Generator().manual_seed(0))
    for name, logits in (("uniform", None), ("random N(0,1) logits", rnd)):
        rows = estimator_table(num_groups=groups, estimators=EST, logits=logits)
        base = rows[0]["variance"]
        print(f"\n#### Tabular probe env, {name} policy (G=8, {groups} groups)\n")
        print("| estimator | relative bias (exact, G=2) | cosine to grad J | total variance | "
              "variance / trajectory | variance / \\|E g\\|^2 |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['estimator']} | {r['rel_bias']:.3g} | {r['cosine']:.3f} | "
                  f"{r['variance']:.4f} | {r['variance'] / base:.3f} | "
                  f"{r['rel_variance']:.3f} |")


def table1b(groups: int) -> None:
    from icml_cal_grpo.tabular import monte_carlo_estimator

    env = probe_env()
    tr = enumerate_trajectories(env, 3)
    logits = torch.zeros((tr.n_states, tr.n_arms), dtype=torch.float64)
    print(f"\n#### CAL / trajectory-GRPO variance ratio vs group size (uniform policy, paired "
          f"samples, {groups} groups)\n")
    print("| G | 2 | 3 | 4 | 6 | 8 | 16 |")
    print("|---|---|---|---|---|---|---|")
    cells = []
    for g in (2, 3, 4, 6, 8, 16):
        v = {}
        for mode in ("trajectory", "cal"):
            gen = torch.Generator().manual_seed(1)   # same groups for both estimators
            _, v[mode] = monte_carlo_estimator(logits, env, tr, g, groups, gen, mode=mode)
        cells.append(f"{float(v['cal'] / v['trajectory']):.3f}")
    print("| var(CAL) / var(trajectory) | " + " | ".join(cells) + " |")


def _make(seed: int):
    from icml.models import byte_tokenizer, tiny_causal_lm

    return tiny_causal_lm("qwen2", seed=seed, hidden_size=64), byte_tokenizer()


def _cell(v: float, steps: int) -> str:
    return f"> {steps}" if v != v else f"{v:.0f}"


def table2(seeds: int, steps: int) -> None:
    curves = []
    t0 = time.perf_counter()
    for mode in ("naive", "trajectory", "cal"):
        for s in range(seeds):
            curves.append(train_probe_lm(mode, s, make_model=_make, steps=steps))
    dt = time.perf_counter() - t0
    print(f"\n#### Tiny Qwen2 on the LM probe task ({seeds} seeds x {steps} steps, G=8, "
          f"2 prompts/step; {dt:.0f} s)\n")
    print("| estimator | exact Ver@3 (mean) | min | P(probe first) | median steps to 0.85 | "
          "reached |")
    print("|---|---|---|---|---|---|")
    for s in summarize(curves, steps):
        print(f"| {s['estimator']} | {s['final_ver']:.3f} | {s['min_ver']:.3f} | "
              f"{s['probe_first']:.3f} | {_cell(s['median_steps_to_target'], steps)} | "
              f"{s['reached']}/{s['seeds']} |")


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
    res: dict[str, list[float]] = {"TRL GRPOTrainer (vanilla GRPO)": [], "CALGRPOTrainer": []}
    for s in range(seeds):
        for name in res:
            model, tok = _make(s)
            model.train()
            task = ProbeTask(seed=s)
            args = GRPOConfig(output_dir="/tmp/cal_grpo_bench", num_generations=8,
                              per_device_train_batch_size=16, max_steps=steps,
                              learning_rate=3e-3, use_cpu=True, report_to="none",
                              logging_steps=1000, save_strategy="no", beta=0.0,
                              loss_type="dapo", seed=s, disable_tqdm=True,
                              max_completion_length=16)
            ds = Dataset.from_dict({"prompt": [task.prompt] * 16 * steps})
            rc = task.rollout_config(tok)
            if name == "CALGRPOTrainer":
                tr = CALGRPOTrainer(model, args=args, train_dataset=ds, processing_class=tok,
                                    verifier=task, rollout_config=rc, cal_scale="none")
            else:
                tr = GRPOTrainer(model, reward_funcs=[verification_reward_func], args=args,
                                 train_dataset=ds, processing_class=tok,
                                 rollout_func=make_rollout_func(task, rc, s))
            tr.remove_callback(PrinterCallback)
            tr.train()
            res[name].append(task.exact_verification(tr.accelerator.unwrap_model(tr.model), tok))
    print(f"\n#### Peer: TRL 1.16 GRPOTrainer vs CALGRPOTrainer ({seeds} seeds x {steps} "
          "steps, same multi-attempt rollout_func)\n")
    print("| trainer | exact Ver@3 (mean) | min | per seed |")
    print("|---|---|---|---|")
    for name, v in res.items():
        print(f"| {name} | {statistics.fmean(v):.3f} | {min(v):.3f} | "
              f"{', '.join(f'{x:.3f}' for x in v)} |")


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
        table1(a.groups)
        table1b(a.groups)
        table2(a.seeds, a.steps)
        table3(a.trl_seeds, a.trl_steps)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s, torch {torch.__version__}")


if __name__ == "__main__":
    main()
