"""Defenses over seeds: refusal on harmful and over-refusal on benign queries, pooled over seeds
with percentile-bootstrap 95% CIs (keyword judge), every arm scored on the same queries.

Toy audio-LM (speech):   python plugins/sarsteer/benchmarks/bench_defenses.py --seeds 0 1 2
Pretrained text LM:      python plugins/sarsteer/benchmarks/bench_defenses.py --pretrained

``--pretrained`` runs the same defenses on SmolLM2-135M-Instruct (icml.models.load_pretrained)
with text queries (the LLM as its own backbone: no audio path exists for it offline).
"""

from __future__ import annotations

import argparse
import time

import torch
from icml_sarsteer.baselines import LLMSteering, NoDefense, PlainSteering, PromptDefense
from icml_sarsteer.evaluation import evaluate_defense
from icml_sarsteer.metrics import rate_with_ci
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
                             max_new_tokens=max_new_tokens, batch_size=40, n_boot=10)
        h = [bool(x) for x in _flags(r, "harmful")]
        b = [bool(x) for x in _flags(r, "benign")]
        table.setdefault(name, ([], []))
        table[name][0].extend(h)
        table[name][1].extend(b)


def _flags(r, key):
    from icml_sarsteer.metrics import KeywordJudge

    resp = r[f"responses_{key}"]
    return KeywordJudge()([""] * len(resp), resp)


def report(table, title):
    print(f"\n{title}\n")
    print("| defense | refusal on harmful % [95% CI] | over-refusal on benign % [95% CI] | n |")
    print("|---|---|---|---|")
    for name, (h, b) in table.items():
        rh, rb = rate_with_ci(h), rate_with_ci(b)
        print(f"| {name} | {100 * rh['rate']:.1f} [{100 * rh['lo']:.0f}, {100 * rh['hi']:.0f}]"
              f" | {100 * rb['rate']:.1f} [{100 * rb['lo']:.0f}, {100 * rb['hi']:.0f}] | "
              f"{rh['n']} |")


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
                             bench.eval_benign, max_new_tokens=8, batch_size=40, n_boot=10)
        text.setdefault("no defense, text input", ([], []))
        text["no defense, text input"][0].extend(_flags(r, "harmful"))
        text["no defense, text input"][1].extend(_flags(r, "benign"))
        print(f"seed {seed} done in {time.perf_counter() - t:.0f} s", flush=True)
    report({**table, **text}, f"Toy audio-LM, {backend} voices, seeds {seeds}, 40+40 held-out "
           "queries per seed, pooled")


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
    report(table, f"SmolLM2-135M-Instruct, text queries ({n_fit} fit / {n_eval}+{n_eval} "
           f"eval pairs, {max_new_tokens} tokens, {time.perf_counter() - t:.0f} s)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.1, 0.3])
    ap.add_argument("--backend", default="tones")
    ap.add_argument("--pretrained", action="store_true")
    ap.add_argument("--n-fit", type=int, default=20)
    ap.add_argument("--n-eval", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.pretrained:
        pretrained(args.alphas, args.n_fit, args.n_eval, args.tokens)
    else:
        toy(args.seeds, args.alphas, args.backend)


if __name__ == "__main__":
    main()
