"""LED on the real instruction-tuned model SmolLM2-135M-Instruct (offline, icml.models).

One command reproduces every real-model table of the README:

    python plugins/led/benchmarks/real_model.py   # 16 prompts, T 0.6 and 1.0, every arm

1. pass@k (k = 1..16) on the generated chat suite (:mod:`icml_led.suite`) for temperature
   sampling (top-k 20, top-p 0.95, the official baseline config), DoLa (transformers' algorithm,
   "high" layers), LED's base path alone (top-8 sampling = LED with d = 1) and LED (official d = 8,
   k = 8) at several temperatures; prompts are the unit of resampling (percentile bootstrap CIs),
   16 samples per prompt, one generator per sample. The LED - sampling difference is paired by
   prompt.
2. Layer-wise entropy profiles of the quantity LED reads (softmax(lm_head(h_i) / T) without the
   final norm, official ln=0) and of the standard logit lens (through the final norm), on the
   model's own replies (the first temperature-sampling sample per prompt), with a PNG.
3. Decoding cost per token with the KV cache at batch 1 and 8: transformers' own sampler, the
   plugin's sampling loop, DoLa, LED (lazy intermediate layers, the default) and LED computing
   every layer for every row, interleaved and repeated; ratios to transformers' sampler.

No peer is pip-installable (the official LED is a patched CUDA SGLang; transformers' DoLa lives on
the Hub), so DoLa is this plugin's re-implementation. Outputs go to --out (JSON + PNG).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from icml_led.evaluation import Method, run_chat_method
from icml_led.generate import DoLaDecoding, LEDDecoding, SamplingDecoding
from icml_led.layers import entropy_profiles
from icml_led.led import LEDConfig
from icml_led.metrics import bootstrap_ci
from icml_led.suite import make_suite

HERE = Path(__file__).resolve().parent


def methods(temperature: float, depth: int, top_k: int) -> dict[str, Method]:
    samp = {"do_sample": True, "temperature": temperature, "top_k": 20, "top_p": 0.95}
    led_kw = {"do_sample": True, "temperature": temperature}
    return {
        "sampling": Method("sampling (top-k 20, top-p 0.95)", lambda g: SamplingDecoding(g),
                           samp),
        "dola": Method("dola (high)", lambda g: DoLaDecoding("high", 0.1, g), samp),
        "top8": Method(f"top-{top_k} (LED d=1)",
                       lambda g: LEDDecoding(LEDConfig(depth=1, top_k=top_k), g), led_kw),
        "led": Method(f"led (d={depth}, k={top_k})",
                      lambda g: LEDDecoding(LEDConfig(depth=depth, top_k=top_k), g), led_kw),
        "led_norm": Method(f"led (d={depth}, k={top_k}, final norm)",
                           lambda g: LEDDecoding(LEDConfig(depth=depth, top_k=top_k,
                                                           use_final_norm=True), g), led_kw),
    }


def fmt_ci(m: float, lo: float, hi: float) -> str:
    return f"{m:.3f} [{lo:.3f}, {hi:.3f}]"


def quality(model, tok, args, log) -> dict:
    problems = make_suite(args.problems, seed=args.seed)
    res: dict = {"problems": [p.__dict__ for p in problems], "runs": {}}
    path = args.out / "real_model.json"
    if args.resume and path.is_file():
        old = json.loads(path.read_text())
        if old.get("problems") == res["problems"]:
            res["runs"] = old["runs"]
            log(f"resuming: {sorted(res['runs'])} already done")
    for other in args.merge:
        old = json.loads(Path(other).read_text())
        if old.get("problems") != res["problems"]:
            raise SystemExit(f"--merge {other}: different problems (--problems/--seed)")
        res["runs"].update(old["runs"])
        log(f"merged {sorted(old['runs'])} from {other}")
    ks = list(range(1, args.samples + 1))
    memo: dict = {}          # each prompt batch is prefilled once for every arm and temperature
    for t in args.temperatures:
        for key in args.methods:
            if f"{t:g}/{key}" in res["runs"] or args.tables_only:
                continue
            m = methods(t, args.depth, args.top_k)[key]
            t0, c0 = time.perf_counter(), time.process_time()
            r = run_chat_method(model, tok, problems, m, num_samples=args.samples,
                                seed=args.seed + 1, max_new_tokens=args.max_new_tokens,
                                problems_per_batch=args.per_batch, prefill_memo=memo)
            res["runs"][f"{t:g}/{key}"] = {
                "name": m.name, "T": t, "correct": r.correct, "seconds": r.seconds,
                "cpu_seconds": time.process_time() - c0,
                "tokens": r.tokens, "steps": r.steps, "explored": r.explored_fraction,
                "curve": [statistics.mean(r.pass_at(k)) for k in ks],
                "first_texts": [x[0] for x in r.texts],
                "texts_sha256": hashlib.sha256(json.dumps(r.texts).encode()).hexdigest()}
            log(f"T={t:g} {m.name}: pass@1 {res['runs'][f'{t:g}/{key}']['curve'][0]:.3f} "
                f"pass@{args.samples} {res['runs'][f'{t:g}/{key}']['curve'][-1]:.3f} "
                f"({time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU, "
                f"{r.tokens} tokens)")
            (args.out / "real_model.json").write_text(json.dumps(res, indent=1))
    return res


def quality_tables(res: dict, args) -> str:
    from icml_led.metrics import pass_at_k

    n = args.samples
    lines = [f"| T | method | pass@1 [95% CI] | pass@4 | pass@{n} [95% CI] | explored |",
             "|---|---|---|---|---|---|"]
    order = {"sampling": 0, "dola": 1, "top8": 2, "led": 3, "led_norm": 4}
    runs = sorted(res["runs"].items(), key=lambda kv: (kv[1]["T"], order.get(
        kv[0].split("/")[1], 9)))
    for _key, run in runs:
        c = run["correct"]
        p1 = bootstrap_ci([pass_at_k(n, x, 1) for x in c])
        p4 = statistics.mean(pass_at_k(n, x, min(4, n)) for x in c)
        pn = bootstrap_ci([pass_at_k(n, x, n) for x in c])
        ex = run["explored"]
        lines.append(f"| {run['T']:g} | {run['name']} | {fmt_ci(*p1)} | {p4:.3f} | "
                     f"{fmt_ci(*pn)} | {'-' if ex != ex else f'{ex:.3f}'} |")
    lines += ["", "Paired by prompt (bootstrap over prompts), LED minus each baseline:", "",
              f"| T | led | baseline | Δ pass@1 [95% CI] | Δ pass@{n} [95% CI] |",
              "|---|---|---|---|---|"]
    temps = sorted({run["T"] for run in res["runs"].values()})
    pairs = [("led", b) for b in ("sampling", "dola", "top8")] + [
        ("led_norm", b) for b in ("sampling", "dola", "top8", "led")]
    for t in temps:
        for lkey, key in pairs:
            led = res["runs"].get(f"{t:g}/{lkey}")
            base = res["runs"].get(f"{t:g}/{key}")
            if led is None or base is None:
                continue
            d1 = [pass_at_k(n, a, 1) - pass_at_k(n, b, 1)
                  for a, b in zip(led["correct"], base["correct"])]
            dn = [pass_at_k(n, a, n) - pass_at_k(n, b, n)
                  for a, b in zip(led["correct"], base["correct"])]
            lines.append(f"| {t:g} | {led['name']} | {base['name']} | "
                         f"{fmt_ci(*bootstrap_ci(d1))} | {fmt_ci(*bootstrap_ci(dn))} |")
    return "\n".join(lines)


def pass_at_k_plot(res: dict, args) -> None:
    from icml.report import line_plot

    for t in sorted({run["T"] for run in res["runs"].values()}):
        series = {run["name"]: (list(range(1, args.samples + 1)), run["curve"])
                  for run in res["runs"].values() if run["T"] == t}
        line_plot(args.out / f"pass_at_k_T{t:g}.png", series,
                  title=f"SmolLM2-135M-Instruct, chat suite, T={t:g}", xlabel="k",
                  ylabel="pass@k", logx=True)


def profiles(model, tok, res: dict, args) -> str:
    """Entropy per layer on the model's own replies (first sampling sample per problem)."""
    from icml.report import line_plot

    key = f"{args.temperatures[0]:g}/sampling"
    if key not in res["runs"]:
        key = next(iter(res["runs"]))
    probs = make_suite(args.problems, seed=args.seed)[:args.profile_problems]
    temps = (1.0, args.temperatures[0])
    rows: dict = {}
    count = 0
    for norm in (False, True):
        acc: dict = {}
        count = 0
        for p, reply in zip(probs, res["runs"][key]["first_texts"]):
            pi = tok(p.prompt(tok), add_special_tokens=False)["input_ids"]
            ri = tok(reply, add_special_tokens=False)["input_ids"]
            if not ri:
                continue
            ids = torch.tensor([pi + ri])
            mask = torch.zeros_like(ids, dtype=torch.bool)
            mask[0, len(pi) - 1:len(pi) + len(ri) - 1] = True   # positions predicting the reply
            prof = entropy_profiles(model, ids, mask, use_final_norm=norm, temperatures=temps)
            w = int(mask.sum())
            for t, v in prof.items():
                acc[t] = [a + w * x for a, x in zip(acc.get(t, [0.0] * len(v)), v)]
            count += w
        for t, v in acc.items():
            rows[(norm, t)] = [a / count for a in v]
    L = len(rows[(False, 1.0)])
    t0 = args.temperatures[0]
    series = {f"{'final norm' if n else 'no norm (LED, ln=0)'}, T={t:g}": (list(range(1, L + 1)),
                                                                        v)
              for (n, t), v in rows.items()}
    line_plot(args.out / "entropy_profile.png", series,
              title="SmolLM2-135M-Instruct: logit-lens entropy on its replies",
              xlabel="layer (30 = final)", ylabel="entropy (nats)")
    res["profiles"] = {f"norm={n},T={t:g}": v for (n, t), v in rows.items()}
    (args.out / "real_model.json").write_text(json.dumps(res, indent=1))
    shown = [1, 5, 10, 15, 20, 22, 24, 26, 27, 28, 29, 30]
    head = "| read-out | " + " | ".join(str(i) for i in shown) + " |"
    lines = [head, "|---|" + "---|" * len(shown)]
    for (n, t), v in rows.items():
        name = f"{'final norm' if n else 'no norm (what LED reads)'}, T={t:g}"
        lines.append(f"| {name} | " + " | ".join(f"{v[i - 1]:.2f}" for i in shown) + " |")
    lines.append(f"\n(tokens: {count}; layer 30 is the model's own logits; LED at d=8 reads "
                 f"30, 28, 27, ..., 22; T={t0:g} is the sampling temperature)")
    return "\n".join(lines)


