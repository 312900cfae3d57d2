"""LED on the real instruction-tuned model SmolLM2-135M-Instruct (offline, icml.models).

One command reproduces every real-model table of the README:

    python plugins/led/benchmarks/real_model.py --out-results plugins/led/results/real_model.json
    # 16 prompts, T 0.6 and 1.0, every arm; the tables also go to that icml results file

1. pass@k (k = 1..16) on the generated chat suite (:mod:`icml_led.suite`) for temperature
   sampling (top-k 20, top-p 0.95, the official baseline config), DoLa (transformers' algorithm,
   "high" layers), LED's base path alone (top-8 sampling = LED with d = 1) and LED (official d = 8,
   k = 8) at several temperatures; prompts are the unit of resampling (icml.stats bootstrap
   CIs, MDEs, McNemar), 16 samples per prompt, one generator per sample. The LED - sampling
   difference is paired by prompt.
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
from icml_led.suite import make_suite

HERE = Path(__file__).resolve().parent
# the cost table's clock columns: shown, never compared (the machine is shared); every other
# cell is exact (seeded generators, one thread)
TOLERANCE = {c: {"timing": True, "why": "clock reading on a shared 2-core CPU"}
             for c in ("ms/token (median of reps)", "vs transformers sampling")}


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


_ORDER = {"sampling": 0, "dola": 1, "top8": 2, "led": 3, "led_norm": 4}
_PAIRS = [("led", b) for b in ("sampling", "dola", "top8")] + [
    ("led_norm", b) for b in ("sampling", "dola", "top8", "led")]


def quality_rows(res: dict, args) -> tuple[list[list], list[list]]:
    """Rows of the pass@k table and of the paired LED-minus-baseline table, with every interval,
    test and MDE from :mod:`icml.stats` (one sampling seed: prompts are the resampled unit).

    pass@1 per prompt is ``c / n`` (a mean of 0/1 samples); pass@n per prompt is "solved at least
    once" (0/1), so paired pass@n differences also get McNemar's exact test. MDEs are at alpha
    0.05 and power 0.8: of a pass@1 mean against a fixed value (bootstrap SE over prompts), of a
    paired pass@1 difference (bootstrap SE of the per-prompt differences) and of a paired pass@n
    difference (worst-case discordance for the pair's mean accuracy, ``mde_proportion``)."""
    from icml_led.metrics import pass_at_k

    from icml import stats

    n = args.samples
    runs = sorted(res["runs"].items(), key=lambda kv: (kv[1]["T"], _ORDER.get(
        kv[0].split("/")[1], 9)))
    rows = []
    for _key, run in runs:
        c = run["correct"]
        v1 = [pass_at_k(n, x, 1) for x in c]
        p4 = statistics.mean(pass_at_k(n, x, min(4, n)) for x in c)
        pn = stats.mean_ci([pass_at_k(n, x, n) for x in c], seed=0)
        ex = run["explored"]
        rows.append([f"{run['T']:g}", run["name"], stats.mean_ci(v1, seed=0),
                     stats.mde_from_samples(v1, seed=0), p4, pn,
                     "-" if ex != ex else ex])
    paired = []
    for t in sorted({run["T"] for run in res["runs"].values()}):
        for lkey, key in _PAIRS:
            led = res["runs"].get(f"{t:g}/{lkey}")
            base = res["runs"].get(f"{t:g}/{key}")
            if led is None or base is None:
                continue
            d1 = [pass_at_k(n, a, 1) - pass_at_k(n, b, 1)
                  for a, b in zip(led["correct"], base["correct"])]
            sa = [int(a > 0) for a in led["correct"]]
            sb = [int(b > 0) for b in base["correct"]]
            dn = [x - y for x, y in zip(sa, sb)]
            acc = (sum(sa) + sum(sb)) / (2 * len(sa))
            paired.append([f"{t:g}", led["name"], base["name"],
                           stats.paired_diff_ci(d1, [0.0] * len(d1), seed=0),
                           stats.mde_from_samples(d1, seed=0),
                           stats.paired_diff_ci(dn, [0] * len(dn), seed=0),
                           stats.mcnemar(sa, sb).p_value,
                           stats.mde_proportion(len(sa), p=acc, paired=True)])
    return rows, paired


def _cell(v, spec: str = ".3f") -> str:
    if hasattr(v, "fmt"):
        return v.fmt(spec)
    return v if isinstance(v, str) else f"{v:{spec}}"


def quality_tables(res: dict, args) -> str:
    n = args.samples
    rows, paired = quality_rows(res, args)
    lines = [f"| T | method | pass@1 [95% CI] | MDE pass@1 | pass@4 | pass@{n} [95% CI] | "
             "explored |", "|---|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(v) for v in r) + " |" for r in rows]
    lines += ["", "Paired by prompt (bootstrap over prompts), LED minus each baseline:", "",
              f"| T | led | baseline | Δ pass@1 [95% CI] | MDE Δ pass@1 | Δ pass@{n} [95% CI] | "
              f"McNemar p (pass@{n}) | MDE Δ pass@{n} |", "|---|---|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(v) for v in r) + " |" for r in paired]
    return "\n".join(lines)


def quality_results(res: dict, args) -> list[dict]:
    """The two quality tables as results-file tables (estimates kept as dicts)."""
    from icml.results import make_table

    n = args.samples
    rows, paired = quality_rows(res, args)
    three = ".3f"
    prompts = len(next(iter(res["runs"].values()))["correct"])
    t1 = make_table(f"pass@k ({prompts} prompts x {n} samples)",
                    ["T", "method", "pass@1 [95% CI]", "MDE pass@1", "pass@4",
                     f"pass@{n} [95% CI]", "explored"], rows, name="passk",
                    formats={"pass@1 [95% CI]": three, "MDE pass@1": three, "pass@4": three,
                             f"pass@{n} [95% CI]": three, "explored": three})
    t2 = make_table("LED minus each baseline, paired by prompt",
                    ["T", "led", "baseline", "Δ pass@1 [95% CI]", "MDE Δ pass@1",
                     f"Δ pass@{n} [95% CI]", f"McNemar p (pass@{n})", f"MDE Δ pass@{n}"],
                    paired, name="paired",
                    formats={"Δ pass@1 [95% CI]": three, "MDE Δ pass@1": three,
                             f"Δ pass@{n} [95% CI]": three, f"McNemar p (pass@{n})": three,
                             f"MDE Δ pass@{n}": three})
    return [t1, t2]


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
    _collect(args, "profile", "entropy profile (nats, mean over reply tokens)",
             ["read-out"] + [str(i) for i in shown],
             [[f"{'final norm' if n else 'no norm (what LED reads)'}, T={t:g}"]
              + [v[i - 1] for i in shown] for (n, t), v in rows.items()],
             {str(i): ".2f" for i in shown})
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
    cost_rows: list[list] = []
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
            cost_rows.append([B, name, med, med / ref, deep.get(name, "-")])
        log(f"cost batch {B} done")
    _collect(args, "cost", f"decoding cost ({n_new} new tokens, KV cache, T={T:g}, "
             f"{args.cost_reps} interleaved reps)",
             ["batch", "decoder", "ms/token (median of reps)", "vs transformers sampling",
              "rows reading intermediate layers"], cost_rows,
             {"ms/token (median of reps)": ".1f", "vs transformers sampling": ".2f",
              "rows reading intermediate layers": ".2f"})
    return "\n".join(out)


def _collect(args, name: str, title: str, columns: list, rows: list, formats: dict) -> None:
    """Add a table to ``args.tables`` (the results file's tables), when collecting."""
    from icml.results import make_table

    if getattr(args, "tables", None) is not None:
        args.tables.append(make_table(title, columns, rows, name=name, formats=formats))


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
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads ($ICML_THREADS overrides, as for icml reproduce)")
    ap.add_argument("--out-results", default=None,
                    help="also write the README's tables as an icml results file (path from "
                         "the repository root, e.g. plugins/led/results/real_model.json)")
    args = ap.parse_args(argv)
    if args.methods is None:
        args.methods = ["sampling", "dola", "top8", "led", "led_norm"]
    elif args.full:
        ap.error("--full and --methods do not go together: --full runs every arm")
    return args


def main(argv: list[str] | None = None) -> None:
    import shlex

    from icml import results as icml_results

    args = parse_args(argv)
    clock = icml_results.Clock()
    args.threads = icml_results.apply_threads(args.threads)
    args.tables = []
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
        args.tables += quality_results(res, args)
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
    if args.out_results:
        argv_used = sys.argv[1:] if argv is None else argv
        command = "python plugins/led/benchmarks/real_model.py " + shlex.join(argv_used)
        path = icml_results.write(
            args.out_results, args.tables, command=command.strip(), plugin="led",
            seeds=[args.seed], quick=False, clock=clock, threads=args.threads,
            tolerance=TOLERANCE,
            notes="pass@k CIs: percentile bootstrap over prompts (one sampling seed; 16 seeded "
                  "samples per prompt); paired pass@16 also McNemar's exact test; MDEs at "
                  "alpha 0.05, power 0.8 (icml.stats).")
        log(f"results file: {path}")


if __name__ == "__main__":
    main()
