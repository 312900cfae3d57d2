"""Defenses over seeds: refusal on harmful and over-refusal on benign queries, over seeds and
queries with a two-level percentile bootstrap (icml.stats.hierarchical_ci: seeds, then each
seed's own queries), keyword judge, every arm scored on the same queries.

Toy audio-LM (speech):   python plugins/sarsteer/benchmarks/bench_defenses.py --seeds 0 1 2 \
                             --out-results plugins/sarsteer/results/bench_toy.json
Pretrained text LM:      python plugins/sarsteer/benchmarks/bench_defenses.py --pretrained \
                             --out-results plugins/sarsteer/results/bench_smollm2.json

``--pretrained`` runs the same defenses on SmolLM2-135M-Instruct (icml.models.load_pretrained)
with text queries (the LLM as its own backbone: no audio path exists for it offline).
"""

from __future__ import annotations

import argparse
import time

from icml_sarsteer.baselines import LLMSteering, NoDefense, PlainSteering, PromptDefense
from icml_sarsteer.evaluation import evaluate_defense
from icml_sarsteer.steering import SARSteer


def arms(alphas):
    out = {"no defense": (NoDefense(), None), "prompt defense": (PromptDefense(), None)}
    for a in alphas:
        out[f"plain steering a={a}"] = (PlainSteering(alpha=a), a)
        out[f"SARSteer k=10 lam=1 a={a}"] = (SARSteer(alpha=a, k=10, lam=1.0), a)
        out[f"SARSteer k=2 lam=0.5 a={a}"] = (SARSteer(alpha=a, k=2, lam=0.5), a)
        out[f"LLM steering a={a}"] = (LLMSteering(alpha=a), a)
    return out


def score(model, prompt, bench, table, alphas, text_prompt, max_new_tokens):
    fitted = {}
    for name, (d, _) in arms(alphas).items():
        if isinstance(d, LLMSteering):
            if text_prompt is None:
                continue
            d.fit(model, bench.fit_harmful, bench.fit_benign, text_prompt=text_prompt)
        elif isinstance(d, SARSteer):
            d.fit(model, bench.fit_harmful, bench.fit_benign, prompt)
        fitted[name] = d
    for name, d in fitted.items():
        r = evaluate_defense(model, prompt, d, bench.eval_harmful, bench.eval_benign,
                             max_new_tokens=max_new_tokens, batch_size=40, n_boot=100)
        h = [bool(x) for x in _flags(r, "harmful")]
        b = [bool(x) for x in _flags(r, "benign")]
        table.setdefault(name, ([], []))
        table[name][0].append(h)  # one list of flags per seed
        table[name][1].append(b)


def _flags(r, key):
    from icml_sarsteer.metrics import KeywordJudge

    resp = r[f"responses_{key}"]
    return KeywordJudge()([""] * len(resp), resp)


def report(table, title, name):
    """The results-file table: per arm, refusal rates in % over seeds and queries (nested
    two-level bootstrap: each seed has its own queries) and the number of judged responses."""
    from icml import results, stats

    def est(per_seed):
        vals = [[100.0 * float(x) for x in flags] for flags in per_seed]
        return stats.hierarchical_ci(vals, seed=0, design="nested") if len(vals) > 1 \
            else stats.mean_ci(vals[0], seed=0)

    rows = [[arm, est(h), est(b), sum(len(x) for x in h)] for arm, (h, b) in table.items()]
    n_per_arm = rows[0][3] if rows else 0
    t = results.make_table(
        f"{title}; MDE between two arms {100 * stats.mde_proportion(n_per_arm):.0f} points "
        "(icml.stats.mde_proportion, worst case)",
        ["defense", "refusal on harmful % [95% CI]", "over-refusal on benign % [95% CI]", "n"],
        rows, name=name, formats={"refusal on harmful % [95% CI]": ".1f",
                                  "over-refusal on benign % [95% CI]": ".1f"})
    print("\n" + t["title"] + "\n\n" + results.render_table(t), flush=True)
    return t


def _write(args, table, seeds):
    from icml import results

    if not args.out_results:
        return
    cmd = "python plugins/sarsteer/benchmarks/bench_defenses.py " + " ".join(
        (["--pretrained"] if args.pretrained else ["--seeds", *map(str, args.seeds)])
        + (["--backend", args.backend] if args.backend != "tones" and not args.pretrained
           else []) + ["--out-results", args.out_results])
    path = results.write(args.out_results, [table], command=cmd, plugin="sarsteer",
                         seeds=seeds, quick=False, clock=args.clock, threads=args.threads)
    print(f"results file: {path}")


def toy(seeds, alphas, backend):
    from icml_sarsteer.data import make_benchmark
    from icml_sarsteer.toy_lalm import build_toy_lalm, train_toy_lalm

    table: dict = {}
    text: dict = {}
    for seed in seeds:
        t = time.perf_counter()
        bench = make_benchmark(40, 40, seed=seed, backend=backend)
        model, prompt = build_toy_lalm(seed=seed)
        train_toy_lalm(model, prompt, bench, steps=300, seed=seed, audio_safety_frac=0.25,
                       audio_refusal_suffix=True)
        score(model, prompt, bench, table, alphas, prompt.as_text(), 8)
        r = evaluate_defense(model, prompt.as_text(), NoDefense(), bench.eval_harmful,
                             bench.eval_benign, max_new_tokens=8, batch_size=40, n_boot=100)
        text.setdefault("no defense, text input", ([], []))
        text["no defense, text input"][0].append(_flags(r, "harmful"))
        text["no defense, text input"][1].append(_flags(r, "benign"))
        print(f"seed {seed} done in {time.perf_counter() - t:.0f} s", flush=True)
    return report({**table, **text}, f"Toy audio-LM, {backend} voices, seeds {seeds}, 40+40 "
                  "held-out queries per seed", "toy")


def pretrained(alphas, n_fit, n_eval, max_new_tokens):
    from icml_sarsteer.data import make_benchmark
    from icml_sarsteer.prompts import ChatPrompt

    from icml.models import load_pretrained

    model, tok = load_pretrained("smollm2-135m-instruct")
    bench = make_benchmark(n_fit, n_eval, seed=0, render=False)
    prompt = ChatPrompt(tok)
    table: dict = {}
    t = time.perf_counter()
    score(model, prompt, bench, table, alphas, None, max_new_tokens)
    print(f"scored in {time.perf_counter() - t:.0f} s")
    return report(table, f"SmolLM2-135M-Instruct, text queries ({n_fit} fit / "
                  f"{n_eval}+{n_eval} eval pairs, {max_new_tokens} tokens)", "smollm2")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.1, 0.3])
    ap.add_argument("--backend", default="tones")
    ap.add_argument("--pretrained", action="store_true")
    ap.add_argument("--n-fit", type=int, default=20)
    ap.add_argument("--n-eval", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--out-results", default=None,
                    help="also write a results file (plugins/sarsteer/results/NAME.json)")
    args = ap.parse_args()
    from icml import results

    args.clock = results.Clock()
    args.threads = results.apply_threads(1)
    if args.pretrained:
        _write(args, pretrained(args.alphas, args.n_fit, args.n_eval, args.tokens), [0])
    else:
        _write(args, toy(args.seeds, args.alphas, args.backend), args.seeds)


if __name__ == "__main__":
    main()
