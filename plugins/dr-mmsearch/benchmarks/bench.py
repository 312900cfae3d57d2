"""DR-MMSearchAgent benchmark, one run per part:

* ``arms``: the four arms (MMSearch-R1 baseline, +Gaussian, +proximity, both) over several seeds
  from per-seed warm starts: 3-hop accuracy, 3-hop turns, collapse and premature rates, mean and
  sample sd over seeds, plus each arm's difference to the baseline paired by seed.
* ``throughput``: rollout tokens/s of the same warm-started policy on the same questions and
  seeds with the KV cache reused across turns, re-encoded every turn, and the peer a user would
  write with ``transformers``: one batched ``model.generate(..., stop_strings=...)`` call per turn.
  Every arm is timed the same way (questions in, trajectories out, wall clock), best of repeats.
* ``bm25``: the two BM25 libraries (bm25s, rank_bm25) on the same corpus and queries: top-1
  agreement and queries/s.

    python plugins/dr-mmsearch/benchmarks/bench.py --part all --seeds 3 --steps 60

``--out-results plugins/dr-mmsearch/results/<name>.json`` also writes the part's table as an
``icml.results`` file (its command: this invocation, run from the repository root), which the
README renders and ``icml reproduce dr-mmsearch <name>`` reruns. Threads: one per process, or
``ICML_THREADS`` (``icml.results.apply_threads``); results are bit-equal at any count.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def _ms(vals: list[float]) -> tuple[float, float]:
    vals = [v for v in vals if not math.isnan(v)]
    if not vals:
        return float("nan"), float("nan")
    m = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
    return m, sd


def _one_seed(cfg, seed: int) -> dict:
    from icml_dr_mmsearch.experiment import run_arms

    from icml.results import apply_threads

    apply_threads(1)
    t0 = time.perf_counter()
    res = run_arms(cfg, seed=seed)
    print(f"seed {seed} done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    return {"warm_start": res["warm_start"], "arms": res["arms"]}


def bench_arms(seeds: int, steps: int, warm_steps: int, eval_generations: int,
               mu: str | None = None, arms: list[str] | None = None, workers: int = 1,
               premature_fraction: float | None = None, per_call_penalty: bool = False,
               holdout: float | None = None, holdout_by: str | None = None,
               first_seed: int = 0, fact_worlds: int = 1) -> dict:
    from icml_dr_mmsearch.config import (
        DEFAULT_ARMS,
        RewardConfig,
        TrainConfig,
        WarmStartConfig,
        WorldConfig,
    )

    reward = RewardConfig(per_call_penalty=per_call_penalty)
    if mu is not None:
        reward = RewardConfig(mu=mu, per_call_penalty=per_call_penalty)
    extra = {} if premature_fraction is None else {"premature_fraction": premature_fraction}
    if holdout is not None:
        extra["holdout"] = holdout
    if holdout_by is not None:
        extra["holdout_by"] = holdout_by
    seed_list = list(range(first_seed, first_seed + seeds))
    cfg = TrainConfig(steps=steps, warm=WarmStartConfig(steps=warm_steps),
                      eval_generations=eval_generations,
                      reward=reward, arms=list(arms or DEFAULT_ARMS),
                      world=WorldConfig(fact_worlds=fact_worlds), **extra)
    per: dict[str, list[dict]] = {}
    t0 = time.perf_counter()
    load_start = os.getloadavg()
    if workers > 1:   # one single-threaded process per seed; results equal the serial loop's
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(min(workers, seeds)) as pool:
            results = pool.starmap(_one_seed, [(cfg, s) for s in seed_list])
    else:
        results = [_one_seed(cfg, s) for s in seed_list]
    for res in results:
        per.setdefault("warm start", []).append(res["warm_start"])
        for arm, m in res["arms"].items():
            per.setdefault(arm, []).append(m)
    print(f"{seeds} seeds done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    keys = ["accuracy_hop1", "accuracy_hop2", "accuracy_hop3", "turns_hop3", "collapse_rate",
            "premature_rate", "diverse_rate", "redundant_rate", "heldout_accuracy_hop2",
            "heldout_accuracy_hop3", "heldout_turns_hop3", "heldout_collapse_rate",
            "heldout_accuracy", "heldout_premature_rate"]
    table = {}
    for arm, ms in per.items():
        row = {k: _ms([m.get(k, float("nan")) for m in ms]) for k in keys}
        if arm not in ("warm start", "baseline") and "baseline" in per:
            row["d_acc3_vs_baseline"] = _ms([m["accuracy_hop3"] - b["accuracy_hop3"]
                                             for m, b in zip(ms, per["baseline"], strict=True)])
            row["d_turns3_vs_baseline"] = _ms([m["turns_hop3"] - b["turns_hop3"]
                                               for m, b in zip(ms, per["baseline"], strict=True)])
        table[arm] = row
    return {"config": {"seeds": seeds, "steps": steps, "warm_steps": warm_steps,
                       "eval_generations": eval_generations, "mu": cfg.reward.mu,
                       "holdout": cfg.holdout, "premature_fraction": cfg.premature_fraction,
                       "per_call_penalty": cfg.reward.per_call_penalty,
                       "holdout_by": cfg.holdout_by, "seed_list": seed_list,
                       "fact_worlds": fact_worlds},
            "table": table, "per_seed": per, "seconds": time.perf_counter() - t0,
            "load_average_start_end": [load_start, os.getloadavg()]}


def _stop_kwargs(tok) -> dict:
    """How ``generate`` stops at the baseline's stop strings. transformers' ``stop_strings``
    matcher works on the token strings of a BPE/SentencePiece vocabulary and fails on a
    word-level one ("substring not found"); there every stop string is one token, so the right
    peer stops on those token ids (``eos_token_id`` accepts a list)."""
    from icml_dr_mmsearch.env import STOP_STRINGS

    ids = [tok(s, add_special_tokens=False)["input_ids"] for s in STOP_STRINGS]
    if all(len(i) == 1 for i in ids) and tok.unk_token_id not in [i[0] for i in ids]:
        return {"eos_token_id": [i[0] for i in ids] + [tok.eos_token_id]}
    return {"stop_strings": list(STOP_STRINGS), "tokenizer": tok}


def _generate_peer(model, tok, env, questions, G, max_turn_tokens, seed):
    """What a user writes with transformers: a batched generate() call per turn over the live
    rows' full contexts (left-padded), with stop strings; the environment in between."""
    from icml_dr_mmsearch.env import STOP_STRINGS

    torch.manual_seed(seed)
    rows = [(q, env.reset(q), list(tok(env.prompt(q), add_special_tokens=False)["input_ids"]))
            for q in questions for _ in range(G)]
    live = list(range(len(rows)))
    generated = 0
    pad = tok.pad_token_id
    stop = _stop_kwargs(tok)
    stop_ids = set(stop.get("eos_token_id", ()))
    for _ in range(env.max_rounds):
        if not live:
            break
        width = max(len(rows[r][2]) for r in live)
        ids = torch.full((len(live), width), pad, dtype=torch.long)
        att = torch.zeros_like(ids)
        for i, r in enumerate(live):
            ctx = rows[r][2]
            ids[i, width - len(ctx):] = torch.tensor(ctx)
            att[i, width - len(ctx):] = 1
        out = model.generate(input_ids=ids, attention_mask=att, do_sample=True, temperature=1.0,
                             top_k=0, max_new_tokens=max_turn_tokens, pad_token_id=pad, **stop)
        nxt = []
        for i, r in enumerate(live):
            new = out[i, width:].tolist()
            # cut after the first stop string (generate pads finished rows)
            keep = []
            for t in new:
                if t == pad:
                    break
                keep.append(t)
                if (t in stop_ids if stop_ids else
                        tok.decode(keep).rstrip().endswith(STOP_STRINGS)):
                    break
            generated += len(keep)
            q, ep, ctx = rows[r]
            ctx.extend(keep)
            obs = env.step(ep, tok.decode(keep)) if keep else None
            if obs is not None:
                ctx.extend(tok(obs, add_special_tokens=False)["input_ids"])
                nxt.append(r)
        live = nxt
    return generated, [ep for _, ep, _ in rows]


