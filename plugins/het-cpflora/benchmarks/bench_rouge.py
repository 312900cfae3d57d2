"""Federated instruction tuning on the real SmolLM2-135M-Instruct with LoRA, clients differing by
task category (``icml_het_cpflora.instruct``: generated antonyms / plurals / past tense /
number words, one category per client, no client mark), scored by ROUGE-1 and ROUGE-L of
greedy answers on held-out prompts of the client's own category (personalization) and of the
other clients' categories (generalization). Every strategy, several seeds; CIs over seeds and
test prompts (``icml.stats.hierarchical_ci``), paired claims (``hierarchical_diff_ci``).

    python plugins/het-cpflora/benchmarks/bench_rouge.py --seeds 0 1 2 \\
        --out-results plugins/het-cpflora/results/bench_rouge.json
"""

from __future__ import annotations

import argparse
import copy
import random
import shlex
import sys
import time
from typing import Any

import numpy as np
from icml_het_cpflora.config import FederationConfig, HetCPFLoRAConfig, LoRAConfig, StrategyConfig
from icml_het_cpflora.instruct import (
    CATEGORIES,
    encode_train,
    generate,
    make_instructions,
    prompt_text,
    rouge1,
    rougeL,
)
from icml_het_cpflora.mixer import OODMixer, subspace_weights
from icml_het_cpflora.ranks import ClientRankSpec
from icml_het_cpflora.simulator import ClientDataset, simulate
from icml_het_cpflora.strategies import STRATEGIES, make_strategy

from icml import results as R
from icml import stats
from icml.models import load_pretrained
from icml.seeding import seed_everything

TEST_SEED = 12345   # the held-out prompts are the same under every training seed (crossed)


def build_data(tok: Any, seed: int, train_size: int, test_size: int, n_clients: int):
    rng_test = random.Random(TEST_SEED)
    tests = {c: make_instructions(c, test_size, rng_test) for c in CATEGORIES[:n_clients]}
    rng = random.Random(seed + 1)
    train = []
    for i in range(n_clients):
        cat = CATEGORIES[i]
        exs = make_instructions(cat, train_size, rng,
                                exclude={e.instruction for e in tests[cat]})
        enc = encode_train(tok, exs)
        train.append((ClientDataset(enc["input_ids"], enc["labels"], enc["attention_mask"],
                                    enc["prompt_ids"]), enc["prompt_mask"]))
    return train, tests


