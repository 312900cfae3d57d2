"""Text-only analogue of the paper's claim 3 on SmolLM2-135M-Instruct (issue 58): does the
safe-space projection (SARSteer, k of D = 576 near the paper's 10 of 3,584, lambda = 1) lower
over-refusal of benign instructions compared with plain refusal steering (lambda = 0, the same
direction) at a *matched* refusal rate on harmful ones? Alpha is swept per method; the benign
over-refusal is read at the alpha where the harmful-refusal curve crosses ``--target``
(icml_sarsteer.analogue.matched_weights). Seeds draw the fit pairs; the evaluation pairs are
fixed, so the seeds x items cells are crossed (icml.stats.hierarchical_*).

    python plugins/sarsteer/benchmarks/bench_analogue.py \
        --out-results plugins/sarsteer/results/analogue.json

Refusal judge (no labels): the official refusal markers (apostrophes normalised) on the first
``--tokens`` greedy tokens. Peer: steering-vectors (when importable) applies the same
plain direction at the last position through its own hooks, one alpha, seed 0.
"""

from __future__ import annotations

import argparse
import time

REFUSAL = "I cannot assist with that."


def _steerers(model, prompt, split, k):
    """SARSteer (lambda = 1) and plain steering on the same fitted direction."""
    import copy

    from icml_sarsteer.analogue import INSTRUCTION
    from icml_sarsteer.steering import SARSteer

    sar = SARSteer(k=k, lam=1.0, instruction=INSTRUCTION, refusal=REFUSAL, separator=" ")
    sar.fit(model, split.fit_harmful, split.fit_benign, prompt)
    plain = copy.deepcopy(sar)
    plain.lam, plain.vectors = 0.0, sar.directions.clone()
    return plain, sar


def _flags(model, prompt, queries, text, arms, judge, tokens):
    from icml_sarsteer.analogue import greedy_arms

    resp = greedy_arms(model, prompt, queries, text, arms, max_new_tokens=tokens)
    return [judge([""] * len(r), r) for r in resp], resp


def _peer_flags(model, tok, prompt, split, plain, alpha, judge, tokens):
    """steering-vectors: same direction, last position, its hooks; None when not importable."""
    try:
        from steering_vectors import SteeringVector
    except ImportError:
        return None
    from icml_sarsteer.analogue import INSTRUCTION
    from icml_sarsteer.prompts import generate_responses

    sv = SteeringVector({i: plain.vectors[j] for j, i in enumerate(plain.layer_ids)},
                        layer_type="decoder_block")
    out = []
    for qs in (split.eval_harmful, split.eval_benign):
        with sv.apply(model, multiplier=alpha, min_token_index=None,
                      token_indices=slice(-1, None)):
            resp = generate_responses(model, prompt, qs, INSTRUCTION, max_new_tokens=tokens,
                                      batch_size=40)
        out.append((judge([""] * len(resp), resp), resp))
    return out


def run(args):
    import torch
    from icml_sarsteer.analogue import FORMS, INSTRUCTION, load_pairs, split_pairs
    from icml_sarsteer.metrics import KeywordJudge
    from icml_sarsteer.prompts import ChatPrompt

    from icml.models import load_pretrained

    model, tok = load_pretrained("smollm2-135m-instruct")
    model = model.to(device=args.device, dtype=getattr(torch, args.dtype)).eval()
    judge = KeywordJudge(normalize_apostrophes=True)
    pairs = load_pairs()
    prompt = ChatPrompt(tok, device=args.device, template=FORMS[args.form])
    direct = ChatPrompt(tok, device=args.device, template=FORMS["direct"])
    fixed = split_pairs(pairs, args.seeds[0], args.n_fit, args.n_eval)
    ev = {"harmful": fixed.eval_harmful, "benign": fixed.eval_benign}
    t0 = time.perf_counter()
    ref = {}
    for name, pr, text in (("no defense", prompt, INSTRUCTION),
                           ("prompt defense (R appended)", prompt, f"{INSTRUCTION} {REFUSAL}"),
                           ("no defense, direct form", direct, INSTRUCTION)):
        ref[name] = {kind: _flags(model, pr, qs, text, [(None, 0.0)], judge, args.tokens)[0][0]
                     for kind, qs in ev.items()}
    print(f"reference arms {time.perf_counter() - t0:.0f} s", flush=True)
    sweep = {"plain": [], "sarsteer": []}   # method -> seeds -> {kind: alpha x items flags}
    peer, samples = None, {}
    for seed in args.seeds:
        t = time.perf_counter()
        split = split_pairs(pairs, seed, args.n_fit, args.n_eval)
        plain, sar = _steerers(model, prompt, split, args.k)
        n_a = len(args.alphas)
        arms = [(plain, a) for a in args.alphas] + [(sar, a) for a in args.alphas]
        per = {"plain": {}, "sarsteer": {}}
        for kind, qs in ev.items():      # one prefix pass per kind for all arms
            flags, resp = _flags(model, prompt, qs, INSTRUCTION, arms, judge, args.tokens)
            per["plain"][kind], per["sarsteer"][kind] = flags[:n_a], flags[n_a:]
            if seed == args.seeds[0]:
                for method, j in (("plain", n_a - 1), ("sarsteer", 2 * n_a - 1)):
                    samples[f"{method} {kind} alpha={args.alphas[-1]}"] = resp[j][:3]
        for method in sweep:
            sweep[method].append(per[method])
        if seed == args.seeds[0] and args.peer_alpha:
            peer = _peer_flags(model, tok, prompt, split, plain, args.peer_alpha, judge,
                               args.tokens)
            if peer is not None:
                j = args.alphas.index(args.peer_alpha)
                peer = {"ours_harmful": sweep["plain"][-1]["harmful"][j],
                        "ours_benign": sweep["plain"][-1]["benign"][j],
                        "peer_harmful": peer[0][0], "peer_benign": peer[1][0]}
        print(f"seed {seed}: {time.perf_counter() - t:.0f} s", flush=True)
    return ref, sweep, peer, samples