def bench_throughput(hidden_sizes: list[int], repeats: int, G: int, n_questions: int) -> dict:
    from icml_dr_mmsearch.config import WorldConfig
    from icml_dr_mmsearch.experiment import build_world, make_tiny_model, warm_start_data
    from icml_dr_mmsearch.grpo import warm_start
    from icml_dr_mmsearch.rollout import RolloutConfig, agent_rollout

    kb, env, tok = build_world(WorldConfig(n_entities=60, world_seed=0))
    qs = [q for h in (3, 2, 1) for q in kb.questions_by_hops(h)][:n_questions]
    out = {}
    for h in hidden_sizes:
        model = make_tiny_model(len(tok), hidden_size=h, num_layers=2, seed=0)
        warm_start(model, tok, env, warm_start_data(env, kb.questions, 0.0, 0), steps=120,
                   batch_size=16, learning_rate=3e-3 if h <= 128 else 1e-3)
        res = {}
        for arm in ("kv_reuse", "re_encode", "hf_generate"):
            best, toks, turns = float("inf"), 0, 0.0
            for rep in range(repeats):
                t0 = time.perf_counter()
                if arm == "hf_generate":
                    try:
                        with torch.no_grad():
                            toks, eps = _generate_peer(model, tok, env, qs, G, 24, rep)
                    except ValueError as exc:   # stop_strings needs a BPE-style vocabulary
                        res[arm] = {"error": f"generate(stop_strings=...) failed: {exc}"}
                        break
                    turns = sum(e.turns for e in eps) / len(eps)
                else:
                    g = torch.Generator().manual_seed(rep)
                    trajs = agent_rollout(model, tok, env, qs, num_generations=G, generator=g,
                                          config=RolloutConfig(kv_reuse=arm == "kv_reuse"))
                    toks = sum(t.length for t in trajs)
                    turns = sum(t.turns for t in trajs) / len(trajs)
                best = min(best, time.perf_counter() - t0)
                res[arm] = {"seconds": best, "tokens": toks, "tokens_per_s": toks / best,
                            "mean_turns": turns}
        for arm in [a for a in res if "error" not in res[a]]:
            res[arm]["speed_vs_re_encode"] = res[arm]["tokens_per_s"] / res["re_encode"][
                "tokens_per_s"]
        out[f"hidden{h}"] = res
        print(f"throughput hidden {h}: {json.dumps(res)}", file=sys.stderr, flush=True)
    return {"config": {"hidden_sizes": hidden_sizes, "repeats": repeats, "G": G,
                       "questions": n_questions}, "results": out}