def eval_sets(tests: dict[str, list], i: int, n_clients: int) -> tuple[list, list]:
    """Client i's own held-out prompts and as many from the other clients' categories
    (round-robin over those categories)."""
    own = tests[CATEGORIES[i]]
    others = [tests[CATEGORIES[j]] for j in range(n_clients) if j != i]
    other = [others[k % len(others)][k // len(others)] for k in range(len(own))]
    return own, other


def score(preds: list[str], refs: list) -> tuple[list[float], list[float]]:
    return ([rouge1(p, r.output) for p, r in zip(preds, refs)],
            [rougeL(p, r.output) for p, r in zip(preds, refs)])


def run_one(base, tok, name, specs, train, tests, fed, lora, strat_cfg, seed, max_new,
            ppl_norm):
    """One strategy, one seed: {arm: {"own": (r1, rl), "other": (r1, rl)}} with per-prompt
    lists concatenated over clients, and bytes/round (up + down, all clients)."""
    import torch

    data = [d for d, _ in train]
    t0 = time.perf_counter()
    res = simulate(copy.deepcopy(base), data, specs, make_strategy(name, strat_cfg, lora),
                   fed, lora, seed=seed)
    train_s = time.perf_counter() - t0
    model = res.model
    arms: dict[str, dict[str, Any]] = {}
    names = ["het-cpflora (fixed)", "het-cpflora (OOD)"] if name == "het-cpflora" else [name]
    for arm in names:
        arms[arm] = {"own": ([], []), "other": ([], [])}
    n = len(specs)
    for i in range(n):
        model.set_adapter(res.adapter(i))
        own, other = eval_sets(tests, i, n)
        prompts = [prompt_text(e) for e in own + other]
        preds = generate(model, tok, prompts, max_new_tokens=max_new)
        a = arms[names[0]]
        for part, sl in (("own", slice(0, len(own))), ("other", slice(len(own), None))):
            r1, rl = score(preds[sl], (own + other)[sl])
            a[part][0].extend(r1)
            a[part][1].extend(rl)
        if name == "het-cpflora":
            tr, pmask = train[i]
            mixer = OODMixer.fit(model, tr.prompt_ids, res.specs[i], pmask, norm=ppl_norm)
            enc = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
            ood_preds = []
            for p, ids in zip(prompts, enc):
                (w_s, w_p), = mixer.weights(model, torch.tensor([ids], device=model.device))
                with subspace_weights(model, res.adapter(i), res.specs[i], w_s, w_p):
                    ood_preds += generate(model, tok, [p], max_new_tokens=max_new)
            a = arms["het-cpflora (OOD)"]
            for part, sl in (("own", slice(0, len(own))), ("other", slice(len(own), None))):
                r1, rl = score(ood_preds[sl], (own + other)[sl])
                a[part][0].extend(r1)
                a[part][1].extend(rl)
    rounds = max(len(res.bytes_up), 1)
    bpr = (sum(map(sum, res.bytes_up)) + sum(map(sum, res.bytes_down))) / rounds
    return arms, bpr, train_s, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--local-steps", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--train-size", type=int, default=16)
    ap.add_argument("--test-size", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=14)
    ap.add_argument("--r-shared", type=int, nargs="+", default=[2, 4, 3])
    ap.add_argument("--r-personal", type=int, nargs="+", default=[2, 2, 1])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype-check", default="",
                    help="also run this strategy at seed --seeds[0] in float32 and report the "
                         "difference to the --dtype run (bf16 agreement check)")
    ap.add_argument("--out-results", default="")
    args = ap.parse_args()
    import torch

    clock = R.Clock()
    threads = R.apply_threads(1)
    n = len(args.r_shared)
    if len(args.r_personal) != n or not 1 <= n <= len(CATEGORIES):
        raise SystemExit(f"--r-shared/--r-personal: one entry per client, 1..{len(CATEGORIES)}")
    specs = [ClientRankSpec(s, p) for s, p in zip(args.r_shared, args.r_personal)]
    fed = FederationConfig(rounds=args.rounds, local_steps=args.local_steps, lr=args.lr,
                           batch_size=args.batch_size)
    lora = LoRAConfig()
    het = HetCPFLoRAConfig()
    strat_cfg = StrategyConfig(het_cpflora=het)
    dtypes = {"bfloat16": torch.bfloat16, "float32": torch.float32}
    bases = {}

    def base_for(dt):
        if dt not in bases:
            bases[dt] = load_pretrained("smollm2-135m-instruct", dtype=dtypes[dt],
                                        device=args.device)
        return bases[dt]

    base, tok = base_for(args.dtype)
    cells: dict[str, dict[str, list]] = {}     # arm -> metric -> per-seed lists
    bytes_row: dict[str, float] = {}
    secs: dict[str, list[float]] = {}
    per_run = []
    for seed in args.seeds:
        seed_everything(seed)
        train, tests = build_data(tok, seed, args.train_size, args.test_size, n)
        for name in args.strategies:
            arms, bpr, train_s, total_s = run_one(base, tok, name, specs, train, tests, fed,
                                                  lora, strat_cfg, seed, args.max_new_tokens,
                                                  het.ppl_norm)
            per_run.append(f"seed {seed} {name}: train {train_s:.0f} s, total {total_s:.0f} s")
            print(per_run[-1], flush=True)
            for arm, d in arms.items():
                c = cells.setdefault(arm, {k: [] for k in ("own_r1", "own_rl", "oth_r1",
                                                           "oth_rl")})
                c["own_r1"].append(d["own"][0])
                c["own_rl"].append(d["own"][1])
                c["oth_r1"].append(d["other"][0])
                c["oth_rl"].append(d["other"][1])
                bytes_row[arm] = bpr
                secs.setdefault(arm, []).append(total_s)
                print(f"  {arm}: own R1 {np.mean(d['own'][0]):.3f} RL "
                      f"{np.mean(d['own'][1]):.3f} | other R1 {np.mean(d['other'][0]):.3f} "
                      f"RL {np.mean(d['other'][1]):.3f} | {bpr:.0f} B/round", flush=True)
    ref_bytes = bytes_row.get("fedit") or None
    rows = []
    for arm, c in cells.items():
        rows.append([arm, stats.hierarchical_ci(c["own_r1"]),
                     stats.hierarchical_ci(c["own_rl"]),
                     stats.mde_from_samples(c["own_rl"]),
                     stats.hierarchical_ci(c["oth_r1"]),
                     stats.hierarchical_ci(c["oth_rl"]),
                     stats.mde_from_samples(c["oth_rl"]),
                     bytes_row[arm], bytes_row[arm] / ref_bytes if ref_bytes else float("nan"),
                     float(np.mean(secs[arm]))])
    k = len(args.seeds)
    main_t = R.make_table(
        f"SmolLM2-135M-Instruct ({args.dtype}), {n} clients one task category each, "
        f"{args.rounds} rounds x {args.local_steps} local steps (batch {args.batch_size}), "
        f"greedy answers of <= {args.max_new_tokens} tokens on {args.test_size} held-out "
        f"prompts per client of its own category and {args.test_size} of the others'; "
        f"ROUGE F-measure, mean over {k} seeds x {n * args.test_size} prompts [95% CI over "
        "seeds and prompts]; MDE vs a fixed value",
        ["strategy", "own ROUGE-1", "own ROUGE-L", "own RL MDE", "other ROUGE-1",
         "other ROUGE-L", "other RL MDE", "bytes/round", "vs FedIT", "s/run"], rows,
        name="rouge", formats={"own ROUGE-1": ".3f", "own ROUGE-L": ".3f", "own RL MDE": ".3f",
                               "other ROUGE-1": ".3f", "other ROUGE-L": ".3f",
                               "other RL MDE": ".3f", "bytes/round": ".0f", "vs FedIT": ".2f",
                               "s/run": ".0f"})
    claims = []
    het_arm = "het-cpflora (OOD)"

    def claim(what, a, b, key):
        if a in cells and b in cells:
            d = (np.asarray(cells[a][key]) - np.asarray(cells[b][key])).tolist()
            est = stats.hierarchical_diff_ci(cells[a][key], cells[b][key])
            mde = stats.mde_from_samples(d)
            verdict = ("no difference detected" if est.lo <= 0 <= est.hi else
                       (f"{a} higher" if est.value > 0 else f"{b} higher"))
            claims.append([what, f"{a} - {b}", key.replace("own_", "own ").replace(
                "oth_", "other ").replace("r1", "ROUGE-1").replace("rl", "ROUGE-L"),
                est, mde, verdict])

    claim("personalization vs FedIT", het_arm, "fedit", "own_rl")
    claim("personalization vs FedIT", het_arm, "fedit", "own_r1")
    claim("generalization vs local-only", het_arm, "local", "oth_rl")
    claim("generalization vs local-only", het_arm, "local", "oth_r1")
    claim("OOD mixer vs fixed weights (others)", het_arm, "het-cpflora (fixed)", "oth_rl")
    claim("OOD mixer vs fixed weights (own)", het_arm, "het-cpflora (fixed)", "own_rl")
    claim("personalization vs FlexLoRA", het_arm, "flexlora", "own_rl")
    claim("personalization vs FedSA-LoRA", het_arm, "fedsa-lora", "own_rl")
    claims_t = R.make_table(
        "The paper's claims as paired differences (same seeds, same prompts): mean [95% CI "
        "over seeds and prompts], MDE of the paired difference (80% power)",
        ["claim", "difference", "metric", "estimate", "MDE", "verdict"], claims,
        name="claims", formats={"estimate": ".3f", "MDE": ".3f"})
    tables = [main_t, claims_t]
    if args.dtype_check:
        seed = args.seeds[0]
        rows_dt = []
        for dt in ("float32",):
            b32, _ = base_for(dt)
            train, tests = build_data(tok, seed, args.train_size, args.test_size, n)
            arms, _, _, _ = run_one(b32, tok, args.dtype_check, specs, train, tests, fed, lora,
                                    strat_cfg, seed, args.max_new_tokens, het.ppl_norm)
            for arm, d in arms.items():
                i = args.seeds.index(seed)
                for part, key in (("own", "own_rl"), ("other", "oth_rl")):
                    lo_dt = cells[arm][key][i]
                    rows_dt.append([arm, part, float(np.mean(d[part][1])),
                                    float(np.mean(lo_dt)),
                                    stats.paired_diff_ci(lo_dt, d[part][1])])
        tables.append(R.make_table(
            f"{args.dtype} vs float32, seed {seed}, ROUGE-L (same prompts): float32 mean, "
            f"{args.dtype} mean, paired difference {args.dtype} - float32 [95% CI over "
            "prompts]", ["arm", "prompts", "float32 ROUGE-L", f"{args.dtype} ROUGE-L",
                         "difference"], rows_dt, name="dtype",
            formats={"float32 ROUGE-L": ".3f", f"{args.dtype} ROUGE-L": ".3f",
                     "difference": ".3f"}))
    for t in tables:
        print(t["title"])
        for r in t["rows"]:
            print("  ", r)
    print("\n".join(per_run))
    if args.out_results:
        R.write(args.out_results, tables, plugin="het-cpflora", seeds=list(args.seeds),
                clock=clock, threads=threads, quick=False,
                tolerance={"s/run": {"timing": True, "why": "wall time of one strategy x seed "
                                     "(train + evaluation) on a shared 2-core machine"}},
                command=" ".join(["python", "plugins/het-cpflora/benchmarks/bench_rouge.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]))


if __name__ == "__main__":
    main()