PEER_PATH = "PYTHONPATH=/tmp/icml-peers/steering-vectors "
PEER_INSTALL = ("pip install -q --no-deps --target /tmp/icml-peers/steering-vectors "
                "steering-vectors==0.12.2 && " + PEER_PATH)
"""steering-vectors 0.12.2 declares transformers<5 (this plugin needs >=5), so it cannot be an
extra of the plugin; installed without its dependencies into a side folder it imports and runs
with transformers 5 (only ``SteeringVector.apply`` is used)."""


def peer_only(args):
    """steering-vectors vs this plugin on the plain direction of seed ``--seeds[0]`` at
    ``--peer-alpha``: refusal rates and the share of identical responses."""
    import torch

    try:
        from steering_vectors import SteeringVector
    except ImportError:
        from icml import ConfigError

        raise ConfigError("--peer-only needs steering-vectors importable: " + PEER_INSTALL
                          + "python ...") from None
    from icml_sarsteer.analogue import FORMS, INSTRUCTION, greedy_arms, load_pairs, split_pairs
    from icml_sarsteer.metrics import KeywordJudge
    from icml_sarsteer.prompts import ChatPrompt, generate_responses

    from icml import results
    from icml.models import load_pretrained

    model, tok = load_pretrained("smollm2-135m-instruct")
    model = model.to(device=args.device, dtype=getattr(torch, args.dtype)).eval()
    judge = KeywordJudge(normalize_apostrophes=True)
    prompt = ChatPrompt(tok, device=args.device, template=FORMS[args.form])
    split = split_pairs(load_pairs(), args.seeds[0], args.n_fit, args.n_eval)
    plain, _ = _steerers(model, prompt, split, args.k)
    sv = SteeringVector({i: plain.vectors[j] for j, i in enumerate(plain.layer_ids)},
                        layer_type="decoder_block")
    a = args.peer_alpha
    resp = {"icml_sarsteer, greedy_arms (cached prefix)": {}, "icml_sarsteer, generate": {},
            "steering-vectors 0.12.2, generate": {}}
    for kind, qs in (("harmful", split.eval_harmful), ("benign", split.eval_benign)):
        names = list(resp)
        resp[names[0]][kind] = greedy_arms(model, prompt, qs, INSTRUCTION, [(plain, a)],
                                           max_new_tokens=args.tokens)[0]
        with plain.apply(model, alpha=a):
            resp[names[1]][kind] = generate_responses(model, prompt, qs, INSTRUCTION,
                                                      max_new_tokens=args.tokens, batch_size=40)
        with sv.apply(model, multiplier=a, min_token_index=None,
                      token_indices=slice(-1, None)):
            resp[names[2]][kind] = generate_responses(model, prompt, qs, INSTRUCTION,
                                                      max_new_tokens=args.tokens, batch_size=40)
    ref = resp["icml_sarsteer, greedy_arms (cached prefix)"]
    rows = []
    for name, r in resp.items():
        rate = {k: 100 * sum(judge([""] * len(v), v)) / len(v) for k, v in r.items()}
        same = sum(x == y for k in r for x, y in zip(r[k], ref[k], strict=True))
        rows.append([name, rate["harmful"], rate["benign"],
                     100 * same / (len(r["harmful"]) + len(r["benign"]))])
    t = results.make_table(
        f"Peer on the same direction: plain steering (seed {args.seeds[0]} fit pairs, "
        f"{args.form} form) at alpha={a}, last position, {args.tokens} greedy tokens, "
        f"{len(split.eval_harmful)}+{len(split.eval_benign)} eval pairs",
        ["implementation", "refusal on harmful %", "over-refusal on benign %",
         "responses identical to greedy_arms %"], rows, name="peer",
        formats={"refusal on harmful %": ".1f", "over-refusal on benign %": ".1f",
                 "responses identical to greedy_arms %": ".1f"})
    print("\n" + t["title"] + "\n\n" + results.render_table(t), flush=True)
    return t