def bench_bm25(repeats: int) -> dict:
    from icml_dr_mmsearch.knowledge import KnowledgeBase
    from icml_dr_mmsearch.tools import TextSearch

    kb = KnowledgeBase.generate(400, seed=0)
    queries = [g for q in kb.questions for g in q.gold_queries] * 3
    res = {}
    tops = {}
    for backend in ("bm25s", "rank_bm25"):
        try:
            s = TextSearch(kb.documents, topk=2, backend=backend)
        except ImportError as exc:
            res[backend] = {"error": str(exc)}
            continue
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            tops[backend] = [s.search(q)[:1] for q in queries]
            best = min(best, time.perf_counter() - t0)
        res[backend] = {"queries_per_s": len(queries) / best, "docs": len(kb.documents)}
    if len(tops) == 2:
        agree = sum(a == b for a, b in zip(tops["bm25s"], tops["rank_bm25"], strict=True))
        res["top1_agreement"] = agree / len(queries)
        res["speed_bm25s_vs_rank_bm25"] = (res["bm25s"]["queries_per_s"]
                                           / res["rank_bm25"]["queries_per_s"])
    return res


ARM_COLS = [("acc 3-hop", "accuracy_hop3"), ("turns 3-hop", "turns_hop3"),
            ("collapse 3-hop", "collapse_rate"), ("premature", "premature_rate"),
            ("acc 2-hop", "accuracy_hop2"), ("acc 1-hop", "accuracy_hop1"),
            ("held-out acc 3-hop", "heldout_accuracy_hop3"),
            ("held-out acc 2-hop", "heldout_accuracy_hop2"),
            ("held-out acc", "heldout_accuracy"),
            ("held-out collapse 3-hop", "heldout_collapse_rate")]


