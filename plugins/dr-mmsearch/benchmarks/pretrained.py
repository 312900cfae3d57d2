"""The arms on the real pretrained model (SmolLM2-135M-Instruct via ``icml.models.
load_pretrained``), at a budget a loaded 2-core CPU can afford: a short supervised warm start on
the training questions' demonstrations (half of the image questions answer prematurely, as in
the default experiment), then a few GRPO steps per arm, each arm from the same warm start, and
an evaluation on the held-out companies' questions (never seen in a model turn) and on training
image questions. Only the last ``--train-layers`` transformer blocks (and the final norm) are
trained; the rest of the model is frozen. Results are written after every arm.

    OMP_NUM_THREADS=1 python plugins/dr-mmsearch/benchmarks/pretrained.py \\
        --arms baseline proximity both --steps 8 --out pretrained.json \\
        --out-results plugins/dr-mmsearch/results/pretrained.json

``--out-results`` also writes the stages' held-out evaluation as an ``icml.results`` file (its
command: this invocation, run from the repository root), rewritten after every stage.
"""

from __future__ import annotations

import argparse
import copy
import json
import shlex
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


STAGE_COLS = [("held-out acc 2-hop", "heldout_accuracy_hop2"),
              ("held-out acc 3-hop", "heldout_accuracy_hop3"), ("turns", "heldout_turns"),
              ("format ok", "heldout_format_ok"), ("premature", "heldout_premature_rate"),
              ("collapse 3-hop", "heldout_collapse_rate")]


def stage_table(out: dict) -> dict:
    """The held-out evaluation of every stage run so far (zero-shot, warm start, each arm after
    GRPO) as an ``icml.results`` table; ``eval s`` is a clock reading."""
    from icml import results

    c = out["config"]
    stages = []
    if "zero_shot" in out:
        stages.append(("zero-shot, instruction only", out["zero_shot"]))
    if "warm_start" in out:
        stages.append((f"after the warm start ({c['warm_steps']} SFT steps)", out["warm_start"]))
    for arm, r in out["arms"].items():
        stages.append((f"+ {c['steps']} GRPO steps, {arm}", r["eval"]))
    cols = ["stage", "held-out rollouts"] + [col for col, _ in STAGE_COLS] + ["eval s"]
    rows = [[name, res.get("heldout_rollouts")] + [res.get(k) for _, k in STAGE_COLS]
            + [res.get("eval_seconds")] for name, res in stages]
    fmt = {col: ".2f" for col, _ in STAGE_COLS} | {"eval s": ".0f"}
    return results.make_table(
        f"{c['model']}, seed {c['seed']}, {c['eval_generations']} evaluation rollout(s) per "
        "held-out question", cols, rows, name="pretrained", formats=fmt)