def _pct(x):
    return [[100.0 * float(v) for v in row] for row in x]


def tables(args, ref, sweep, peer):
    from icml_sarsteer.analogue import matched_cells, matched_weights

    from icml import results, stats

    nb = 2000
    label = {"plain": "plain steering (lambda=0)",
             "sarsteer": f"SARSteer (k={args.k}, lambda=1)"}
    # 1. the sweep
    rows = []
    for method, per_seed in sweep.items():
        for j, a in enumerate(args.alphas):
            h = _pct([s["harmful"][j] for s in per_seed])
            b = _pct([s["benign"][j] for s in per_seed])
            rows.append([label[method], a, stats.hierarchical_ci(h, seed=0, n_boot=nb),
                         stats.hierarchical_ci(b, seed=0, n_boot=nb)])
    n_items = len(ref["no defense"]["harmful"])
    cells = n_items * len(args.seeds)
    sweep_t = results.make_table(
        f"SmolLM2-135M-Instruct, {args.form} (bypass) form, alpha sweep; seeds {args.seeds} "
        f"(fit-pair draws of {args.n_fit} pairs) x {n_items}+{n_items} fixed eval pairs; "
        "two-level bootstrap (icml.stats.hierarchical_ci, crossed)",
        ["defense", "alpha", "refusal on harmful % [95% CI]",
         "over-refusal on benign % [95% CI]"], rows, name="sweep",
        formats={"refusal on harmful % [95% CI]": ".1f",
                 "over-refusal on benign % [95% CI]": ".1f"})
    # 2. matched refusal
    mrows, matched, per_seed_diff = [], {}, []
    for method, per_seed in sweep.items():
        hs, bs, alphas_used = [], [], []
        for s in per_seed:
            hr = [sum(f) / len(f) for f in s["harmful"]]
            w = matched_weights(args.alphas, hr, args.target)
            if w is None:
                hs, bs = None, None
                break
            hs.append(matched_cells(s["harmful"], w))
            bs.append(matched_cells(s["benign"], w))
            j0, j1, wt = w
            alphas_used.append((1 - wt) * args.alphas[j0] + wt * args.alphas[j1])
        matched[method] = (hs, bs)
        if hs is None:
            mrows.append([label[method], "not reached", None, None, None, cells])
            continue
        mrows.append([label[method], f"{sum(alphas_used) / len(alphas_used):.3g}",
                      stats.hierarchical_ci(_pct(hs), seed=0, n_boot=nb),
                      stats.hierarchical_ci(_pct(bs), seed=0, n_boot=nb),
                      stats.mde_from_samples(_pct(bs), seed=0, n_boot=nb), cells])
    for name in ("no defense", "prompt defense (R appended)", "no defense, direct form"):
        h, b = _pct([ref[name]["harmful"]]), _pct([ref[name]["benign"]])
        mrows.append([name, "-", stats.mean_ci(h[0], seed=0, n_boot=nb),
                      stats.mean_ci(b[0], seed=0, n_boot=nb), None, n_items])
    diff = None
    if matched["plain"][1] is not None and matched["sarsteer"][1] is not None:
        a, b = _pct(matched["sarsteer"][1]), _pct(matched["plain"][1])
        diff = stats.hierarchical_diff_ci(a, b, seed=0, n_boot=nb)
        d_cells = [[x - y for x, y in zip(ra, rb, strict=True)] for ra, rb in zip(a, b,
                                                                                 strict=True)]
        mde = stats.mde_from_samples(d_cells, seed=0, n_boot=nb)
        per_seed_diff = [sum(r) / len(r) for r in d_cells]
        mrows.append(["SARSteer - plain (over-refusal, points)", "-", None, diff, mde, cells])
    matched_t = results.make_table(
        f"At matched harmful refusal {100 * args.target:.0f}% ({args.form} form): over-refusal "
        f"on benign, seeds {args.seeds}; per-seed SARSteer - plain: "
        + ", ".join(f"{d:+.1f}" for d in per_seed_diff),
        ["defense", "alpha (mean over seeds)", "refusal on harmful % [95% CI]",
         "over-refusal on benign % [95% CI]", "MDE (points)", "n"], mrows, name="matched",
        formats={"refusal on harmful % [95% CI]": ".1f",
                 "over-refusal on benign % [95% CI]": ".1f", "MDE (points)": ".1f"})
    out = [sweep_t, matched_t]
    if peer is not None:
        agree = [sum(x == y for x, y in zip(peer[f"ours_{k}"], peer[f"peer_{k}"], strict=True))
                 / len(peer[f"ours_{k}"]) for k in ("harmful", "benign")]
        out.append(results.make_table(
            f"Peer: steering-vectors 0.12 (SteeringVector.apply, token_indices=slice(-1, None))"
            f" with the plain direction of seed {args.seeds[0]} at alpha={args.peer_alpha}, "
            "vs this plugin's hooks",
            ["implementation", "refusal on harmful %", "over-refusal on benign %",
             "same judgement as ours %"],
            [["icml_sarsteer (greedy_arms, cached prefix)",
              100 * sum(peer["ours_harmful"]) / n_items,
              100 * sum(peer["ours_benign"]) / n_items, None],
             ["steering-vectors (generate)", 100 * sum(peer["peer_harmful"]) / n_items,
              100 * sum(peer["peer_benign"]) / n_items, 50 * (agree[0] + agree[1])]],
            name="peer", formats={"refusal on harmful %": ".1f",
                                  "over-refusal on benign %": ".1f",
                                  "same judgement as ours %": ".1f"}))
    for t in out:
        print("\n" + t["title"] + "\n\n" + results.render_table(t), flush=True)
    return out, diff


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--alphas", type=float, nargs="+",
                    default=[0.1, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.8, 1.0])
    ap.add_argument("--form", default="roleplay", choices=["roleplay", "direct"])
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--n-fit", type=int, default=16)
    ap.add_argument("--n-eval", type=int, default=40)
    ap.add_argument("--tokens", type=int, default=6)
    ap.add_argument("--target", type=float, default=0.5)
    ap.add_argument("--peer-alpha", type=float, default=0.0,
                    help="also run steering-vectors at this alpha (seed of --seeds[0]); 0 skips")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--peer-only", action="store_true",
                    help="only the steering-vectors comparison at --peer-alpha")
    ap.add_argument("--out-results", default=None)
    args = ap.parse_args()
    from icml import ConfigError, results

    if args.k < 1 or args.k > args.n_fit:
        raise ConfigError(f"--k={args.k}: between 1 and --n-fit ({args.n_fit})")
    if not 0 < args.target < 1:
        raise ConfigError(f"--target={args.target}: a rate strictly between 0 and 1")
    if args.peer_alpha and args.peer_alpha not in args.alphas:
        raise ConfigError(f"--peer-alpha={args.peer_alpha}: one of --alphas {args.alphas} "
                          "(or 0 to skip the peer)")
    clock = results.Clock()
    threads = results.apply_threads(args.threads)
    if args.peer_only:
        if not args.peer_alpha:
            raise ConfigError("--peer-only needs --peer-alpha > 0")
        t = peer_only(args)
        if args.out_results:
            import sys

            cmd = PEER_PATH + "python plugins/sarsteer/benchmarks/bench_analogue.py " + \
                " ".join(sys.argv[1:])
            print("results file:", results.write(
                args.out_results, [t], command=cmd, plugin="sarsteer", seeds=args.seeds[:1],
                quick=False, clock=clock, threads=threads))
        return
    ref, sweep, peer, samples = run(args)
    out, _ = tables(args, ref, sweep, peer)
    if args.out_results:
        import sys

        cmd = "python plugins/sarsteer/benchmarks/bench_analogue.py " + " ".join(sys.argv[1:])
        path = results.write(args.out_results, out, command=cmd, plugin="sarsteer",
                             seeds=args.seeds, quick=False, clock=clock, threads=threads,
                             metrics={"samples": samples})
        print(f"results file: {path}")


if __name__ == "__main__":
    main()
