"""Rollout throughput: our cached sampler vs transformers ``generate`` (both multi-attempt with
feedback turns), and single-attempt generation ours vs TRL GRPOTrainer's own generation path
(transformers ``generate`` inside ``GRPOTrainer._generate``), on the same model and prompts.
Arms alternate within one run (repetition r of every arm, then r+1), so machine load hits all
arms alike; the table reports generated tokens per second and time ratios.

    python plugins/cal-grpo/benchmarks/bench_rollout.py --model smollm2 --reps 2 \
        --out-results plugins/cal-grpo/results/rollout_smollm2.json
    python plugins/cal-grpo/benchmarks/bench_rollout.py --model tiny --reps 3 \
        --out-results plugins/cal-grpo/results/rollout_tiny.json

Needs trl (``pip install 'icml-cal-grpo[bench]'``). ``--out-results FILE`` writes the table as a
results file (``icml.results``); every number in it is a clock reading or a ratio of two, so
each column is declared ``timing`` (shown, never compared by ``icml reproduce``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time

TIMING_WHY = ("wall clock of one process on a shared 2-core CPU (load average in the title): "
              "shown, never compared; ratios are from the same run, arms alternating")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2", choices=("smollm2", "tiny"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--num-generations", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=10)
    ap.add_argument("--out-results", default="",
                    help="also write the table as a results file "
                         "(plugins/cal-grpo/results/NAME.json)")
    a = ap.parse_args()
    from icml import results

    clock = results.Clock()
    load0 = os.getloadavg()[0]

    import torch
    from datasets import Dataset
    from icml_cal_grpo.rollout import MultiAttemptConfig, multi_attempt_rollout
    from icml_cal_grpo.tasks import ChatQATask
    from trl import GRPOConfig, GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.set_num_threads(1)
    if a.model == "smollm2":
        from icml.models import load_pretrained

        model, tok = load_pretrained("smollm2-135m-instruct")
        task = ChatQATask(tok, max_attempt_tokens=a.tokens)
        prompts = task.prompts("test")[:a.prompts]
        verifier, feedback = task, task.feedback
    else:
        from icml.models import byte_tokenizer, tiny_causal_lm

        model, tok = tiny_causal_lm("qwen2", seed=0, hidden_size=64), byte_tokenizer()
        prompts = [f"question {i}: " for i in range(a.prompts)]
        feedback = " wrong, again: "

        def verifier(p, x, e):
            return False
    model.eval()
    g = a.num_generations

    def ours(backend: str, k: int):
        cfg = MultiAttemptConfig(max_attempts=k, feedback=feedback, max_attempt_tokens=a.tokens,
                                 on_length="verify", add_special_tokens=a.model == "tiny",
                                 backend=backend)

        def run(rep: int) -> int:
            b = multi_attempt_rollout(model, tok, prompts, verifier, cfg, num_generations=g,
                                      generator=torch.Generator().manual_seed(rep))
            return sum(len(t) for row in b.attempt_ids for t in row)
        return run

    args = GRPOConfig(output_dir="/tmp/cal_grpo_rollout_bench", num_generations=g,
                      per_device_train_batch_size=g * len(prompts),
                      max_completion_length=a.tokens, use_cpu=True, report_to="none",
                      temperature=1.0, top_p=1.0, top_k=0, disable_tqdm=True)
    trl = GRPOTrainer(model, reward_funcs=[lambda prompts, completions, **kw: [0.0] * len(prompts)],
                      args=args, train_dataset=Dataset.from_dict({"prompt": prompts}),
                      processing_class=tok)
    trl.model.eval()

    def trl_run(rep: int) -> int:
        torch.manual_seed(rep)
        out = trl._generate([p for p in prompts for _ in range(g)])
        return sum(len(c) for c in out[1])

    arms = {"ours, cache, K=3 (feedback turns)": ours("cache", 3),
            "ours, generate, K=3 (feedback turns)": ours("generate", 3),
            "ours, cache, K=1": ours("cache", 1),
            "ours, generate, K=1": ours("generate", 1),
            "TRL GRPOTrainer._generate, 1 turn": trl_run}
    times: dict[str, list[float]] = {n: [] for n in arms}
    toks: dict[str, list[int]] = {n: [] for n in arms}
    with torch.no_grad():
        for fn in arms.values():      # warm-up, not timed
            fn(99)
        for rep in range(a.reps):
            for name, fn in arms.items():
                t0 = time.perf_counter()
                n = fn(rep)
                times[name].append(time.perf_counter() - t0)
                toks[name].append(n)
    load1 = os.getloadavg()[0]
    title = (f"Rollout throughput, {a.model} ({len(prompts)} prompts x {g} generations, "
             f"<= {a.tokens} tokens per attempt, {a.reps} alternating repetitions, 1 thread; "
             f"load average {load0:.1f} at the start, {load1:.1f} at the end)")
    cols = ["arm", "median s per batch", "generated tokens / s", "time / (ours, cache, same K)"]
    ref = {3: statistics.median(times["ours, cache, K=3 (feedback turns)"]),
           1: statistics.median(times["ours, cache, K=1"])}
    rows = []
    for name in arms:
        med = statistics.median(times[name])
        rate = sum(toks[name]) / sum(times[name])
        k = 3 if "K=3" in name else 1
        rows.append([name, med, rate, med / ref[k]])
    print(f"\n#### {title}\n")
    print("| " + " | ".join(cols) + " |")
    print("|---" * len(cols) + "|")
    for name, med, rate, ratio in rows:
        print(f"| {name} | {med:.2f} | {rate:.1f} | {ratio:.2f} |")
    print(f"\ntorch {torch.__version__}, load average {load1:.1f}")
    if a.out_results:
        table = results.make_table(title, cols, rows, name="rollout",
                                   formats={cols[1]: ".2f", cols[2]: ".1f", cols[3]: ".2f"})
        out = results.write(
            a.out_results, [table], plugin="cal-grpo", clock=clock, threads=1, seeds=[],
            command="python " + shlex.join(["plugins/cal-grpo/benchmarks/bench_rollout.py",
                                            *sys.argv[1:]]),
            tolerance={c: {"timing": True, "why": TIMING_WHY} for c in cols[1:]})
        print(f"# wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
