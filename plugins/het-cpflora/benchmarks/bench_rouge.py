"""Federated instruction tuning on the real SmolLM2-135M-Instruct with LoRA, clients differing by
task category (``icml_het_cpflora.instruct``: generated antonyms / plurals / past tense /
number words, one category per client, no client mark), scored by ROUGE-1 and ROUGE-L of
greedy answers on held-out prompts of the client's own category (personalization) and of the
other clients' categories (generalization). Every strategy, several seeds; CIs over seeds and
test prompts (``icml.stats.hierarchical_ci``), paired claims (``hierarchical_diff_ci``).

    python plugins/het-cpflora/benchmarks/bench_rouge.py \\
        --design plugins/het-cpflora/benchmarks/rouge_design.json \\
        --out-results plugins/het-cpflora/results/bench_rouge.json

``--design`` reads the pre-registered settings and primary endpoints (a JSON file committed
before the run; command-line flags still override single settings). The results file keeps
every per-prompt score (``metrics.cells``) so the variance can be split into its seed and
prompt parts afterwards (``variance_components``), and the design it ran.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
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
from icml_het_cpflora.mixer import OODMixer, per_prompt_subspace_weights
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


def right_padded(tok: Any, prompts: list[str]):
    """Right-padded prompt ids and mask (the OOD mixer's perplexity is position-exact with
    right padding, as for the training prompts it is fitted on)."""
    import torch

    enc = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    L = max(map(len, enc))
    ids = torch.tensor([e + [pad] * (L - len(e)) for e in enc])
    mask = torch.tensor([[1] * len(e) + [0] * (L - len(e)) for e in enc])
    return ids, mask


def variance_components(d: Any) -> dict[str, float]:
    """Two-way random-effects split of a seeds x items table ``d`` (e.g. paired differences):
    ``seed`` (between-seed variance of the true per-seed means), ``item`` (between-item
    variance of the true per-item means), ``resid`` (seed x item interaction + noise), from the
    ANOVA mean squares, negative estimates set to 0. Needs >= 2 seeds and >= 2 items."""
    d = np.asarray(d, dtype=float)
    S, n_items = d.shape
    if S < 2 or n_items < 2:
        raise ValueError(f"variance_components needs >= 2 seeds and items, got {d.shape}")
    g, rm, cm = d.mean(), d.mean(1), d.mean(0)
    ms_s = n_items * float(((rm - g) ** 2).sum()) / (S - 1)
    ms_i = S * float(((cm - g) ** 2).sum()) / (n_items - 1)
    ms_e = float(((d - rm[:, None] - cm[None, :] + g) ** 2).sum()) / ((S - 1) * (n_items - 1))
    return {"seed": max((ms_s - ms_e) / n_items, 0.0), "item": max((ms_i - ms_e) / S, 0.0),
            "resid": ms_e}


def projected_mde(comp: dict[str, float], seeds: int, items: int) -> float:
    """MDE (80% power, two-sided 5%) of the mean of a crossed seeds x items design from
    :func:`variance_components`: se^2 = seed/S + item/I + 2 resid/(S I), the variance the
    crossed bootstrap of ``icml.stats.hierarchical_ci`` estimates (row means and column means
    each carry the residual once)."""
    se2 = comp["seed"] / seeds + comp["item"] / items + 2 * comp["resid"] / (seeds * items)
    return stats.mde(math.sqrt(se2))


def prompts_needed(comp: dict[str, float], seeds: int, target: float) -> float:
    """Prompts per seed at which :func:`projected_mde` with ``seeds`` seeds reaches ``target``
    (``inf`` when the seed part alone is already above it)."""
    se2 = (target / stats.mde(1.0)) ** 2 - comp["seed"] / seeds
    if se2 <= 0:
        return math.inf
    return math.ceil((comp["item"] + 2 * comp["resid"] / seeds) / se2)


def score(preds: list[str], refs: list) -> tuple[list[float], list[float]]:
    return ([rouge1(p, r.output) for p, r in zip(preds, refs)],
            [rougeL(p, r.output) for p, r in zip(preds, refs)])


def run_one(base, tok, name, specs, train, tests, fed, lora, strat_cfg, seed, max_new,
            ppl_norm):
    """One strategy, one seed: {arm: {"own": (r1, rl), "other": (r1, rl)}} with per-prompt
    lists concatenated over clients, and bytes/round (up + down, all clients)."""
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
            ids, mask = right_padded(tok, prompts)
            weights = mixer.weights(model, ids.to(model.device), mask.to(model.device))
            ood_preds = generate(
                model, tok, prompts, max_new_tokens=max_new,
                batch_context=lambda sl, i=i, weights=weights: per_prompt_subspace_weights(
                    model, res.adapter(i), res.specs[i], weights[sl]))
            a = arms["het-cpflora (OOD)"]
            for part, sl in (("own", slice(0, len(own))), ("other", slice(len(own), None))):
                r1, rl = score(ood_preds[sl], (own + other)[sl])
                a[part][0].extend(r1)
                a[part][1].extend(rl)
                a.setdefault("w_p_" + part, []).extend(w for _, w in weights[sl])
    rounds = max(len(res.bytes_up), 1)
    bpr = (sum(map(sum, res.bytes_up)) + sum(map(sum, res.bytes_down))) / rounds
    return arms, bpr, train_s, time.perf_counter() - t0


#: The claims as paired differences: (label, arm a, arm b, cell key). The design file names
#: which of them are primary (pre-registered endpoints); the others are secondary.
CLAIMS = [
    ("personalization vs FedIT", "het-cpflora (OOD)", "fedit", "own_r1"),
    ("generalization vs FedIT", "het-cpflora (OOD)", "fedit", "oth_r1"),
    ("generalization vs local-only", "het-cpflora (OOD)", "local", "oth_r1"),
    ("personalization vs FedIT", "het-cpflora (OOD)", "fedit", "own_rl"),
    ("generalization vs FedIT", "het-cpflora (OOD)", "fedit", "oth_rl"),
    ("generalization vs local-only", "het-cpflora (OOD)", "local", "oth_rl"),
    ("OOD mixer vs fixed weights (own)", "het-cpflora (OOD)", "het-cpflora (fixed)", "own_r1"),
    ("OOD mixer vs fixed weights (others)", "het-cpflora (OOD)", "het-cpflora (fixed)",
     "oth_r1"),
    ("personalization vs FlexLoRA", "het-cpflora (OOD)", "flexlora", "own_r1"),
    ("personalization vs FedSA-LoRA", "het-cpflora (OOD)", "fedsa-lora", "own_r1"),
    ("personalization vs local-only", "het-cpflora (OOD)", "local", "own_r1"),
    ("fixed weights: personalization vs FedIT", "het-cpflora (fixed)", "fedit", "own_r1"),
]
METRIC = {"own_r1": "own ROUGE-1", "own_rl": "own ROUGE-L", "oth_r1": "other ROUGE-1",
          "oth_rl": "other ROUGE-L"}


def claim_id(a: str, b: str, key: str) -> str:
    """The endpoint's name in the design file, e.g. ``het-cpflora (OOD) - fedit: own_r1``."""
    return f"{a} - {b}: {key}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--design", default="",
                    help="JSON file of pre-registered settings (keys = these flags' dests) and "
                         "'primary' endpoints; flags given on the command line override it")
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
    pre, _ = ap.parse_known_args(argv)
    design: dict[str, Any] = {}
    if pre.design:
        with open(pre.design, encoding="utf-8") as f:
            design = json.load(f)
        known = {a.dest for a in ap._actions}
        settings = design.get("settings", {})
        bad = sorted(set(settings) - known)
        if bad:
            raise SystemExit(f"--design {pre.design}: unknown settings {bad}")
        ap.set_defaults(**settings)
    args = ap.parse_args(argv)
    args.design_spec = design
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
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
    w_p: dict[str, list] = {"own": [], "other": []}
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
                c = cells.setdefault(arm, {k: [] for k in METRIC})
                c["own_r1"].append(d["own"][0])
                c["own_rl"].append(d["own"][1])
                c["oth_r1"].append(d["other"][0])
                c["oth_rl"].append(d["other"][1])
                if "w_p_own" in d:
                    w_p["own"].append(d["w_p_own"])
                    w_p["other"].append(d["w_p_other"])
                bytes_row[arm] = bpr
                secs.setdefault(arm, []).append(total_s)
                print(f"  {arm}: own R1 {np.mean(d['own'][0]):.3f} RL "
                      f"{np.mean(d['own'][1]):.3f} | other R1 {np.mean(d['other'][0]):.3f} "
                      f"RL {np.mean(d['other'][1]):.3f} | {bpr:.0f} B/round", flush=True)
    ref_bytes = bytes_row.get("fedit") or None
    rows = []
    for arm, c in cells.items():
        rows.append([arm, stats.hierarchical_ci(c["own_r1"]),
                     stats.mde_from_samples(c["own_r1"]),
                     stats.hierarchical_ci(c["own_rl"]),
                     stats.hierarchical_ci(c["oth_r1"]),
                     stats.mde_from_samples(c["oth_r1"]),
                     stats.hierarchical_ci(c["oth_rl"]),
                     bytes_row[arm], bytes_row[arm] / ref_bytes if ref_bytes else float("nan"),
                     float(np.mean(secs[arm]))])
    k = len(args.seeds)
    n_items = n * args.test_size
    main_t = R.make_table(
        f"SmolLM2-135M-Instruct ({args.dtype}), {n} clients one task category each, "
        f"{args.rounds} rounds x {args.local_steps} local steps (batch {args.batch_size}), "
        f"greedy answers of <= {args.max_new_tokens} tokens on {args.test_size} held-out "
        f"prompts per client of its own category and {args.test_size} of the others'; "
        f"ROUGE F-measure, mean over {k} seeds x {n_items} prompts [95% CI over "
        "seeds and prompts, crossed bootstrap]; MDE vs a fixed value (80% power)",
        ["strategy", "own ROUGE-1", "own R1 MDE", "own ROUGE-L", "other ROUGE-1",
         "other R1 MDE", "other ROUGE-L", "bytes/round", "vs FedIT", "s/run"], rows,
        name="rouge", formats={"own ROUGE-1": ".3f", "own R1 MDE": ".3f", "own ROUGE-L": ".3f",
                               "other ROUGE-1": ".3f", "other R1 MDE": ".3f",
                               "other ROUGE-L": ".3f", "bytes/round": ".0f", "vs FedIT": ".2f",
                               "s/run": ".0f"})
    primary = set(args.design_spec.get("primary", []))
    target = args.design_spec.get("target_effect")
    claims, var_rows = [], []
    for what, a, b, key in CLAIMS:
        if a not in cells or b not in cells:
            continue
        cid = claim_id(a, b, key)
        d = np.asarray(cells[a][key]) - np.asarray(cells[b][key])
        est = stats.hierarchical_diff_ci(cells[a][key], cells[b][key])
        mde = stats.mde_from_samples(d)
        verdict = ("no difference detected" if est.lo <= 0 <= est.hi else
                   (f"{a} higher" if est.value > 0 else f"{b} higher"))
        claims.append([what, f"{a} - {b}", METRIC[key],
                       "primary" if cid in primary else "secondary", est, mde, verdict])
        if cid in primary and d.shape[0] >= 2 and d.shape[1] >= 2:
            comp = variance_components(d)
            tot = sum(comp.values()) or 1.0
            var_rows.append([f"{what} ({METRIC[key]})", comp["seed"] / tot, comp["item"] / tot,
                             comp["resid"] / tot, math.sqrt(tot),
                             comp["seed"] / k, comp["item"] / n_items,
                             2 * comp["resid"] / (k * n_items), mde,
                             stats.mde(math.sqrt(comp["seed"] / k)),
                             prompts_needed(comp, k, target) if target else None])
    claims_t = R.make_table(
        "The paper's claims as paired differences (same seeds, same prompts): mean [95% CI "
        "over seeds and prompts, crossed bootstrap], MDE of the paired difference (80% power); "
        "primary = pre-registered endpoint (design file)",
        ["claim", "difference", "metric", "endpoint", "estimate", "MDE", "verdict"], claims,
        name="claims", formats={"estimate": ".3f", "MDE": ".3f"})
    tables = [main_t] + ([claims_t] if claims else [])
    if var_rows:
        tables.append(R.make_table(
            f"Where the variance of the primary paired differences comes from ({k} seeds x "
            f"{n_items} prompts): shares of the per-cell variance (two-way random effects, "
            "ANOVA estimates), its SD, the three parts of se^2 of the mean (seed/S, prompt/I, "
            "2 resid/(S I)), the bootstrap MDE, the floor that the seed part alone sets at "
            f"{k} seeds, and the prompts (all clients, per seed) that {k} seeds would need for "
            f"an MDE equal to the design's target effect ({target})",
            ["difference", "seed share", "prompt share", "residual share", "cell SD",
             "se^2 seed", "se^2 prompt", "se^2 resid", "MDE", "MDE floor (seeds only)",
             "prompts for target"], var_rows, name="variance",
            formats={"seed share": ".2f", "prompt share": ".2f", "residual share": ".2f",
                     "cell SD": ".3f", "se^2 seed": ".2e", "se^2 prompt": ".2e",
                     "se^2 resid": ".2e", "MDE": ".3f", "MDE floor (seeds only)": ".3f",
                     "prompts for target": ".0f"}))
    if w_p["own"]:
        tables.append(R.make_table(
            "OOD mixer: personal weight w_p it gives on the client's own-category prompts and on "
            "the other categories' (mean [95% CI over seeds and prompts]); w_p = s max(r_s, "
            "r_p)/(r_s + r_p), w_s = 1 - w_p",
            ["prompts", "mean w_p"], [["own", stats.hierarchical_ci(w_p["own"])],
                                     ["other", stats.hierarchical_ci(w_p["other"])]],
            name="mixer", formats={"mean w_p": ".3f"}))
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
        settings = {k2: v for k2, v in vars(args).items()
                    if k2 not in ("design_spec", "out_results", "design")}
        tol = dict(args.design_spec.get("tolerance", {}))
        tol["s/run"] = {"timing": True, "why": "wall time of one strategy x seed (train + "
                        "evaluation) on a shared 2-core machine"}
        R.write(args.out_results, tables, plugin="het-cpflora", seeds=list(args.seeds),
                clock=clock, threads=threads, quick=False, tolerance=tol,
                metrics={"design": args.design_spec, "settings": settings,
                         "items_per_seed": n_items, "cells": cells, "w_p": w_p},
                command=" ".join(["python", "plugins/het-cpflora/benchmarks/bench_rouge.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]))


if __name__ == "__main__":
    main()
