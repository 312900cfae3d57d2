"""CAL vs trajectory GRPO vs naive weighting on a real language task: SmolLM2-135M-Instruct
(the core's packaged pretrained model) with LoRA, short factual questions (capitals, 45 train /
15 held-out), up to 3 attempts with "Incorrect. Try again." between them. Ver@1 and Ver@3 on
the held-out questions before and after a short training budget, per estimator and seed. All
estimators share the same settings (no std scaling, leave-one-out baseline, same seeds, same
evaluation rollouts seed), so only the weighting differs.

    OMP_NUM_THREADS=1 python plugins/cal-grpo/benchmarks/real_task.py --out runs.jsonl \
        --out-results plugins/cal-grpo/results/real_task.json

Superseded by ``real_task_arith.py`` (15 held-out questions cannot separate the estimators); its
0.2.0 tables are kept in CHANGELOG.md. ``--out-results FILE`` writes the per-run and per-arm
tables as a results file (``icml.results``); the training wall seconds are a clock reading
(declared ``timing``).
"""

from __future__ import annotations

import argparse
import copy
import json
import shlex
import statistics
import sys
import time


def evaluate(model, tok, task, prompts, gens, seed):
    import torch
    from icml_cal_grpo.metrics import verification_at_k
    from icml_cal_grpo.rollout import multi_attempt_rollout

    b = multi_attempt_rollout(model, tok, prompts, task, task.rollout_config(),
                              num_generations=gens,
                              generator=torch.Generator().manual_seed(10_000 + seed))
    return {"ver@1": verification_at_k(b.rewards, b.reached, k=1),
            "ver@3": verification_at_k(b.rewards, b.reached, k=3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="naive,trajectory,cal")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--num-generations", type=int, default=4)
    ap.add_argument("--prompts-per-step", type=int, default=2)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--eval-gens", type=int, default=2)
    ap.add_argument("--beta", type=float, default=0.0)
    ap.add_argument("--scale", default="none")
    ap.add_argument("--test-questions", type=int, default=0,
                    help="evaluate on the first N held-out questions only (0: all 15)")
    ap.add_argument("--out", default="real_task.jsonl")
    ap.add_argument("--out-results", default="",
                    help="also write the tables as a results file "
                         "(plugins/cal-grpo/results/NAME.json)")
    a = ap.parse_args()
    from icml import results

    clock = results.Clock()
    records: list[dict] = []

    import random

    import torch
    from icml_cal_grpo.config import AdvantageConfig
    from icml_cal_grpo.tasks import ChatQATask
    from icml_cal_grpo.trainer import AttemptGRPOConfig, AttemptGRPOTrainer
    from peft import LoraConfig, get_peft_model

    from icml.models import load_pretrained

    torch.set_num_threads(1)
    base, tok = load_pretrained("smollm2-135m-instruct")
    task = ChatQATask(tok)
    train, test = task.prompts("train"), task.prompts("test")
    if a.test_questions:
        test = test[:a.test_questions]
    out = open(a.out, "a")
    seeds = [int(s) for s in a.seeds.split(",")]
    for seed in seeds:
        t0 = time.perf_counter()
        ev = evaluate(base, tok, task, test, a.eval_gens, seed)
        rec = {"mode": "base", "seed": seed, **ev, "seconds": time.perf_counter() - t0}
        print(json.dumps(rec), flush=True)
        out.write(json.dumps(rec) + "\n")
        out.flush()
        records.append(rec)
        for mode in a.modes.split(","):
            t0 = time.perf_counter()
            torch.manual_seed(seed)
            model = get_peft_model(copy.deepcopy(base),
                                   LoraConfig(r=a.lora_r, lora_alpha=2 * a.lora_r,
                                              target_modules=["q_proj", "k_proj", "v_proj",
                                                              "o_proj"]))
            order = list(train)
            random.Random(seed).shuffle(order)
            args = AttemptGRPOConfig(mode=mode, advantage=AdvantageConfig(scale=a.scale),
                                     num_generations=a.num_generations,
                                     prompts_per_step=a.prompts_per_step, learning_rate=a.lr,
                                     beta=a.beta, gradient_accumulation_steps=2,
                                     logprob_chunk_size=32)
            tr = AttemptGRPOTrainer(model, tok, task, order, args, task.rollout_config(),
                                    seed=seed, cpu=True)
            hist = tr.train(a.steps)
            t_train = time.perf_counter() - t0
            ev = evaluate(tr.accelerator.unwrap_model(tr.model), tok, task, test, a.eval_gens,
                          seed)
            rec = {"mode": mode, "seed": seed, **ev,
                   "train_ver@3": [round(h["ver@3"], 3) for h in hist],
                   "train_seconds": t_train, "seconds": time.perf_counter() - t0}
            print(json.dumps(rec), flush=True)
            out.write(json.dumps(rec) + "\n")
            out.flush()
            records.append(rec)
    out.close()
    if a.out_results:
        write_results(a.out_results, records, seeds, clock)


def write_results(path: str, records: list[dict], seeds: list[int], clock) -> None:
    from icml import results

    def sd(x: list[float]) -> float:
        return statistics.stdev(x) if len(x) > 1 else 0.0

    per_run = results.make_table(
        "Per run (held-out Ver@k; training-batch Ver@3 per update)",
        ["arm", "seed", "Ver@1 (held-out)", "Ver@3 (held-out)", "train Ver@3 per step",
         "train wall s"],
        [[r["mode"], r["seed"], r["ver@1"], r["ver@3"],
          ", ".join(f"{v:.2f}" for v in r.get("train_ver@3", [])) or "-",
          r.get("train_seconds")] for r in records],
        name="per_run", formats={"Ver@1 (held-out)": ".3f", "Ver@3 (held-out)": ".3f",
                                 "train wall s": ".0f"})
    arms = list(dict.fromkeys(r["mode"] for r in records))
    rows = []
    for arm in arms:
        v1 = [r["ver@1"] for r in records if r["mode"] == arm]
        v3 = [r["ver@3"] for r in records if r["mode"] == arm]
        rows.append([arm, len(v1), f"{statistics.fmean(v1):.3f} +- {sd(v1):.3f}",
                     f"{statistics.fmean(v3):.3f} +- {sd(v3):.3f}"])
    summary = results.make_table("Per arm over seeds",
                                 ["arm", "seeds", "Ver@1 (mean +- sd)", "Ver@3 (mean +- sd)"],
                                 rows, name="arms")
    out = results.write(
        path, [per_run, summary], plugin="cal-grpo", seeds=seeds, clock=clock, threads=1,
        command="python " + shlex.join(["plugins/cal-grpo/benchmarks/real_task.py",
                                        *sys.argv[1:]]),
        tolerance={"train wall s": {"timing": True,
                                    "why": "wall clock of a shared CPU: shown, never compared"}})
    print(f"# wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
