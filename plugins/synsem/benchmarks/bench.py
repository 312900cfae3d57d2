"""Benchmark for icml-synsem, in one run:

1. extraction: batched ``extract_sentence_reps`` (length-bucketed batches, base model without LM
   head or KV cache) vs a naive per-sentence loop in the style of the official code (full causal
   LM forward per sentence, hidden states clipped with ``torch.quantile``), on the planted toy
   Llama and on a random byte-level tiny Llama with sentences of varying length. Each variant is
   timed twice in a fresh subprocess: the full pipeline (forward + clipping + pooling) and
   forward + pooling only (no clipping: the naive loop's ``torch.quantile`` is post-processing
   that batching does not touch). Sentences per second of wall-clock and of process CPU time,
   extra peak RSS, speed ratios and the largest difference between the outputs (relative to
   the naive output's largest magnitude, flagged above 1e-4). The official script clips every
   hidden state (it stores all layers); that variant is a third row, for reference.
   ``--models smollm2`` runs the real pretrained model (SmolLM2-135M-Instruct) on the
   controlled English data; ``--sweep`` adds batch_tokens settings of the batched path;
2. a layer subset without the last layer (byte model, or SmolLM2 with the naive loop too): the
   forward stops early; on SmolLM2 also the matmul floor (``gemm_floor``) of each arm;
3. end-to-end time of the full protocol (default job: planted model, generated data);
4. Information Imbalance against the peer ``dadapy`` (pip package of the Laio group) when
   ``--peer-python`` names an interpreter that has it (dadapy pins numpy/jax versions, so it
   lives in its own environment): values on the same points and time.

    python benchmarks/bench.py [--n 512] [--repeats 2] [--peer-python /path/to/venv/bin/python]
    python benchmarks/bench.py --models smollm2 --n 128 --repeats 1 --threads 1 --skip-protocol

``--out-results FILE`` also writes every printed table to a results file (``icml.results``) that
the README renders; rates, memory, speed ratios and the batched-vs-naive differences depend on
the machine, its load and its BLAS kernels, so they are declared ``timing`` (shown, never
compared); the protocol's recalls and Information Imbalance are compared exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from icml_synsem.config import ExtractionOptions

TABLES: list[dict] = []  # what --out-results writes (icml.results tables)
# columns whose cells are read off this machine's clock, memory or float kernels
MEASURED = ("sent/s", "sentences/s", "RSS", " vs ", "speed", "diff", "matmuls", "GFLOP",
            "measured", "bound",
            "ratio", "setup s", "protocol s", "total s", "time / ours")


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _setup(kind: str, n: int):
    import random

    import torch

    if kind == "smollm2":  # the real pretrained model on the controlled English data
        from icml_synsem import make_english_data

        from icml.models import load_pretrained

        model, tok = load_pretrained("smollm2-135m-instruct")
        data = make_english_data(per_template=8, seed=0)
        sents = [s for part in (data.originals, data.twins, data.paraphrases,
                                *data.translations.values()) for s in part]
        random.Random(0).shuffle(sents)
        return model, tok, sents[:n]
    if kind == "planted":
        from icml_synsem import make_toy_data, planted_llama, toy_tokenizer

        data, lex = make_toy_data(n_templates=64, per_template=max(1, n // 64), seed=0)
        return planted_llama(lex), toy_tokenizer(lex), data.originals[:n]
    from icml.models import byte_tokenizer, tiny_causal_lm

    rng = random.Random(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "while", "dogs", "barked", "loudly",
             "near", "old", "houses", "and", "children", "played", "outside", "today"]
    sents = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) for _ in range(n)]
    torch.manual_seed(0)
    return (tiny_causal_lm("llama", hidden_size=256, num_layers=4, num_heads=8, num_kv_heads=4,
                           seed=0), byte_tokenizer(), sents)


def naive_reps(model, tok, sentences, layers, last_n=3, q=(0.05, 0.95), clip_layers="requested"):
    """Per-sentence loop in the style of the official extraction script: the full causal LM
    forward (with its LM head) per sentence, hidden states clipped with ``torch.quantile``, then
    the last-n mean. ``q=None`` skips the clipping (forward + pooling only).
    ``clip_layers="requested"`` clips only the layers that are returned (the honest baseline);
    ``"all"`` clips every hidden state as the official script does (it stores all layers)."""
    import torch

    out = []
    for s in sentences:
        ids = tok(s, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            hs = model(**ids, output_hidden_states=True).hidden_states
        keep = layers if clip_layers == "requested" else list(range(len(hs)))
        h = torch.stack([hs[layer] for layer in keep])[:, 0]
        if q is not None:
            n_l, t, d = h.shape
            flat = h.float().reshape(n_l, t * d)
            lo = flat.quantile(q[0], dim=1, keepdim=True)
            hi = flat.quantile(q[1], dim=1, keepdim=True)
            h = flat.clamp(min=lo, max=hi).reshape(n_l, t, d)
        if clip_layers != "requested":
            h = h[layers]
        out.append(h[:, -last_n:].float().mean(1))
    return torch.stack(out, dim=1)


def gemm_floor(model, tok, sents, layers, batch_tokens: int = 1024) -> dict:
    """CPU time of the model's matmuls alone, at the shapes each arm runs them: every linear
    layer of the blocks that the arm needs, on ``[T_i, in]`` per sentence plus the LM head
    (naive loop), or on ``[sum of the batch's padded tokens, in]`` per length batch without the
    head (batched). No attention, norms or Python around them: a floor under each arm."""
    import torch
    from icml_synsem import num_layers
    from icml_synsem.representations import decoder_blocks, length_batches

    n_layers = num_layers(model)
    blocks = decoder_blocks(model.base_model, n_layers)
    deep = max(layers) if max(layers) < n_layers else n_layers
    weights = [m.weight for blk in list(blocks)[:deep] for m in blk.modules()
               if isinstance(m, torch.nn.Linear)]
    every = [m.weight for blk in blocks for m in blk.modules() if isinstance(m, torch.nn.Linear)]
    head = model.get_output_embeddings().weight
    lens = [len(x) for x in tok(list(sents), add_special_tokens=False)["input_ids"]]
    rows = [len(b) * max(lens[i] for i in b) for b in length_batches(lens, 64, batch_tokens)]
    res = {}
    with torch.inference_mode():
        for name, ms, ws in (("naive", lens, every + [head]), ("batched", rows, weights)):
            c0 = time.process_time()
            for m in ms:
                for w in ws:
                    torch.nn.functional.linear(torch.ones(m, w.shape[1]), w)
            res[name] = time.process_time() - c0
        res["flop_batched"] = sum(2 * m * w.numel() for m in rows for w in weights)
    return res


def worker(kind: str, variant: str, n: int, out_path: str, layer_spec: str) -> None:
    """Time one variant in a fresh process: the full pipeline (forward + clipping + pooling), then
    forward + pooling only (no clipping) unless the variant is the official all-layer clipping."""
    import torch
    from icml_synsem import extract_sentence_reps, num_layers, resolve_layers
    from icml_synsem.representations import cast_parameters

    if os.environ.get("SYNSEM_BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["SYNSEM_BENCH_THREADS"]))
    model, tok, sents = _setup(kind, n)
    layers = resolve_layers(None if layer_spec == "default" else
                            [int(x) for x in layer_spec.split(",")], num_layers(model))

    if variant == "gemm":
        res = gemm_floor(model, tok, sents, layers)
        torch.save({}, out_path)
        print(json.dumps(res))
        return
    variant, _, dtype = variant.partition(":")  # "batched:bfloat16": the forward in bfloat16
    base, _, bt = variant.partition("@")  # "batched@2048": batch_tokens=2048
    opts = {"batch_tokens": int(bt)} if bt else {}
    target = getattr(torch, dtype) if dtype else None

    def run(q):
        clip = {"clip": False} if q is None else {"clip_low": q[0], "clip_high": q[1]}
        if base == "batched":  # what a user gets: ExtractionOptions(dtype=...) casts per call
            return extract_sentence_reps(model, tok, sents, ExtractionOptions(
                layers=layers, dtype=dtype or "model", **clip, **opts))
        if base == "batched-no-stop":
            return extract_sentence_reps(model, tok, sents, ExtractionOptions(
                layers=layers, stop_early=False, dtype=dtype or "model", **clip, **opts))
        if base == "batched-nobucket":  # batches of 64 in input order, one cast for all
            with cast_parameters(model, target):
                return torch.cat([extract_sentence_reps(
                    model, tok, sents[i:i + 64], ExtractionOptions(
                        layers=layers, batch_size=64, batch_tokens=0, **clip))
                    for i in range(0, len(sents), 64)], dim=1)
        with cast_parameters(model, target):  # the naive loops: one cast for all sentences
            return naive_reps(model, tok, sents, layers, q=q,
                              clip_layers="all" if base == "official" else "requested")

    # warm-up on a few sentences so one-time costs are not timed
    with cast_parameters(model, target):  # in the arm's dtype
        extract_sentence_reps(model, tok, sents[:8], ExtractionOptions(layers=layers))
        naive_reps(model, tok, sents[:2], layers)
    before = _rss_mb()
    res = {}
    t0, c0 = time.perf_counter(), time.process_time()
    full = run((0.05, 0.95))
    res["full"], res["full_cpu"] = time.perf_counter() - t0, time.process_time() - c0
    res["extra_peak_mb"] = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                               - before, 0.0)
    saved = {"full": full}
    if base != "official":
        t0, c0 = time.perf_counter(), time.process_time()
        saved["extract"] = run(None)
        res["extract"], res["extract_cpu"] = time.perf_counter() - t0, time.process_time() - c0
    torch.save(saved, out_path)
    print(json.dumps(res))


def run_worker(kind: str, variant: str, n: int, tmp: Path, layer_spec: str = "default") -> dict:
    out = tmp / f"{kind}-{variant}-{time.monotonic_ns()}.pt"
    proc = subprocess.run([sys.executable, __file__, "--worker", kind, variant, str(n), str(out),
                           layer_spec], capture_output=True, text=True, check=True)
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["path"] = out
    return res


def fastest(kind: str, variants: list[str], n: int, tmp: Path, repeats: int,
            layer_spec: str = "default") -> dict[str, dict]:
    """Alternate the variants and keep each one's fastest run per timing: on a shared machine a
    single run of each measures the load as much as the code."""
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for _ in range(repeats):
        for v in variants:
            runs[v].append(run_worker(kind, v, n, tmp, layer_spec))
    best = {}
    for v, rs in runs.items():
        best[v] = {key: min(r[key] for r in rs) for key in rs[0] if key != "path"}
        best[v]["path"] = rs[0]["path"]  # outputs are identical across runs
    return best


PEER_CODE = """
import importlib.util, json, sys, time, types
import numpy as np
# dadapy's package __init__ imports jax (for its differentiable imbalance); only the
# metric_comparisons module is needed here, so load it without running that __init__
spec = importlib.util.find_spec("dadapy")
pkg = types.ModuleType("dadapy")
pkg.__path__ = list(spec.submodule_search_locations)
sys.modules["dadapy"] = pkg
from dadapy.metric_comparisons import MetricComparisons
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
t0 = time.perf_counter()
mc = MetricComparisons(coordinates=np.hstack([a, b]), maxk=a.shape[0] - 1, verbose=False)
da = a.shape[1]
imb = mc.return_inf_imb_two_selected_coords(list(range(da)),
                                            list(range(da, da + b.shape[1])), k=1)
print(json.dumps({"ab": float(imb[0]), "ba": float(imb[1]),
                  "seconds": time.perf_counter() - t0}))
"""


def peer_imbalance(peer_python: str, tmp: Path) -> list[list]:
    import numpy as np
    from icml_synsem import information_imbalance

    rng = np.random.default_rng(0)
    full = rng.normal(size=(400, 6))
    cases = {"independent (N=400)": (full, rng.normal(size=(400, 6))),
             "full -> 2 coords (N=400)": (full, full[:, :2]),
             "noisy copy (N=400)": (full, full + 0.5 * rng.normal(size=full.shape))}
    rows = []
    for name, (a, b) in cases.items():
        np.save(tmp / "a.npy", a)
        np.save(tmp / "b.npy", b)
        t0 = time.perf_counter()
        ours = information_imbalance(a, b, k=1, metric="l2")
        ours_s = time.perf_counter() - t0
        proc = subprocess.run([peer_python, "-c", PEER_CODE, str(tmp / "a.npy"),
                               str(tmp / "b.npy")], capture_output=True, text=True)
        if proc.returncode != 0:
            rows.append([name, f"{ours[0]:.3f} / {ours[1]:.3f}", "peer failed", "", ""])
            continue
        peer = json.loads(proc.stdout.strip().splitlines()[-1])
        n = a.shape[0]
        # dadapy: 2/N * mean rank (ranks from 1); ours: 2/(N-2) * mean(rank - 1)
        conv = [2 * (p * n / 2 - 1) / (n - 2) for p in (peer["ab"], peer["ba"])]
        rows.append([name, f"{ours[0]:.4f} / {ours[1]:.4f}", f"{conv[0]:.4f} / {conv[1]:.4f}",
                     f"{max(abs(ours[0] - conv[0]), abs(ours[1] - conv[1])):.1e}",
                     f"{peer['seconds'] / ours_s:.1f}"])
    return rows


LABELS = {"naive:bfloat16": "naive loop, bfloat16",
          "batched:bfloat16": "batched (batch_tokens=1024), bfloat16",
          "batched-nobucket": "batched, 64 sentences per batch in input order (no bucketing)",
          "batched-nobucket:bfloat16": "batched, 64 sentences per batch in input order (no "
                                       "bucketing), bfloat16"}


def padding(kind: str, n: int) -> dict[str, float]:
    """Padded tokens over real tokens of the draw: length-bucketed batches (the default
    ``length_batches``) and 64-sentence batches in input order."""
    from icml_synsem.representations import length_batches, tokenize

    _, tok, sents = _setup(kind, n)
    lens = [len(x) for x in tokenize(tok, sents, False)]
    o = ExtractionOptions()
    chunks = [list(range(i, min(i + 64, len(lens)))) for i in range(0, len(lens), 64)]
    real = sum(lens)
    return {name: sum(len(b) * max(lens[i] for i in b) for b in batches) / real
            for name, batches in (("bucketed", length_batches(lens, o.batch_size,
                                                              o.batch_tokens)),
                                  ("input order", chunks))}


def precision_rows(res: dict, pad: dict[str, float]) -> list[list]:
    """The precision table: the goal's cross-precision ratio (batched bfloat16 vs the float32
    naive loop) and, beside it, the same-precision ratios and what bucketing and bfloat16 each
    give on their own."""
    def both(slow: str, fast: str) -> list[str]:
        return [_ratio(res[slow], res[fast], "full"), _ratio(res[slow], res[fast], "extract")]

    bk, order = f"{pad['bucketed']:.2f}", f"{pad['input order']:.2f}"
    return [
        ["**cross-precision (the goal, >= 5x): batched bfloat16 vs naive float32 loop**",
         *[f"**{x}**" for x in both("naive", "batched:bfloat16")], f"{bk} / 1.00"],
        ["same precision, float32: batched vs naive loop", *both("naive", "batched"),
         f"{bk} / 1.00"],
        ["same precision, bfloat16: batched vs naive loop",
         *both("naive:bfloat16", "batched:bfloat16"), f"{bk} / 1.00"],
        ["bucketing, float32: length-bucketed batches vs 64 per batch in input order",
         *both("batched-nobucket", "batched"), f"{bk} / {order}"],
        ["bucketing, bfloat16: length-bucketed batches vs 64 per batch in input order",
         *both("batched-nobucket:bfloat16", "batched:bfloat16"), f"{bk} / {order}"],
        ["precision alone, batched: bfloat16 vs float32", *both("batched", "batched:bfloat16"),
         f"{bk} / {bk}"],
        ["precision alone, naive loop: bfloat16 vs float32",
         *both("naive", "naive:bfloat16"), "1.00 / 1.00"],
    ]


def _rate(n: int, r: dict, key: str) -> str:
    """Sentences per second of wall-clock / of process CPU time."""
    return f"{n / r[key]:.3g} / {n / r[key + '_cpu']:.3g}"


def _ratio(slow: dict, fast: dict, key: str = "full") -> str:
    return f"{slow[key] / fast[key]:.1f}x / {slow[key + '_cpu'] / fast[key + '_cpu']:.1f}x"


def _diff(a, b, tol: float = 1e-4) -> str:
    """Largest absolute difference, relative to the largest magnitude of ``b``; flagged when it
    exceeds ``tol`` (float32 batched vs single-sentence matmuls differ in the last bits)."""
    rel = float((a - b).abs().max() / b.abs().max())
    return f"{rel:.1e}" + ("" if rel <= tol else " (ABOVE TOLERANCE)")


def table(title: str, cols: list[str], rows: list[list], name: str = "") -> str:
    if name:
        from icml import results as R

        TABLES.append(R.make_table(title, cols, rows, name=name))
    lines = [f"### {title}", "", "| " + " | ".join(cols) + " |",
             "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=512, help="sentences per extraction benchmark")
    ap.add_argument("--peer-python", default="", help="python with dadapy installed")
    ap.add_argument("--repeats", type=int, default=2,
                    help="runs per extraction variant (alternating); the fastest is reported")
    ap.add_argument("--models", default="planted,byte",
                    help="comma-separated: planted, byte, smollm2 (the real pretrained model)")
    ap.add_argument("--stop-layers", default="",
                    help="layer subset without the last layer for the early-stop table "
                    "(default: 1,2 on byte; 1,3,5,7,9,11,13,16 on smollm2)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    ap.add_argument("--sweep", default="",
                    help="extra batch_tokens values timed for the batched path on smollm2, "
                    "e.g. 512,2048,4096")
    ap.add_argument("--dtypes", default="float32",
                    help="comma-separated forward dtypes (float32, bfloat16): with "
                    "bfloat16, bfloat16 arms of the naive loop and the batched path, 64-sentence "
                    "batches in input order (no bucketing) in each dtype, and the precision "
                    "table (cross-precision and same-precision speed-ups)")
    ap.add_argument("--skip-protocol", action="store_true", help="skip the end-to-end toy run")
    ap.add_argument("--out-results", default="", help="write the tables as a results file")
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.threads:
        os.environ["SYNSEM_BENCH_THREADS"] = str(args.threads)
    if args.worker:
        kind, variant, n, out, layer_spec = args.worker
        worker(kind, variant, int(n), out, layer_spec)
        return
    import torch
    from icml_synsem import centroid_ablation_profile, toy_setup

    from icml import results as R

    clock = R.Clock()

    out = [f"load average at start: {os.getloadavg()[0]:.1f} (1 min), "
           f"{os.getloadavg()[1]:.1f} (5 min); torch threads per worker: "
           f"{args.threads or 'torch default'}"]
    sweep = [int(x) for x in args.sweep.split(",") if x]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows, ratios, precision = [], [], []
        dtypes = [x for x in args.dtypes.split(",") if x]
        bad = [x for x in dtypes if x not in ("float32", "bfloat16")]
        if bad:
            raise SystemExit(f"--dtypes: unknown {bad}; choose from float32, bfloat16")
        kinds = [k for k in args.models.split(",") if k]
        for kind in kinds:
            extra = [f"batched@{bt}" for bt in sweep] if kind == "smollm2" else []
            if "bfloat16" in dtypes:
                extra += ["naive:bfloat16", "batched:bfloat16", "batched-nobucket",
                          "batched-nobucket:bfloat16"]
            res = fastest(kind, ["naive", "batched", "official"] + extra, args.n, tmp,
                          args.repeats)
            saved = {v: torch.load(r["path"]) for v, r in res.items()}
            nv = res["naive"]
            labels = [("naive", "naive loop"), ("batched", "batched (batch_tokens=1024)"),
                      ("official", "naive loop, every layer clipped (official script)")]
            labels += [(v, f"batched, batch_tokens={v.split('@')[1]}") for v in extra
                       if "@" in v]
            labels += [(v, LABELS[v]) for v in extra if v in LABELS]
            for v, label in labels:
                r = res[v]
                diff = "-"
                tol = 1e-1 if "bfloat16" in v else 1e-4  # bfloat16: 8 mantissa bits
                if v != "naive":
                    diff = _diff(saved[v]["full"], saved["naive"]["full"], tol)
                    if "extract" in saved[v]:
                        diff += " / " + _diff(saved[v]["extract"], saved["naive"]["extract"],
                                              tol)
                rows.append([kind, label, _rate(args.n, r, "full"),
                             _rate(args.n, r, "extract") if "extract" in r else "-",
                             f"{r['extra_peak_mb']:.0f}", diff])
            b = res["batched"]
            if "batched:bfloat16" in res:
                precision += [[kind] + r for r in precision_rows(res, padding(kind, args.n))]
            if kind == "smollm2":
                floors = [("default (15, incl. the last)", run_worker(kind, "gemm", args.n, tmp),
                           nv, b)]
            ratios.append([kind] + [f"{nv[k] / b[k]:.1f}x / {nv[k + '_cpu'] / b[k + '_cpu']:.1f}x"
                                    for k in ("full", "extract")]
                          + [f"{res['official']['full'] / b['full']:.1f}x / "
                             f"{res['official']['full_cpu'] / b['full_cpu']:.1f}x"])
        out.append(table(f"Extraction of {args.n} sentences (layers: default half incl. the last; "
                         f"fastest of {args.repeats} alternating runs, each in a fresh process)",
                         ["model", "method", "full pipeline sent/s wall / CPU",
                          "forward + pooling sent/s wall / CPU", "extra peak RSS MB",
                          "max abs diff vs naive, relative to its max abs value (full / fwd+pool)"],
                         rows, name="extraction"))
        out.append(table("Speed-up of the batched extraction (goal: >= 5x), wall-clock / CPU "
                         "time",
                         ["model", "full pipeline vs naive", "forward + pooling vs naive",
                          "full vs official script (all layers clipped)"], ratios,
                         name="speedup"))
        if precision:
            out.append(table(
                "Default layers (every block runs): cross-precision and same-precision "
                "speed-ups (slower arm's time / faster arm's time), wall-clock / CPU time",
                ["model", "comparison", "full pipeline speed-up", "forward + pooling speed-up",
                 "padded tokens over real tokens (faster / slower arm)"], precision,
                name="precision"))
        # a layer subset without the last layer: the forward stops after the deepest one
        kind = "smollm2" if "smollm2" in kinds else "byte"
        spec = args.stop_layers or ("1,3,5,7,9,11,13,16" if kind == "smollm2" else "1,2")
        variants = ["batched-no-stop", "batched"] + (["naive"] if kind == "smollm2" else [])
        res = fastest(kind, variants, args.n, tmp, args.repeats, spec)
        nb = res["batched-no-stop"]
        early = torch.load(res["batched"]["path"])["full"]
        rows = [["batched, every block (stop_early=False)", _rate(args.n, nb, "full"),
                 "1.0x / 1.0x", "-"],
                ["batched, stops after the deepest requested block (default)",
                 _rate(args.n, res["batched"], "full"), _ratio(nb, res["batched"]),
                 _diff(early, torch.load(nb["path"])["full"])]]
        if "naive" in res:
            naive = torch.load(res["naive"]["path"])["full"]
            rows.append(["naive per-sentence loop (every block)",
                         _rate(args.n, res["naive"], "full"), _ratio(nb, res["naive"]),
                         _diff(early, naive)])
            rows.append(["-> batched with early stop vs naive loop", "",
                         "**" + _ratio(res["naive"], res["batched"]) + "**", ""])
        out.append(table(f"{kind}, layers [{spec}] ({args.n} sentences, full pipeline)",
                         ["method", "sentences/s wall / CPU", "speed vs every block, wall / CPU",
                          "max abs diff (relative)"], rows, name="early_stop"))
        if "naive" in res:
            floors.append((f"[{spec}] (early stop)", run_worker(kind, "gemm", args.n, tmp, spec),
                           res["naive"], res["batched"]))
            rows = [[name, f"{g['naive']:.1f}", f"{g['batched']:.1f}",
                     f"{g['flop_batched'] / g['batched'] / 1e9:.0f}",
                     f"{nv_['full_cpu']:.1f}", f"{b_['full_cpu']:.1f}",
                     f"{g['naive'] / g['batched']:.1f}x",
                     f"{nv_['full_cpu'] / g['batched']:.1f}x"]
                    for name, g, nv_, b_ in floors]
            out.append(table("Matmul floor: CPU seconds of the models' matmuls alone at each "
                             "arm's shapes (per sentence + LM head vs per length batch), next "
                             "to the measured full pipelines",
                             ["layers", "naive matmuls s", "batched matmuls s",
                              "batched matmul GFLOP/s", "naive measured s",
                              "batched measured s", "matmuls-only ratio",
                              "bound: naive measured / batched matmuls"], rows,
                             name="matmul_floor"))
        out.append(f"load average at end: {os.getloadavg()[0]:.1f} (1 min), "
                   f"{os.getloadavg()[1]:.1f} (5 min)")
        if args.skip_protocol:
            print("\n\n".join(out))
            _write(args, clock)
            return

        t0 = time.perf_counter()
        model, tok, data = toy_setup()
        t1 = time.perf_counter()
        res = centroid_ablation_profile(model, tok, data)
        t2 = time.perf_counter()
        s = res.summary()
        out.append(table("End-to-end protocol, default job (320 originals, 6 languages, "
                         "200 II resamples)",
                         ["setup s", "protocol s", "total s", "sem R@3 none / -c_sem / perm",
                          "syn R@3 none / -c_syn / perm", "II syn->sem"],
                         [[f"{t1 - t0:.1f}", f"{t2 - t1:.1f}", f"{t2 - t0:.1f}",
                           f"{s['sem_recall_none']:.2f} / {s['sem_recall_sem']:.2f} / "
                           f"{s['sem_recall_sem_perm']:.2f}",
                           f"{s['syn_recall_none']:.2f} / {s['syn_recall_syn']:.2f} / "
                           f"{s['syn_recall_syn_perm']:.2f}", f"{s['ii_syn_to_sem']:.2f}"]],
                         name="protocol"))
        if args.peer_python:
            out.append(table("Information Imbalance vs dadapy 0.3.4 (k=1, Euclidean; dadapy "
                             "converted to our normalisation)",
                             ["points", "ours a->b / b->a", "dadapy a->b / b->a", "max abs diff",
                              "dadapy time / ours"], peer_imbalance(args.peer_python, tmp),
                             name="dadapy"))
    print("\n\n".join(out))
    _write(args, clock)


def _write(args: argparse.Namespace, clock: object) -> None:
    if not args.out_results:
        return
    from icml import results as R

    cols = {c for t in TABLES for c in t["columns"]}
    why = ("read off this machine's clock, memory or float32 kernels under its load (a speed, "
           "a ratio of speeds, RSS, or a last-bits difference of batched vs per-sentence "
           "matmuls that depends on the BLAS kernels and threads): shown, not compared")
    from real_model import machine_note  # this folder is sys.path[0] when run as a script

    R.write(args.out_results, TABLES, plugin="synsem", seeds=[0], clock=clock,
            threads=args.threads or None, quick=False, notes=machine_note(),
            tolerance={c: {"timing": True, "why": why} for c in sorted(cols)
                       if any(m in c for m in MEASURED)},
            command=" ".join(["python", "plugins/synsem/benchmarks/bench.py"]
                             + [shlex.quote(x) for x in sys.argv[1:]]))


if __name__ == "__main__":
    main()