def arms_tables(res: dict, label: str) -> list[dict]:
    """The arms part as a results table: per arm, the mean over seeds with a percentile
    bootstrap CI over seeds (``icml.stats.mean_ci``; the per-question outcomes are not kept, so
    items are not resampled), and the 3-hop accuracy difference to the baseline paired by seed
    (``icml.stats.paired_diff_ci``) with its MDE (``icml.stats.mde_from_samples`` of the per-seed
    differences; ``inf`` with one seed)."""
    from icml import results, stats

    per = res["per_seed"]
    cols = ["arm"] + [c for c, _ in ARM_COLS] + ["Δ acc 3-hop vs baseline", "MDE Δ acc 3-hop"]
    rows = []
    for arm, ms in per.items():
        row: list = [arm]
        for _, k in ARM_COLS:
            vals = [m[k] for m in ms if not math.isnan(m.get(k, float("nan")))]
            row.append(stats.mean_ci(vals, seed=0).to_dict() if vals else None)
        if arm not in ("warm start", "baseline") and "baseline" in per:
            a = [m["accuracy_hop3"] for m in ms]
            b = [m["accuracy_hop3"] for m in per["baseline"]]
            row.append(stats.paired_diff_ci(a, b, seed=0).to_dict())
            d = [x - y for x, y in zip(a, b, strict=True)]
            row.append(stats.mde_from_samples(d, seed=0))
        else:
            row += [None, None]
        rows.append(row)
    c = res["config"]
    title = (f"Arms over {c['seeds']} seed(s), {c['steps']} GRPO steps, mu={c['mu']}, "
             f"premature_fraction={c['premature_fraction']}, per-call penalty "
             f"{c['per_call_penalty']} (mean [95% CI over seeds])")
    fmt = {col: ".3f" for col in cols[1:]}
    fmt["turns 3-hop"] = ".2f"
    return [results.make_table(title, cols, rows, name=label, formats=fmt)]


COMPARISONS = [
    ("both", "baseline_nopen", "method vs penalty-matched baseline (neither has a search penalty)"),
    ("gaussian", "baseline_nopen", "Gaussian reward vs penalty-matched baseline"),
    ("gaussian_pen", "baseline", "Gaussian reward vs baseline, both with the search penalty"),
    ("proximity", "baseline", "proximity advantage vs baseline (same reward, with penalty)"),
    ("baseline_nopen", "baseline", "the search penalty alone (baseline without vs with)"),
    ("both", "baseline", "the paper's comparison (method without, baseline with penalty)"),
]
"""The pre-registered paired comparisons (README, "Pre-registered comparison")."""

COMPARE_METRICS = [("held-out acc", "heldout_accuracy"),
                   ("held-out collapse 3-hop", "heldout_collapse_rate"),
                   ("train collapse 3-hop", "collapse_rate")]