def cost(model, tok, args, log) -> str:
    """ms per decoded token: each call starts from a copy of the prompts' prefilled KV cache
    (made outside the timer), so every timed step is a one-token forward plus the decoder."""
    import copy

    from icml_led.evaluation import shared_prefix_cache

    probs = make_suite(8, seed=args.seed + 7)
    n_new = args.cost_tokens
    T = args.temperatures[0]
    arms = {
        "transformers sampling (top-k 20, top-p 0.95)": (None, {"top_k": 20, "top_p": 0.95}),
        "sampling (this loop)": (lambda g: SamplingDecoding(g), {"top_k": 20, "top_p": 0.95}),
        "dola (high)": (lambda g: DoLaDecoding("high", 0.1, g), {"top_k": 20, "top_p": 0.95}),
        f"led (d={args.depth}, k={args.top_k})": (
            lambda g: LEDDecoding(LEDConfig(depth=args.depth, top_k=args.top_k), g), {}),
        "led, every layer every row (lazy=False)": (
            lambda g: LEDDecoding(LEDConfig(depth=args.depth, top_k=args.top_k), g,
                                  lazy=False), {}),
    }
    out = ["| batch | decoder | ms/token (median of reps) | vs transformers sampling | "
           "rows reading intermediate layers |", "|---|---|---|---|---|"]
    for B in (1, 8):
        enc = tok([p.prompt(tok) for p in probs[:B]], return_tensors="pt", padding=True,
                  add_special_tokens=False)
        cache = shared_prefix_cache(model, enc["input_ids"], enc["attention_mask"], 1)
        times: dict[str, list[float]] = {a: [] for a in arms}
        deep: dict[str, float] = {}
        for rep in range(args.cost_reps):
            for name, (make, kw) in arms.items():
                g = torch.Generator().manual_seed(rep)
                dec = make(g) if make else None
                gen_kw = dict(do_sample=True, temperature=T, max_new_tokens=n_new,
                              min_new_tokens=n_new, pad_token_id=tok.pad_token_id, **kw)
                if dec is not None:
                    gen_kw["custom_generate"] = dec
                else:
                    torch.manual_seed(rep)
                c = copy.deepcopy(cache)
                t0 = time.perf_counter()
                model.generate(**enc, cache=c, **gen_kw)
                times[name].append((time.perf_counter() - t0) / n_new * 1000)
                if isinstance(dec, LEDDecoding):
                    deep[name] = dec.stats["deep_rows"] / max(dec.stats["tokens"], 1)
        ref = statistics.median(times[next(iter(arms))])
        for name in arms:
            med = statistics.median(times[name])
            dr = f"{deep[name]:.2f}" if name in deep else "-"
            out.append(f"| {B} | {name} | {med:.1f} | {med / ref:.2f} | {dr} |")
        log(f"cost batch {B} done")
    return "\n".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=16)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--temperatures", type=lambda s: [float(x) for x in s.split(",")],
                    default=[0.6, 1.0])
    ap.add_argument("--methods", type=lambda s: s.split(","),
                    default=None,
                    help="comma list of arms: sampling, dola, top8, led, led_norm (LED reading "
                         "the intermediate layers through the final norm); default: all five")
    ap.add_argument("--full", action="store_true",
                    help="every arm (the default since 0.2.2; kept for old command lines)")
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--per-batch", type=int, default=4, help="problems per batch (x samples rows)")
    ap.add_argument("--profile-problems", type=int, default=8,
                    help="replies the entropy profile is averaged over")
    ap.add_argument("--cost-tokens", type=int, default=12)
    ap.add_argument("--cost-reps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip", default="", help="comma list of parts to skip: quality,profile,cost")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--merge", nargs="*", default=[],
                    help="also take the pass@k runs of these real_model.json files (runs made "
                         "by parallel processes with the same problems)")
    ap.add_argument("--tables-only", action="store_true",
                    help="with --resume: run no new pass@k arm, only tables/plots/profiles")
    ap.add_argument("--resume", action="store_true",
                    help="keep the pass@k runs already in --out/real_model.json (same problems)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.methods is None:
        args.methods = ["sampling", "dola", "top8", "led", "led_norm"]
    elif args.full:
        ap.error("--full and --methods do not go together: --full runs every arm")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - start:6.0f} s wall, {time.process_time():6.0f} s CPU] "
              f"{msg}", file=sys.stderr, flush=True)

    from icml.models import load_pretrained

    model, tok = load_pretrained("smollm2-135m-instruct")
    model.eval()
    tok.padding_side = "left"
    log(f"loaded SmolLM2-135M-Instruct ({model.config.num_hidden_layers} layers); torch "
        f"{torch.__version__}, {args.threads} thread(s)")
    skip = set(filter(None, args.skip.split(",")))
    report = []
    if "quality" not in skip:
        res = quality(model, tok, args, log)
        report += [f"## pass@k ({args.problems} prompts x {args.samples} samples, max "
                   f"{args.max_new_tokens} new tokens)", "", quality_tables(res, args), ""]
        pass_at_k_plot(res, args)
        log("pass@k arms done")
        if "profile" not in skip:
            report += ["## entropy profile (nats, mean over reply tokens)", "",
                       profiles(model, tok, res, args), ""]
            log("profiles done")
    if "cost" not in skip:
        report += [f"## decoding cost ({args.cost_tokens} new tokens, KV cache, T="
                   f"{args.temperatures[0]:g}, {args.cost_reps} interleaved reps)", "",
                   cost(model, tok, args, log), ""]
    report.append(f"total {time.perf_counter() - start:.0f} s wall, {time.process_time():.0f} s "
                  f"CPU (one thread: the CPU time is the wall time on an idle machine)")
    text = "\n".join(report)
    (args.out / "real_model.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