def main() -> None:
    from icml_dr_mmsearch.config import WorldConfig
    from icml_dr_mmsearch.env import DEFAULT_INSTRUCTION
    from icml_dr_mmsearch.experiment import ARMS, build_world, evaluate_policy, warm_start_data
    from icml_dr_mmsearch.grpo import (
        AdvantageConfig,
        GRPOConfig,
        RewardConfig,
        SearchGRPOTrainer,
        warm_start,
    )
    from icml_dr_mmsearch.rollout import RolloutConfig
    from icml_dr_mmsearch.tokenizer import check_tokenizer

    from icml.models import load_pretrained

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--arms", nargs="+", default=["baseline", "proximity", "both"])
    ap.add_argument("--mu", default="hop", choices=("ema", "hop", "fixed"))
    ap.add_argument("--train-layers", type=int, default=4)
    ap.add_argument("--warm-steps", type=int, default=40)
    ap.add_argument("--warm-batch", type=int, default=4)
    ap.add_argument("--warm-lr", type=float, default=3e-4)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompts-per-step", type=int, default=2)
    ap.add_argument("--num-generations", type=int, default=4)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--beta", type=float, default=0.0)
    ap.add_argument("--eval-generations", type=int, default=2)
    ap.add_argument("--eval-train", type=int, default=6,
                    help="training 3-hop questions also evaluated (0 = none)")
    ap.add_argument("--max-turn-tokens", type=int, default=40)
    ap.add_argument("--holdout", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-zero-shot", action="store_true",
                    help="skip the evaluation of the model before the warm start")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default=str(HERE / "pretrained.json"))
    ap.add_argument("--out-results", default=None,
                    help="also write the stages' held-out table as an icml.results file")
    a = ap.parse_args()
    from icml import results

    clock = results.Clock()
    threads = results.apply_threads(1)
    torch.manual_seed(a.seed)
    t0 = time.perf_counter()

    model, tok = load_pretrained(a.model, device=a.device)
    check_tokenizer(tok)
    kb, env, _ = build_world(WorldConfig(n_entities=60, world_seed=0))
    env.instruction = DEFAULT_INSTRUCTION
    train_qs, held = kb.split(a.holdout, seed=0)
    # 1-hop questions are memorisation questions (no tool answers them in the demonstrations);
    # a 135M model does not memorise them in a few steps: image questions only
    train_img = [q for q in train_qs if q.has_image]
    train_eval = [q for q in train_img if q.hops == 3][:a.eval_train]
    if not train_eval and not held:
        raise SystemExit("nothing to evaluate: use --eval-train > 0 or --holdout > 0")
    blocks = model.model.layers
    model.requires_grad_(False)
    for blk in blocks[len(blocks) - a.train_layers:]:
        blk.requires_grad_(True)
    model.model.norm.requires_grad_(True)
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log(f"{a.model}: {len(blocks)} blocks, training the last {a.train_layers} "
        f"({n_train / 1e6:.1f} M parameters); {len(train_img)} training image questions, "
        f"{len(held)} held-out")
    rc = RolloutConfig(max_turn_tokens=a.max_turn_tokens, temperature=1.0)
    out: dict = {"config": vars(a), "machine": "loaded 2-core CPU (shared by eight sessions), "
                 "torch threads 1", "arms": {}}
    path = Path(a.out)

    def evaluate(m: torch.nn.Module, name: str) -> dict:
        t = time.perf_counter()
        res = evaluate_policy(m, tok, env, train_eval, num_generations=a.eval_generations,
                              seed=a.seed + 7, rollout=rc, held_out=held)
        res["eval_seconds"] = time.perf_counter() - t
        res["heldout_rollouts"] = a.eval_generations * len(held)
        log(f"{name}: " + json.dumps({k: round(v, 3) for k, v in res.items()
                                      if "acc" in k or "turns" in k or "collapse" in k
                                      or "premature" in k or "format" in k}))
        return res

    def save() -> None:
        out["seconds"] = time.perf_counter() - t0
        path.write_text(json.dumps(out, indent=1))
        if a.out_results:
            command = ("OMP_NUM_THREADS=1 python plugins/dr-mmsearch/benchmarks/pretrained.py "
                       + shlex.join(sys.argv[1:]))
            results.write(a.out_results, [stage_table(out)], command=command,
                          plugin="dr-mmsearch", seeds=[a.seed], quick=False, clock=clock,
                          threads=threads,
                          tolerance={"eval s": {"timing": True,
                                                "why": "clock reading on a shared machine"}})

    if not a.skip_zero_shot:
        out["zero_shot"] = evaluate(model, "zero-shot (instruction only)")
        save()
    demos = warm_start_data(env, train_img, 0.5, a.seed)
    t = time.perf_counter()
    loss = warm_start(model, tok, env, demos, steps=a.warm_steps, batch_size=a.warm_batch,
                      learning_rate=a.warm_lr, seed=a.seed,
                      callback=lambda s, v: log(f"warm step {s}: loss {v:.3f}") if s % 5 == 0
                      else None)
    out["warm_loss"] = loss
    out["warm_seconds"] = time.perf_counter() - t
    out["warm_start"] = evaluate(model, "warm start")
    save()
    for arm in a.arms:
        rkind, akind = ARMS[arm]
        m = copy.deepcopy(model)
        trainer = SearchGRPOTrainer(
            m, tok, env, train_img, reward=RewardConfig(kind=rkind, mu=a.mu),
            advantage=AdvantageConfig(kind=akind),
            args=GRPOConfig(num_generations=a.num_generations,
                            prompts_per_step=a.prompts_per_step, learning_rate=a.lr,
                            beta=a.beta, hop_mix=(0.0, 0.5, 0.5)),
            rollout=rc, seed=a.seed + 1)
        t = time.perf_counter()
        trainer.train(a.steps, callback=lambda s, mm, arm=arm: log(
            f"{arm} step {s}: reward {mm['reward']:.3f} turns {mm['turns']:.2f} "
            f"acc {mm['accuracy']:.2f}"))
        secs = time.perf_counter() - t
        res = evaluate(trainer.accelerator.unwrap_model(trainer.model), arm)
        res["train_seconds"] = secs
        out["arms"][arm] = {"eval": res, "curve": [h.metrics for h in trainer.history]}
        save()
        del trainer, m
    log(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