def comparison_tables(res: dict, label: str) -> list[dict]:
    """Paired-by-seed differences of the pre-registered comparisons (:data:`COMPARISONS`):
    per metric, ``mean(a - b)`` over seeds with a percentile bootstrap CI over seeds
    (``icml.stats.paired_diff_ci``), the MDE of the per-seed differences
    (``icml.stats.mde_from_samples``) and their sample sd (the seed spread). ``detected``
    (:func:`~icml_dr_mmsearch.metrics.paired_verdict`): the interval excludes 0 and
    ``|mean| > sd``; "yes, below MDE" when the size is below the MDE (detected, imprecise)."""
    from icml_dr_mmsearch.metrics import paired_verdict

    from icml import results

    per = res["per_seed"]
    cols = ["a", "b", "comparison"]
    for c, _ in COMPARE_METRICS:
        cols += [f"Δ {c}", f"MDE Δ {c}", f"sd Δ {c}", f"detected Δ {c}"]
    rows = []
    for a, b, what in COMPARISONS:
        if a not in per or b not in per:
            continue
        row: list = [a, b, what]
        for _, k in COMPARE_METRICS:
            x = [m.get(k, float("nan")) for m in per[a]]
            y = [m.get(k, float("nan")) for m in per[b]]
            ok = [i for i in range(len(x)) if not (math.isnan(x[i]) or math.isnan(y[i]))]
            x, y = [x[i] for i in ok], [y[i] for i in ok]
            if not x:
                row += [None, None, None, None]
                continue
            v = paired_verdict(x, y, seed=0)
            est, mde, sd = v["diff"], v["mde"], v["sd"]
            row += [est.to_dict(), mde, sd, v["label"]]
        rows.append(row)
    c = res["config"]
    title = (f"Pre-registered paired comparisons, seeds {c.get('seed_list')}, {c['steps']} GRPO "
             f"steps, mu={c['mu']}, holdout {c['holdout']} by {c.get('holdout_by')} "
             "(mean a - b [95% CI over seeds])")
    fmt = {col: ".3f" for col in cols[3:] if not col.startswith("detected")}
    keys = ["heldout_accuracy", "heldout_accuracy_hop2", "heldout_accuracy_hop3",
            "heldout_collapse_rate", "collapse_rate", "accuracy_hop3", "turns_hop3"]
    seeds = c.get("seed_list") or list(range(c["seeds"]))
    raw = [[arm, seeds[i]] + [m.get(k) for k in keys]
           for arm, ms in per.items() for i, m in enumerate(ms)]
    return [results.make_table(title, cols, rows, name=f"{label}_comparisons", formats=fmt),
            results.make_table("Per-seed values (the inputs of the comparisons)",
                               ["arm", "seed"] + keys, raw, name=f"{label}_per_seed",
                               formats={k: ".4f" for k in keys})]


