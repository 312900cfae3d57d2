"""CAL vs trajectory GRPO vs naive attempt weighting on a real language task where later
attempts matter: SmolLM2-135M-Instruct + LoRA on `ArithmeticChoiceTask` (two-number additions
with 4 listed options, answered by number, "Wrong." between attempts, up to 3 attempts).

Every arm shares everything but the estimator: the same LoRA initialisation, prompt order and
rollout RNG seed per seed, the same rollouts budget (G=4 x 4 questions per update), no std
scaling, leave-one-out baseline, DAPO loss, beta=0. Evaluation: greedy decoding (top_k=1), one
rollout of up to 3 attempts per held-out question (240 questions, disjoint from the 400 training
ones); Ver@k = fraction of questions solved within k attempts. The base model's evaluation is
seed-independent (greedy) and runs once.

    # R=plugins/cal-grpo/benchmarks/results
    # the learning curve of one arm (trajectory GRPO, seed 0, lr 1e-3), held-out every 10
    OMP_NUM_THREADS=1 python plugins/cal-grpo/benchmarks/real_task_arith.py run \\
        --modes trajectory --seeds 0 --steps 30 --eval-at 10,20 --out $R/curve.jsonl
    # the comparison: 3 arms x 3 seeds, 15 updates at lr 2e-3 (the base row is in curve.jsonl)
    OMP_NUM_THREADS=1 python plugins/cal-grpo/benchmarks/real_task_arith.py run \\
        --modes naive,trajectory,cal --seeds 0,1,2 --steps 15 --lr 2e-3 --no-base-eval \\
        --out $R/runs.jsonl
    python plugins/cal-grpo/benchmarks/real_task_arith.py report $R/runs.jsonl \\
        --curve $R/curve.jsonl
    # CPU seconds of one rollout and one update, with and without the savings
    OMP_NUM_THREADS=1 python plugins/cal-grpo/benchmarks/real_task_arith.py profile \\
        --out-results plugins/cal-grpo/results/profile.json

Records (one JSON line per evaluation): mode, seed, step, ver@1..3, the per-question attempt of
first success (0 = none), the training metrics per update, CPU and wall seconds.
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import time

DTYPES = ("float32", "bfloat16")


def _load(a):
    """SmolLM2-135M-Instruct in ``--dtype`` on ``--device``. LoRA adapters added to a bf16
    model stay float32 (peft's ``autocast_adapter_dtype``), so AdamW updates fp32 weights;
    log-probs and sampling use float32 logits (``.float()`` in the library)."""
    import torch

    from icml.models import load_pretrained

    return load_pretrained("smollm2-135m-instruct", dtype=getattr(torch, a.dtype),
                           device=a.device)


def _load_avg() -> list[float] | None:
    import os

    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def evaluate(model, tok, task, prompts):
    import torch
    from icml_cal_grpo.rollout import multi_attempt_rollout

    dev = next(model.parameters()).device
    b = multi_attempt_rollout(model, tok, prompts, task, task.rollout_config(greedy=True),
                              num_generations=1,
                              generator=torch.Generator(device=dev).manual_seed(0))
    first = []
    for i in range(len(prompts)):
        hit = (b.rewards[i] > 0).nonzero().flatten().tolist()
        first.append(hit[0] + 1 if hit else 0)
    k_max = task.max_attempts
    out = {f"ver@{k}": sum(1 for f in first if 0 < f <= k) / len(first)
           for k in range(1, k_max + 1)}
    repeats = sum(1 for a in b.attempts if len(a) > 1 and len(set(a)) < len(a))
    out["repeat_rate"] = repeats / max(1, sum(1 for a in b.attempts if len(a) > 1))
    out["first"] = first
    out["examples"] = [b.attempts[i] for i in range(4)]
    return out


def run(a) -> None:
    import copy

    import torch
    from icml_cal_grpo.config import AdvantageConfig
    from icml_cal_grpo.tasks import ArithmeticChoiceTask
    from icml_cal_grpo.trainer import AttemptGRPOConfig, AttemptGRPOTrainer
    from peft import LoraConfig, get_peft_model

    torch.set_num_threads(a.threads)
    base, tok = _load(a)
    task = ArithmeticChoiceTask(tok, n_train=a.n_train, n_test=a.n_test)
    train, test = task.prompts("train"), task.prompts("test")
    n_layers = base.config.num_hidden_layers
    layers = list(range(n_layers - a.lora_layers, n_layers))
    eval_at = sorted({int(s) for s in a.eval_at.split(",") if s} | {a.steps})
    out = open(a.out, "a")

    def write(rec):
        print(json.dumps({k: v for k, v in rec.items() if k not in ("first", "history")}),
              flush=True)
        out.write(json.dumps(rec) + "\n")
        out.flush()

    if a.base_eval:
        c0, w0 = time.process_time(), time.perf_counter()
        ev = evaluate(base, tok, task, test)
        write({"mode": "base", "seed": None, "step": 0, **ev,
               "cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - w0})
    for seed in [int(s) for s in a.seeds.split(",")]:
        for mode in a.modes.split(","):
            c0, w0 = time.process_time(), time.perf_counter()
            torch.manual_seed(seed)
            model = get_peft_model(copy.deepcopy(base), LoraConfig(
                r=a.lora_r, lora_alpha=2 * a.lora_r, layers_to_transform=layers,
                target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
            order = list(train)
            random.Random(seed).shuffle(order)
            args = AttemptGRPOConfig(mode=mode,
                                     advantage=AdvantageConfig(scale="none", baseline="loo"),
                                     num_generations=a.num_generations,
                                     prompts_per_step=a.prompts_per_step,
                                     learning_rate=a.lr, logprob_chunk_size=64)
            tr = AttemptGRPOTrainer(model, tok, task, order, args, task.rollout_config(),
                                    seed=seed)          # device: the model's (--device)
            hist, c_eval, w_eval = [], 0.0, 0.0
            for step in range(1, a.steps + 1):
                m = tr.step()
                hist.append({k: round(float(v), 4) for k, v in m.items()})
                if step in eval_at:
                    c1, w1 = time.process_time(), time.perf_counter()
                    ev = evaluate(tr.accelerator.unwrap_model(tr.model), tok, task, test)
                    c_eval += time.process_time() - c1
                    w_eval += time.perf_counter() - w1
                    write({"mode": mode, "seed": seed, "step": step, **ev,
                           "train_ver@3": [h["ver@3"] for h in hist],
                           "train_ver@1": [h["ver@1"] for h in hist],
                           "train_cpu_s": time.process_time() - c0 - c_eval,
                           "train_wall_s": time.perf_counter() - w0 - w_eval,
                           "eval_cpu_s": c_eval, "history": hist, "lr": a.lr,
                           "num_generations": a.num_generations,
                           "prompts_per_step": a.prompts_per_step, "dtype": a.dtype,
                           "device": a.device, "load": _load_avg(),
                           "lora": f"r={a.lora_r} q/k/v/o, last {a.lora_layers} layers"})


def profile(a) -> None:
    """CPU seconds of one rollout (16 rollouts: G=4 x 4 questions) and one update, median of
    ``--reps`` after one warm-up, for LoRA on every layer (q/v) or on the last 8 (q/k/v/o),
    with and without the two savings (output layer only at attempt positions; one prefill
    per distinct prompt). The same rollouts feed every update variant."""
    import copy
    import statistics as st

    import torch
    from icml_cal_grpo import rollout as rollout_mod
    from icml_cal_grpo.advantages import attempt_advantages, token_advantages
    from icml_cal_grpo.tasks import ArithmeticChoiceTask
    from icml_cal_grpo.trainer import AttemptGRPOConfig, AttemptGRPOTrainer
    from peft import LoraConfig, get_peft_model

    from icml import results
    from icml.models import load_pretrained

    torch.set_num_threads(1)
    clock = results.Clock()
    rows = []
    base, tok = load_pretrained("smollm2-135m-instruct")
    task = ArithmeticChoiceTask(tok)
    train = task.prompts("train")[:4]
    n = base.config.num_hidden_layers
    shared = rollout_mod._CachedContexts._prefill
    print("| LoRA | rollout CPU s (one prefill per prompt) | rollout CPU s (every row "
          "prefilled) | update CPU s (output layer at attempt positions) | update CPU s "
          "(output layer everywhere) |")
    print("|---|---|---|---|---|")
    for name, kw in (("r=16 q/v, all 30 layers", {"target_modules": ["q_proj", "v_proj"]}),
                     ("r=16 q/k/v/o, last 8 layers (benchmark)",
                      {"target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
                       "layers_to_transform": list(range(n - 8, n))})):
        torch.manual_seed(0)
        model = get_peft_model(copy.deepcopy(base), LoraConfig(r=16, lora_alpha=32, **kw))
        tr = AttemptGRPOTrainer(model, tok, task, train,
                                AttemptGRPOConfig(num_generations=4, prompts_per_step=4,
                                                  learning_rate=0.0), task.rollout_config(),
                                seed=0, cpu=True)
        times: dict[str, list[float]] = {"ro": [], "ro_all": [], "up": [], "up_all": []}
        for rep in range(a.reps + 1):
            for key in ("ro", "ro_all"):
                rollout_mod._CachedContexts._prefill = (
                    shared if key == "ro" else rollout_mod._CachedContexts._feed_all)
                c0 = time.process_time()
                b = rollout_mod.multi_attempt_rollout(
                    model, tok, train, task, task.rollout_config(), num_generations=4,
                    generator=torch.Generator().manual_seed(rep))
                if rep:
                    times[key].append(time.process_time() - c0)
            rollout_mod._CachedContexts._prefill = shared
            adv = token_advantages(attempt_advantages(b.rewards, b.reached, group_size=4),
                                   b.attempt_index)
            orig = tr._logps
            for key in ("up", "up_all"):
                if key == "up_all":
                    tr._logps = lambda m, i, t, mask=None, f=orig: f(m, i, t, None)
                c0 = time.process_time()
                tr.update(b.input_ids, b.attention_mask, b.attempt_index, adv)
                if rep:
                    times[key].append(time.process_time() - c0)
            tr._logps = orig
        med = {k: st.median(v) for k, v in times.items()}
        print(f"| {name} | {med['ro']:.1f} | {med['ro_all']:.1f} | {med['up']:.1f} | "
              f"{med['up_all']:.1f} |", flush=True)
        rows.append([name, med["ro"], med["ro_all"], med["up"], med["up_all"],
                     (med["ro_all"] + med["up_all"]) / (med["ro"] + med["up"])])
    if a.out_results:
        cols = ["LoRA", "rollout CPU s (one prefill per prompt)",
                "rollout CPU s (every row prefilled)",
                "update CPU s (output layer at attempt positions)",
                "update CPU s (output layer everywhere)", "saving, without / with both"]
        tol = {c: {"timing": True, "why": "CPU seconds (and their ratio) on a shared machine"}
               for c in cols[1:]}
        table = results.make_table(
            "CPU seconds of one update (16 rollouts: G=4 x 4 questions), median of --reps "
            "after a warm-up", cols, rows, name="profile",
            formats={c: ".1f" for c in cols[1:]})
        command = ("python plugins/cal-grpo/benchmarks/real_task_arith.py "
                   + shlex.join(sys.argv[1:]))
        print("results file:", results.write(a.out_results, [table], command=command,
                                              plugin="cal-grpo", seeds=[0], quick=False,
                                              tolerance=tol, clock=clock, threads=1),
              file=sys.stderr)


DTYPE_TOLERANCE = {
    "rollout CPU s": {"timing": True, "why": "CPU seconds on a shared machine"},
    "update CPU s": {"timing": True, "why": "CPU seconds on a shared machine"},
    "held-out evaluation CPU s": {"timing": True, "why": "CPU seconds on a shared machine"},
    "rollout + update, / float32": {"timing": True, "why": "ratio of CPU seconds, one run"},
    "bfloat16": {"abs": 0.002, "rel": 0.01,
                 "why": "bf16 reductions may round differently with the thread count"},
}


def dtype_check(a) -> None:
    """bfloat16 against float32 on the same inputs -- the subset check behind running the
    comparison in bf16 -- and the CPU seconds of each (the pilot that sized the comparison).

    Same LoRA (r=16 q/k/v/o, last 8 layers; ``lora_B`` set to the same small random values in
    both, since at its zero initialisation ``lora_A`` gets no gradient), same rollouts:
    (1) per-update CPU seconds of a rollout of G x questions and of the update, median of
    ``--reps`` after a warm-up, per dtype, alternating; (2) on the float32 model's rollouts,
    the bf16 LoRA gradient against the fp32 one (cosine, relative error) and the attempt-token
    log-probs; (3) the base model's greedy held-out evaluation in both dtypes (Ver@k, the
    paired Ver@3 difference over questions, questions whose first success is the same)."""
    import copy
    import statistics as st

    import torch
    from icml_cal_grpo.config import AdvantageConfig
    from icml_cal_grpo.rollout import multi_attempt_rollout
    from icml_cal_grpo.tasks import ArithmeticChoiceTask
    from icml_cal_grpo.trainer import AttemptGRPOConfig, AttemptGRPOTrainer
    from peft import LoraConfig, get_peft_model

    from icml import results, stats
    from icml.models import load_pretrained

    clock = results.Clock()
    torch.set_num_threads(a.threads)
    base, tok = load_pretrained("smollm2-135m-instruct", dtype=torch.float32, device=a.device)
    task = ArithmeticChoiceTask(tok, n_train=a.n_train, n_test=a.n_test)
    train, test = task.prompts("train")[:a.prompts_per_step], task.prompts("test")
    n = base.config.num_hidden_layers
    models, trainers = {}, {}
    for name in DTYPES:
        torch.manual_seed(0)
        m = get_peft_model(copy.deepcopy(base).to(getattr(torch, name)), LoraConfig(
            r=16, lora_alpha=32, layers_to_transform=list(range(n - 8, n)),
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
        g = torch.Generator().manual_seed(1)
        for pn, p in m.named_parameters():
            if p.requires_grad and p.dtype != torch.float32:
                raise AssertionError(f"{pn} is {p.dtype}: LoRA weights must stay float32")
            if "lora_B" in pn:
                with torch.no_grad():
                    p.copy_(0.01 * torch.randn(p.shape, generator=g))
        models[name] = m
        trainers[name] = AttemptGRPOTrainer(
            m, tok, task, train, AttemptGRPOConfig(
                mode="cal", advantage=AdvantageConfig(scale="none", baseline="loo"),
                num_generations=a.num_generations, prompts_per_step=a.prompts_per_step,
                learning_rate=0.0, max_grad_norm=0.0, logprob_chunk_size=64),
            task.rollout_config(), seed=0)
    times = {(d, k): [] for d in DTYPES for k in ("ro", "up")}
    batches = {}

    def roll(name, seed):
        gen = torch.Generator(device=next(models[name].parameters()).device).manual_seed(seed)
        return multi_attempt_rollout(models[name], tok, train, task, task.rollout_config(),
                                     num_generations=a.num_generations, generator=gen)

    def update(name, b):
        from icml_cal_grpo.advantages import attempt_advantages, token_advantages

        adv = attempt_advantages(b.rewards, b.reached, group_size=a.num_generations,
                                 mode="cal", config=AdvantageConfig(scale="none"))
        trainers[name].update(b.input_ids, b.attention_mask, b.attempt_index,
                              token_advantages(adv, b.attempt_index))
        return torch.cat([p.grad.flatten().double() for p in models[name].parameters()
                          if p.requires_grad])

    for rep in range(a.reps + 1):
        for name in DTYPES:
            c0 = time.process_time()
            batches[name] = roll(name, rep)
            c1 = time.process_time()
            update(name, batches[name])
            c2 = time.process_time()
            if rep:
                times[(name, "ro")].append(c1 - c0)
                times[(name, "up")].append(c2 - c1)
    b32, b16 = batches["float32"], batches["bfloat16"]
    same_rollouts = sum(x == y for x, y in zip(b32.attempts, b16.attempts, strict=True))
    g = {name: update(name, b32) for name in DTYPES}
    cos = float(torch.nn.functional.cosine_similarity(g["float32"], g["bfloat16"], dim=0))
    rel = float((g["bfloat16"] - g["float32"]).norm() / g["float32"].norm())
    from icml_cal_grpo.loss import sequence_logprobs

    mask = b32.attempt_index[:, 1:] >= 0
    with torch.no_grad():
        lp = {name: sequence_logprobs(models[name], b32.input_ids, b32.attention_mask,
                                      positions=mask)[mask].double() for name in DTYPES}
    dlp = (lp["bfloat16"] - lp["float32"]).abs()
    ev, ev_cpu = {}, {}
    for name in DTYPES:
        c0 = time.process_time()
        with models[name].disable_adapter():
            ev[name] = evaluate(models[name], tok, task, test)
        ev_cpu[name] = time.process_time() - c0
    solved = {name: [float(0 < f <= 3) for f in ev[name]["first"]] for name in DTYPES}
    diff3 = stats.paired_diff_ci(solved["bfloat16"], solved["float32"], seed=0)
    mc = stats.mcnemar(solved["bfloat16"], solved["float32"])
    same_first = sum(x == y for x, y in zip(ev["float32"]["first"], ev["bfloat16"]["first"],
                                            strict=True)) / len(test)
    per_update = {d: st.median(times[(d, "ro")]) + st.median(times[(d, "up")]) for d in DTYPES}
    load = _load_avg()
    speed = results.make_table(
        f"CPU seconds per update ({a.num_generations} x {a.prompts_per_step} rollouts; median "
        f"of {a.reps} after a warm-up, dtypes alternating) and of the held-out evaluation "
        f"({len(test)} greedy rollouts); {a.threads} thread(s), load average "
        f"{clock.load0} at the start, {load[0] if load else None} at the end",
        ["dtype", "rollout CPU s", "update CPU s", "held-out evaluation CPU s",
         "rollout + update, / float32"],
        [[d, st.median(times[(d, "ro")]), st.median(times[(d, "up")]), ev_cpu[d],
          per_update[d] / per_update["float32"]] for d in DTYPES],
        name="speed", formats={"rollout CPU s": ".2f", "update CPU s": ".2f",
                               "held-out evaluation CPU s": ".1f",
                               "rollout + update, / float32": ".2f"})
    agree = results.make_table(
        "bfloat16 against float32 on the same inputs (LoRA weights float32 in both)",
        ["quantity", "float32", "bfloat16"],
        [[f"LoRA gradient on the same {len(b32.attempts)} rollouts: cosine to float32's", 1.0,
          cos],
         ["LoRA gradient: |g_bf16 - g_fp32| / |g_fp32|", 0.0, rel],
         ["attempt-token log-prob: mean |bf16 - fp32| (nats)", 0.0, float(dlp.mean())],
         ["attempt-token log-prob: max |bf16 - fp32| (nats)", 0.0, float(dlp.max())],
         ["sampled rollouts identical to float32's (same RNG seed)", 1.0,
          same_rollouts / len(b32.attempts)],
         ["base model, held-out Ver@1 (greedy)", ev["float32"]["ver@1"],
          ev["bfloat16"]["ver@1"]],
         ["base model, held-out Ver@3 (greedy)", ev["float32"]["ver@3"],
          ev["bfloat16"]["ver@3"]],
         ["base model, Ver@3 bf16 - fp32, paired over questions [95% CI]", None,
          diff3.to_dict()],
         ["base model, McNemar p (Ver@3 solved, bf16 vs fp32)", None, mc.p_value],
         ["base model, questions with the same attempt of first success", 1.0, same_first]],
        name="agreement", formats={"float32": ".4f", "bfloat16": ".4f"})
    for t in (speed, agree):
        print(results.render_table(t), "\n", flush=True)
    if a.out_results:
        command = ("python plugins/cal-grpo/benchmarks/real_task_arith.py "
                   + shlex.join(sys.argv[1:]))
        print("results file:", results.write(a.out_results, [speed, agree], command=command,
                                              plugin="cal-grpo", seeds=[0], quick=False,
                                              tolerance=DTYPE_TOLERANCE, clock=clock,
                                              threads=a.threads), file=sys.stderr)


# "train CPU s" is copied from the runs' records: a clock reading of the original runs.
TOLERANCE = {"train CPU s": {"timing": True, "why": "CPU seconds measured by the original runs"}}


def _sd(v):
    import statistics as st

    return st.stdev(v) if len(v) > 1 else float("nan")


def report(a) -> None:
    import statistics as st

    from icml import stats

    sd = _sd

    recs = [json.loads(x) for f in a.files for x in open(f) if x.strip()]
    curve_recs = [json.loads(x) for x in open(a.curve) if x.strip()] if a.curve else []
    base = next((r for r in recs + curve_recs if r["mode"] == "base"), None)
    step = a.step or max(r["step"] for r in recs if r["mode"] != "base")
    runs = {}
    for r in recs:
        if r["mode"] != "base" and r["step"] == step:
            runs[(r["mode"], r["seed"])] = r
    modes = [m for m in ("naive", "trajectory", "cal") if any(k[0] == m for k in runs)]
    seeds = sorted({k[1] for k in runs})
    full = [s for s in seeds if all((m, s) in runs for m in modes)]
    r0 = next(iter(runs.values()))
    setup = (f"SmolLM2-135M-Instruct + LoRA, {r0.get('dtype', 'float32')}, "
             f"G={r0['num_generations']} x {r0['prompts_per_step']} questions per update, "
             f"lr {r0['lr']}, {len(r0['first'])} held-out questions (greedy)")
    print(f"### after {step} updates; seeds with every arm: {full}; {setup}\n")
    print("| arm | seed | Ver@1 | Ver@2 | Ver@3 | Ver@3 - Ver@1 | repeats an answer | "
          "train CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    if base:
        print(f"| base (greedy, no seed) | - | {base['ver@1']:.3f} | {base['ver@2']:.3f} | "
              f"{base['ver@3']:.3f} | {base['ver@3'] - base['ver@1']:.3f} | "
              f"{base['repeat_rate']:.2f} | - |")
    for s in seeds:
        for m in modes:
            r = runs.get((m, s))
            if r:
                print(f"| {m} | {s} | {r['ver@1']:.3f} | {r['ver@2']:.3f} | {r['ver@3']:.3f} | "
                      f"{r['ver@3'] - r['ver@1']:.3f} | {r['repeat_rate']:.2f} | "
                      f"{r['train_cpu_s']:.0f} |")
    print("\n| arm | seeds | Ver@1 (mean +- sd) | Ver@3 (mean +- sd) | Ver@3 per seed |")
    print("|---|---|---|---|---|")
    for m in modes:
        v1 = [runs[(m, s)]["ver@1"] for s in full]
        v3 = [runs[(m, s)]["ver@3"] for s in full]
        print(f"| {m} | {len(full)} | {st.mean(v1):.3f} +- {sd(v1):.3f} | "
              f"{st.mean(v3):.3f} +- {sd(v3):.3f} | {', '.join(f'{x:.3f}' for x in v3)} |")
    print("\nPaired comparisons (same seeds, same held-out questions): per-seed differences, "
          "and the mean difference with a two-level bootstrap over seeds x questions "
          "(icml.stats.hierarchical_diff_ci, crossed design, 10,000 resamples, 95 % CI), "
          "which counts the seed-to-seed spread; MDE: the smallest true difference this "
          "design detects (alpha 0.05, power 0.8; icml.stats.mde_from_samples of the "
          "seed x question differences):\n")
    print("| comparison | metric | per-seed differences | mean [95 % CI, seeds x questions] | "
          "MDE | seeds ahead |")
    print("|---|---|---|---|---|---|")
    comp_rows = []
    for x, y in (("cal", "naive"), ("cal", "trajectory"), ("trajectory", "naive")):
        if x not in modes or y not in modes:
            continue
        for k in (1, 3):
            per_seed = [runs[(x, s)][f"ver@{k}"] - runs[(y, s)][f"ver@{k}"] for s in full]
            solved = {m: [[float(0 < f <= k) for f in runs[(m, s)]["first"]] for s in full]
                      for m in (x, y)}
            est = stats.hierarchical_diff_ci(solved[x], solved[y], n_boot=10_000, seed=0)
            cells = [[u - v for u, v in zip(rx, ry, strict=True)]
                     for rx, ry in zip(solved[x], solved[y], strict=True)]
            mde = stats.mde_from_samples(cells, seed=0)
            ahead = sum(1 for d in per_seed if d > 0)
            print(f"| {x} - {y} | Ver@{k} | {', '.join(f'{d:+.3f}' for d in per_seed)} | "
                  f"{est.value:+.3f} [{est.lo:+.3f}, {est.hi:+.3f}] | {mde:.3f} | "
                  f"{ahead}/{len(full)} |")
            verdict = ("no difference (CI includes 0)" if est.lo <= 0 <= est.hi else
                       "no difference (below the MDE)" if abs(est.value) < mde else
                       f"{x} {'ahead' if est.value > 0 else 'behind'} (CI excludes 0)")
            comp_rows.append([f"{x} - {y}", f"Ver@{k}",
                              ", ".join(f"{d:+.3f}" for d in per_seed), est.to_dict(), mde,
                              f"{ahead}/{len(full)}", verdict])
    if a.out_results:
        from icml import results

        seed_rows = [[m, len(full), stats.mean_ci([runs[(m, s)]["ver@1"] for s in full],
                                                  seed=0).to_dict(),
                      stats.hierarchical_ci([[float(0 < f <= 3) for f in runs[(m, s)]["first"]]
                                             for s in full], n_boot=10_000, seed=0).to_dict(),
                      ", ".join(f"{runs[(m, s)]['ver@3']:.3f}" for s in full)] for m in modes]
        seed_rows = [[r[0], r[1], r[3], r[4]] for r in seed_rows]
        per_rows = []
        if base:
            per_rows.append(["base (greedy, no seed)", None, base["ver@1"], base["ver@2"],
                             base["ver@3"], base["ver@3"] - base["ver@1"], base["repeat_rate"],
                             None])
        per_rows += [[m, s, runs[(m, s)]["ver@1"], runs[(m, s)]["ver@2"], runs[(m, s)]["ver@3"],
                      runs[(m, s)]["ver@3"] - runs[(m, s)]["ver@1"],
                      runs[(m, s)]["repeat_rate"], runs[(m, s)]["train_cpu_s"]]
                     for s in seeds for m in modes if (m, s) in runs]
        f3 = ".3f"
        tables = [
            results.make_table(
                f"Held-out, greedy, after {step} updates, per seed ({setup})",
                ["arm", "seed", "Ver@1", "Ver@2", "Ver@3", "Ver@3 - Ver@1",
                 "repeats an answer", "train CPU s"], per_rows, name="per_seed",
                formats={"Ver@1": f3, "Ver@2": f3, "Ver@3": f3, "Ver@3 - Ver@1": f3,
                         "repeats an answer": ".2f", "train CPU s": ".0f"}),
            results.make_table(
                f"Held-out Ver@3 after {step} updates (mean [95% CI, seeds x questions]; "
                f"{setup})",
                ["arm", "seeds", "Ver@3", "Ver@3 per seed"], seed_rows, name="arms",
                formats={"Ver@3": ".3f"}),
            results.make_table(
                f"Paired differences after {step} updates (same seeds and held-out questions; "
                f"{setup}): mean with a 95% bootstrap CI over seeds x questions "
                "(icml.stats.hierarchical_diff_ci, crossed, 10,000 resamples) and the minimum "
                "detectable effect (alpha 0.05, power 0.8, icml.stats.mde_from_samples)",
                ["comparison", "metric", "per-seed differences",
                 "mean [95% CI, seeds x questions]", "MDE", "seeds ahead", "verdict"],
                comp_rows,
                name="paired", formats={"mean [95% CI, seeds x questions]": "+.3f",
                                        "MDE": ".3f"})]
        width = max(len(r["train_ver@3"]) for r in runs.values())
        blocks = [(lo, min(lo + 5, width)) for lo in range(0, width, 5)]
        train_rows, late_col = [], None
        for m in modes:
            row = [m] + [st.mean([x for s in full for x in runs[(m, s)]["train_ver@3"][lo:hi]])
                         for lo, hi in blocks]
            if len(blocks) >= 4:
                # flattening: per seed, the last block's mean minus the mean of the block
                # two before it; mean over seeds with a bootstrap CI over seeds
                (a0, a1), (b0, b1) = blocks[-3], blocks[-1]
                late_col = f"updates {b0 + 1}-{b1} minus {a0 + 1}-{a1} [95% CI, seeds]"
                d = [st.mean(runs[(m, s)]["train_ver@3"][b0:b1])
                     - st.mean(runs[(m, s)]["train_ver@3"][a0:a1]) for s in full]
                row.append(stats.mean_ci(d, n_boot=10_000, seed=0).to_dict()
                           if len(full) > 1 else None)
            train_rows.append(row)
        cols = ["arm"] + [f"updates {lo + 1}-{hi}" for lo, hi in blocks]
        fmts = {f"updates {lo + 1}-{hi}": ".3f" for lo, hi in blocks}
        if late_col:
            cols.append(late_col)
            fmts[late_col] = "+.3f"
        tables.append(results.make_table(
            f"Training batches ({r0['num_generations'] * r0['prompts_per_step']} sampled "
            "rollouts per update, T=1): Ver@3 averaged over seeds and blocks of 5 updates",
            cols, train_rows, name="training", formats=fmts))
        crv = sorted((r for r in curve_recs if r["mode"] != "base"), key=lambda r: r["step"])
        if crv:
            rows = ([["0 (base)", base["ver@1"], base["ver@3"], base["repeat_rate"]]]
                    if base else [])
            for r in crv:
                if str(r["step"]) not in [str(x[0]) for x in rows]:
                    rows.append([r["step"], r["ver@1"], r["ver@3"], r["repeat_rate"]])
            tables.append(results.make_table(
                f"Learning curve ({crv[0]['mode']}, seed {crv[0]['seed']}, lr {crv[0]['lr']}; "
                "held-out, greedy)", ["updates", "Ver@1", "Ver@3", "repeats an answer"], rows,
                name="curve", formats={"Ver@1": ".3f", "Ver@3": ".3f",
                                       "repeats an answer": ".2f"}))
        command = ("python plugins/cal-grpo/benchmarks/real_task_arith.py "
                   + shlex.join(sys.argv[1:]))
        print("results file:", results.write(a.out_results, tables, command=command,
                                              plugin="cal-grpo", seeds=full, quick=True,
                                              tolerance=TOLERANCE),
              file=sys.stderr)
    print(f"\nTraining batches ({r0['num_generations'] * r0['prompts_per_step']} sampled "
          "rollouts per update, T=1), Ver@3 averaged over "
          "seeds and blocks of 5 updates:\n")
    width = max(len(r["train_ver@3"]) for r in runs.values())
    blocks = [(lo, min(lo + 5, width)) for lo in range(0, width, 5)]
    print("| arm | " + " | ".join(f"updates {lo + 1}-{hi}" for lo, hi in blocks) + " |")
    print("|---|" + "---|" * len(blocks))
    for m in modes:
        cells = []
        for lo, hi in blocks:
            v = [x for s in full for x in runs[(m, s)]["train_ver@3"][lo:hi]]
            cells.append(f"{st.mean(v):.3f}")
        print(f"| {m} | " + " | ".join(cells) + " |")
    curve = sorted((r for r in curve_recs if r["mode"] != "base"), key=lambda r: r["step"])
    if curve:
        c0 = curve[0]
        print(f"\nLearning curve ({c0['mode']}, seed {c0['seed']}, lr {c0['lr']}; held-out, "
              "greedy):\n")
        print("| updates | Ver@1 | Ver@3 | repeats an answer |")
        print("|---|---|---|---|")
        if base:
            print(f"| 0 | {base['ver@1']:.3f} | {base['ver@3']:.3f} | "
                  f"{base['repeat_rate']:.2f} |")
        seen = set()
        for r in curve:
            if r["step"] not in seen:
                seen.add(r["step"])
                print(f"| {r['step']} | {r['ver@1']:.3f} | {r['ver@3']:.3f} | "
                      f"{r['repeat_rate']:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--modes", default="naive,trajectory,cal")
    r.add_argument("--seeds", default="0,1,2")
    r.add_argument("--steps", type=int, default=20)
    r.add_argument("--eval-at", default="", help="extra steps to evaluate at (comma list)")
    r.add_argument("--num-generations", type=int, default=4)
    r.add_argument("--prompts-per-step", type=int, default=4)
    r.add_argument("--lr", type=float, default=1e-3)
    r.add_argument("--lora-r", type=int, default=16)
    r.add_argument("--lora-layers", type=int, default=8, help="LoRA on the last N layers")
    r.add_argument("--n-train", type=int, default=400)
    r.add_argument("--n-test", type=int, default=240)
    r.add_argument("--base-eval", action=argparse.BooleanOptionalAction, default=True)
    r.add_argument("--out", default="real_task_arith.jsonl")
    p = sub.add_parser("report")
    p.add_argument("files", nargs="+")
    p.add_argument("--step", type=int, default=0, help="updates to compare at (default: last)")
    p.add_argument("--curve", default="", help="the learning-curve run's jsonl (one arm)")
    p.add_argument("--out-results", default="", help="also write the Ver@3 and paired tables "
                   "as an icml.results file (the README renders it)")
    f = sub.add_parser("profile")
    f.add_argument("--reps", type=int, default=2)
    f.add_argument("--out-results", default="", help="also write the table as an icml.results "
                   "file (the README renders it)")
    d = sub.add_parser("dtype-check", help="bf16 vs fp32 on the same inputs, and their cost")
    d.add_argument("--reps", type=int, default=2)
    d.add_argument("--num-generations", type=int, default=4)
    d.add_argument("--prompts-per-step", type=int, default=4)
    d.add_argument("--n-train", type=int, default=400)
    d.add_argument("--n-test", type=int, default=240)
    d.add_argument("--out-results", default="")
    for q in (r, d):
        q.add_argument("--device", default="cpu", help="torch device (cpu, cuda, ...)")
        q.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    r.add_argument("--dtype", default="float32", choices=DTYPES,
                   help="model weights (LoRA weights stay float32)")
    a = ap.parse_args()
    if getattr(a, "threads", 1) < 1:
        ap.error(f"--threads must be >= 1, got {a.threads}")
    {"run": run, "report": report, "profile": profile, "dtype-check": dtype_check}[a.cmd](a)


if __name__ == "__main__":
    main()