def throughput_tables(res: dict) -> list[dict]:
    from icml import results

    names = {"kv_reuse": "one KV cache across turns", "re_encode": "re-encode every turn",
             "hf_generate": "peer: model.generate() per turn"}
    rows = []
    for key, arms in res["results"].items():
        peer = arms.get("hf_generate", {}).get("tokens_per_s")
        for arm, r in arms.items():
            if "error" in r:
                rows.append([key, names[arm], None, None, None])
                continue
            rows.append([key, names[arm], r["tokens_per_s"], r["speed_vs_re_encode"],
                         r["tokens_per_s"] / peer if peer else None])
    cols = ["model", "rollout", "tokens/s", "vs re-encoding each turn", "vs generate() peer"]
    return [results.make_table("Rollout throughput (best of repeats)", cols, rows,
                               name="throughput",
                               formats={"tokens/s": ".0f", "vs re-encoding each turn": ".2f",
                                        "vs generate() peer": ".2f"})]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="all", choices=("all", "arms", "throughput", "bm25"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warm-steps", type=int, default=150)
    ap.add_argument("--eval-generations", type=int, default=4)
    ap.add_argument("--hidden", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mu", default=None, choices=("question", "ema", "hop", "fixed"),
                    help="the Gaussian reward's mu (default: RewardConfig's default)")
    ap.add_argument("--arms", nargs="+", default=None, help="arms (default: all four)")
    ap.add_argument("--workers", type=int, default=1,
                    help="seeds run in parallel processes (one thread each)")
    ap.add_argument("--premature-fraction", type=float, default=None,
                    help="share of image questions whose warm-start demonstration answers early "
                    "(default: TrainConfig's 0.5)")
    ap.add_argument("--per-call-penalty", action="store_true",
                    help="the baseline's per-call search penalty (use_search_count_penalty)")
    ap.add_argument("--holdout", type=float, default=None,
                    help="held-out share (default: TrainConfig's 0.3)")
    ap.add_argument("--fact-worlds", type=int, default=1,
                    help="fact versions of the world (world.fact_worlds; with --holdout-by "
                    "world the last ones are held out)")
    ap.add_argument("--holdout-by", default=None, choices=("company", "question", "world"),
                    help="what is held out (default: TrainConfig's company)")
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed ... (pilots)")
    ap.add_argument("--label", default=None, help="key of this arms table in the JSON file")
    ap.add_argument("--out", default=str(HERE / "results.json"))
    ap.add_argument("--out-results", default=None,
                    help="also write the part's table as an icml.results file (arms or "
                    "throughput part only)")
    a = ap.parse_args()
    from icml import results

    clock = results.Clock()
    threads = results.apply_threads(1)
    out = {}
    path = Path(a.out)
    if path.is_file():
        out = json.loads(path.read_text())
    if a.part in ("all", "bm25"):
        out["bm25"] = bench_bm25(a.repeats)
    if a.part in ("all", "throughput"):
        out["throughput"] = bench_throughput(a.hidden, a.repeats, 4, 30)
    if a.part in ("all", "arms"):
        key = a.label or (f"arms_mu_{a.mu}" if a.mu else "arms")
        out[key if key.startswith("arms") else f"arms_{key}"] = bench_arms(
            a.seeds, a.steps, a.warm_steps, a.eval_generations, a.mu, a.arms, a.workers,
            a.premature_fraction, a.per_call_penalty, a.holdout, a.holdout_by, a.first_seed,
            a.fact_worlds)
    if a.out_results:
        command = "python plugins/dr-mmsearch/benchmarks/bench.py " + shlex.join(sys.argv[1:])
        if a.part == "arms":
            key = a.label or (f"arms_mu_{a.mu}" if a.mu else "arms")
            key = key if key.startswith("arms") else f"arms_{key}"
            tables = arms_tables(out[key], key)
            if "baseline_nopen" in out[key]["per_seed"]:
                tables += comparison_tables(out[key], key)
            seeds, tol = out[key]["config"]["seed_list"], None
        elif a.part == "throughput":
            tables, seeds = throughput_tables(out["throughput"]), [0]
            tol = {c: {"timing": True, "why": "clock reading on a shared machine"}
                   for c in ("tokens/s", "vs re-encoding each turn", "vs generate() peer")}
        else:
            raise SystemExit("--out-results needs --part arms or --part throughput")
        print("results file:", results.write(a.out_results, tables, command=command,
                                              plugin="dr-mmsearch", seeds=seeds, quick=False,
                                              clock=clock, threads=threads, tolerance=tol))
    out.setdefault("machine", "2-core CPU shared by eight sessions, heavily loaded (load average "
                   "20-35), torch threads 1 per process")   # tables without their own load
    path.write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if not k.startswith("arms")}, indent=1))
    for key in [k for k in out if k.startswith("arms")]:
        print(key, out[key]["config"])
        for arm, row in out[key]["table"].items():
            print(arm, {k: f"{m:.3f}±{s:.3f}" for k, (m, s) in row.items()})


if __name__ == "__main__":
    main()
