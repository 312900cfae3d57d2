"""The model-strong end on a real pretrained model (SmolLM2-135M-Instruct), powered (issue 64).

Round 2 (``real_model.py``) tested the strong end with short, clean answers (one letter), the top
2 layers and 30 steps, on 100 held-out items: NLL 0.930 vs -p 0.903, a gap of about 3 items with
CIs over seeds only. The paper's strong end differs: long responses the model only partly
predicts, mixed-quality targets, a full epoch of many steps. This script moves toward those
conditions as far as one CPU thread allows, and measures with paired intervals over seeds *and*
items (``icml.stats``):

* **task**: ``strong`` of ``real_model.py`` (the first letter of a held-out English word after a
  2-shot prompt; the untouched model already gets most of them right), the same item split;
* **longer supervision** (``--tail N``): every training answer is followed by N more
  ``word: letter`` lines about other training words, all labelled; the words themselves are
  tokens the model cannot predict (p near 1/V), like the parts of a long chain of thought that
  the model would not have written;
* **noisy targets** (``--noise a,b,...``: one row group per level): that share of the trained
  letters (answer and tail) is replaced by a random wrong one; evaluation stays clean;
* **more steps, more layers**: ``--steps``, ``--layers`` (top decoder layers trained in full on
  cached activations of the frozen ones; ``--lora R`` for adapters instead);
* ``--dtype bfloat16`` runs every forward under CPU/GPU autocast (float32 master weights);
  ``--dtype-check K`` retrains the first K objectives of seed 0 at the last noise level in
  float32 as well and reports both, paired over the same items (the subset test that licenses
  bfloat16).

Evaluation: greedy exact match (the letter and the newline after it) on ``--n-test`` held-out
words, the same items for every seed and objective (a crossed seeds x items design), so every
objective's difference from NLL is paired: ``hierarchical_diff_ci`` resamples seeds and items,
the item-level interval (``paired_diff_ci``) resamples items of the seed-averaged differences,
and the MDE (``mde_from_samples`` of the seeds x items differences) says what the design could
detect with 80 % power.

    python plugins/beyond-nll/benchmarks/strong_end.py --noise 0 --dtype-check 0 \
        --out-results plugins/beyond-nll/results/strong_end_clean.json
    python plugins/beyond-nll/benchmarks/strong_end.py --noise 0.3 \
        --out-results plugins/beyond-nll/results/strong_end_noisy.json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import random
import shlex
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
DEFAULT_OBJECTIVES = "logp,p,GeneralFamily-10"
TOLERANCE = {
    "*": {"abs": 0.03, "why": "declared before the run from round 2's seed spread (sd of one "
          "cell over 3 seeds 0.006-0.05 on 100 items, CHANGELOG 0.1.1); bfloat16 rounding "
          "differs between 1 and 2 threads"},
    "s / run": {"timing": True, "why": "clock reading on a shared 2-core machine"},
    "s / run (float32)": {"timing": True, "why": "clock reading on a shared 2-core machine"},
    "s / run (bfloat16)": {"timing": True, "why": "clock reading on a shared 2-core machine"},
}


def _real_model():
    spec = importlib.util.spec_from_file_location("beyond_nll_real_model", HERE / "real_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rm = _real_model()


def make_strong(words: list[str], n_pool: int, n_test: int, seed: int, noise: float,
                tail: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``real_model.make_task("strong", ...)`` (same items, same noise draw for the answers),
    each training answer followed by ``tail`` more ``word: letter`` lines about the next training
    words (cyclically), their letters noisy at the same rate (drawn from a separate stream)."""
    train, test = rm.make_task("strong", words, n_pool, n_test, seed, noise)
    if tail <= 0:
        return train, test
    rng = random.Random(10_000 + seed)
    items = [p.rsplit("\n", 1)[1][:-1] for p, _ in train]  # the word of "...\nword:"
    out = []
    for i, (p, a) in enumerate(train):
        lines = []
        for j in range(tail):
            w = items[(i + 1 + j) % len(items)]
            c = w[0]
            if rng.random() < noise:
                c = rng.choice([x for x in rm.LETTERS if x != c])
            lines.append(f"\n{w}: {c}")
        out.append((p, a + "".join(lines)))
    return out, test


@torch.no_grad()
def eval_items(top, h: torch.Tensor, labels: torch.Tensor, batch: int = 64):
    """Per-item greedy exact match (every labelled token is the argmax given the correct prefix)
    and the mean target probability over all labelled tokens."""
    tgt = rm.shifted(labels)
    ok, ps = [], []
    for i in range(0, h.shape[0], batch):
        t = tgt[i:i + batch]
        where = t != -100
        logits = top(h[i:i + batch], where).float()
        y = t[where]
        hit = logits.argmax(-1) == y
        ps.append(torch.softmax(logits, -1).gather(-1, y[:, None]).squeeze(-1))
        row = where.nonzero()[:, 0]
        ok += [int(hit[row == r].all()) for r in range(t.shape[0])]
    return ok, float(torch.cat(ps).mean())


def autocast(device: str, dtype: str):
    if dtype == "float32":
        return contextlib.nullcontext()
    # cache_enabled=False: autocast caches the bfloat16 copy of each weight for as long as the
    # context is open, so a training loop inside one context would keep using the weights of
    # its first step (caught by --dtype-check: bfloat16 arms stayed at the prior, 0.1.6 pilot)
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, cache_enabled=False)


def check_args(a, n_layers: int | None = None) -> None:
    """One-line ``icml.ConfigError`` for bad settings, before any model is loaded."""
    from icml_beyond_nll import ProbObjective

    from icml import ConfigError

    objs = [o for o in a.objectives.split(",") if o.strip()]
    if not objs or objs[0].strip() != "logp":
        raise ConfigError(f"--objectives must start with logp (the NLL reference), got "
                          f"{a.objectives!r}")
    for o in objs[1:]:
        if o.strip() != "dft":
            try:
                ProbObjective.parse(o.strip())
            except ValueError as e:
                raise ConfigError(f"--objectives: {e}") from None
    try:
        levels = [float(x) for x in a.noise.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--noise must be comma-separated numbers in [0, 1), got "
                          f"{a.noise!r}") from None
    if not levels or any(not 0 <= x < 1 for x in levels):
        raise ConfigError(f"--noise must be comma-separated numbers in [0, 1), got {a.noise!r}")
    for key, v, lo in (("seeds", a.seeds, 2), ("steps", a.steps, 1), ("batch", a.batch, 1),
                       ("n-train", a.n_train, 2), ("n-test", a.n_test, 2), ("tail", a.tail, 0),
                       ("dtype-check", a.dtype_check, 0), ("lora", a.lora, 0)):
        if v < lo:
            raise ConfigError(f"--{key} must be an integer >= {lo}, got {v}")
    if a.dtype_check > len(objs):
        raise ConfigError(f"--dtype-check must be <= the number of objectives ({len(objs)}), "
                          f"got {a.dtype_check}")
    if not a.lr > 0:
        raise ConfigError(f"--lr must be > 0, got {a.lr}")
    if a.layers != "all" and not (a.layers.isdigit() and int(a.layers) >= 1):
        raise ConfigError(f"--layers must be a positive integer or 'all', got {a.layers!r}")
    if n_layers is not None and a.layers != "all" and int(a.layers) > n_layers:
        raise ConfigError(f"--layers must be <= {n_layers} (the model's layers), got {a.layers}")


def stats_tables(d: dict) -> list[dict]:
    """The results tables from a run's saved per-item outcomes."""
    import numpy as np

    from icml import results, stats

    args = d["args"]
    objs = [o.strip() for o in args["objectives"].split(",") if o.strip()]
    levels = [float(x) for x in args["noise"].split(",") if x.strip()]
    seeds = list(range(args["seeds"]))
    runs = {(r["noise"], r["objective"], r["seed"]): r for r in d["runs"]
            if r.get("dtype", args["dtype"]) == args["dtype"]}
    before = d["before"]
    rows0 = []
    for lv in levels:
        b = before[str(lv)]
        rows0.append([lv, stats.proportion_ci(b["items"]).to_dict(),
                      float(np.mean(b["p_train"])), float(np.mean(b["p_answer"]))])
    t0 = results.make_table(
        "Untouched model: held-out exact match [Wilson 95% CI] and mean target p on the "
        "training supervision (all labelled tokens; answer letters only)",
        ["noise", "accuracy before", "mean p (all supervised tokens)",
         "mean p (answer letters)"], rows0, name="before",
        formats={"noise": ".2f", "accuracy before": ".3f",
                 "mean p (all supervised tokens)": ".3f", "mean p (answer letters)": ".3f"})
    cols = ["noise", "objective", "accuracy [seeds x items 95% CI]",
            "vs NLL [seeds x items 95% CI]", "vs NLL [items 95% CI]", "MDE (seeds x items)",
            "MDE (items)", "seeds > / < NLL", "s / run"]
    rows = []
    for lv in levels:
        ref = np.array([runs[(lv, "logp", s)]["items"] for s in seeds], dtype=float)
        for o in objs:
            x = np.array([runs[(lv, o, s)]["items"] for s in seeds], dtype=float)
            acc = stats.hierarchical_ci(x, seed=0).to_dict()
            sec = float(np.mean([runs[(lv, o, s)]["sec"] for s in seeds]))
            if o == "logp":
                rows.append([lv, o, acc, None, None, None, None, "-", sec])
                continue
            diff = x - ref
            per_seed = x.mean(1) - ref.mean(1)
            rows.append([lv, o, acc, stats.hierarchical_diff_ci(x, ref, seed=0).to_dict(),
                         stats.paired_diff_ci(x.mean(0), ref.mean(0), seed=0).to_dict(),
                         stats.mde_from_samples(diff, seed=0),
                         stats.mde_from_samples(diff.mean(0), seed=0),
                         f"{int((per_seed > 0).sum())}/{len(seeds)} / "
                         f"{int((per_seed < 0).sum())}/{len(seeds)}", sec])
    fmt = {c: ".3f" for c in cols[2:7]}
    fmt.update({"noise": ".2f", "s / run": ".1f"})
    t1 = results.make_table("After fine-tuning: held-out exact match, and each objective minus "
                            "NLL paired over the same seeds and items", cols, rows,
                            name="strong-end", formats=fmt)
    tables = [t0, t1]
    chk = [r for r in d["runs"] if r.get("dtype") == "float32" and args["dtype"] != "float32"]
    if chk:
        rows2 = []
        for r in chk:
            other = runs[(r["noise"], r["objective"], r["seed"])]
            a32, a16 = np.array(r["items"], float), np.array(other["items"], float)
            rows2.append([r["noise"], r["objective"], r["seed"], float(a32.mean()),
                          float(a16.mean()), stats.paired_diff_ci(a16, a32, seed=0).to_dict(),
                          float((a32 == a16).mean()), r["sec"], other["sec"]])
        cols2 = ["noise", "objective", "seed", "accuracy float32", "accuracy bfloat16",
                 "bfloat16 - float32 [items 95% CI]", "items that agree", "s / run (float32)",
                 "s / run (bfloat16)"]
        fmt2 = {c: ".3f" for c in cols2[3:7]}
        fmt2.update({"noise": ".2f", "s / run (float32)": ".1f", "s / run (bfloat16)": ".1f"})
        tables.append(results.make_table(
            f"Subset test: the same runs in float32 and under {args['dtype']} autocast",
            cols2, rows2, name="dtype-check", formats=fmt2))
    return tables


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objectives", default=DEFAULT_OBJECTIVES,
                    help="comma-separated official keys (or dft); the first must be logp")
    ap.add_argument("--noise", default="0.3", help="comma-separated label-noise levels")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--layers", default="4", help="top decoder layers to train, or 'all'")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank on those layers (0: full)")
    ap.add_argument("--tail", type=int, default=3,
                    help="extra supervised 'word: letter' lines after each training answer")
    ap.add_argument("--n-train", type=int, default=160)
    ap.add_argument("--n-test", type=int, default=1000)
    ap.add_argument("--pool", type=float, default=1.25)
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--dtype-check", type=int, default=2,
                    help="retrain the first K objectives (seed 0, last noise level) in float32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="")
    ap.add_argument("--from-json", default="", help="tables of a saved --json run, then exit")
    ap.add_argument("--out-results", default="")
    args = list(sys.argv[1:] if argv is None else argv)
    a = ap.parse_args(args)
    from icml import results

    clock = results.Clock()
    command = "python " + shlex.join(["plugins/beyond-nll/benchmarks/strong_end.py", *args])
    if a.from_json:
        d = json.loads(Path(a.from_json).read_text())
        for t in stats_tables(d):
            print(results.render_table(t), "\n")
        if a.out_results:
            results.write(a.out_results, stats_tables(d), command=command, plugin="beyond-nll",
                          seeds=list(range(d["args"]["seeds"])), tolerance=TOLERANCE,
                          threads=d["args"]["threads"])
        return 0
    check_args(a)
    json_paths = [Path(a.json)] if a.json else []
    if a.out_results:  # the per-item outcomes beside the results file (follows ICML_RESULTS_DIR)
        target = results.target_path(a.out_results)
        json_paths.append(target.parent / "items" / f"{target.stem}.items.json")
        json_paths[-1].parent.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(a.threads)
    t0 = time.time()
    from icml.models import load_pretrained

    model, tok = load_pretrained("smollm2-135m-instruct", device=a.device)
    model.eval().requires_grad_(False)
    n_layers = len(model.model.layers)
    check_args(a, n_layers)
    k = n_layers if a.layers == "all" else int(a.layers)
    objs = [o.strip() for o in a.objectives.split(",") if o.strip()]
    levels = [float(x) for x in a.noise.split(",") if x.strip()]
    words = rm.vocab_words(tok)
    base = rm.TopLayers(model, k).to(a.device)
    n_pool = int(a.n_train * a.pool)
    print(f"# strong end: top {k}/{n_layers} layers{f' LoRA r={a.lora}' if a.lora else ''}, "
          f"{a.steps} steps x {a.batch}, lr {a.lr}, tail {a.tail}, noise {levels}, "
          f"{a.n_test} test items, {a.dtype}; load {time.time() - t0:.0f} s", flush=True)

    def cache(pairs, dtype):
        enc = rm.encode(tok, pairs)
        with autocast(a.device, dtype):
            h = rm.bottom_hidden(model, enc["input_ids"].to(a.device), k)
        return h.float(), enc["labels"].to(a.device)

    def run_one(h_tr, l_tr, h_te, l_te, obj, seed, dtype):
        ts = time.time()
        with autocast(a.device, dtype):
            top = rm.train_one(base, h_tr, l_tr, obj, steps=a.steps, batch=a.batch, lr=a.lr,
                               seed=seed, lora=a.lora)
            tt = time.time() - ts
            items, p_te = eval_items(top, h_te, l_te)
        print(f"  train {tt:.1f} s ({tt / a.steps * 1e3:.0f} ms/step), eval "
              f"{time.time() - ts - tt:.1f} s ({(time.time() - ts - tt) / len(items) * 1e3:.1f} "
              f"ms/item)", flush=True)
        return items, p_te, time.time() - ts

    _, test = make_strong(words, n_pool, a.n_test, 0, 0.0, 0)
    te = {dt: cache(test, dt) for dt in {a.dtype, "float32" if a.dtype_check else a.dtype}}
    runs, before = [], {}
    for lv in levels:
        for seed in range(a.seeds):
            pool = make_strong(words, n_pool, a.n_test, seed, lv, a.tail)[0]
            idx = torch.randperm(n_pool, generator=torch.Generator().manual_seed(seed))
            sub = [pool[i] for i in idx[:a.n_train].tolist()]
            h_tr, l_tr = cache(sub, a.dtype)
            if seed == 0:
                with autocast(a.device, a.dtype):
                    items0, _ = eval_items(base, *te[a.dtype])
                    _, p_tr = eval_items(base, h_tr, l_tr)
                    short = [(p, ans.split("\n")[0]) for p, ans in sub]
                    _, p_ans = eval_items(base, *cache(short, a.dtype))
                before[str(lv)] = {"items": items0, "p_train": p_tr, "p_answer": p_ans}
                print(f"noise {lv}: before acc {sum(items0) / len(items0):.3f}, mean p train "
                      f"{p_tr:.3f} (answers {p_ans:.3f}); {time.time() - t0:.0f} s", flush=True)
            for obj in objs:
                items, p_te, sec = run_one(h_tr, l_tr, *te[a.dtype], obj, seed, a.dtype)
                runs.append({"noise": lv, "seed": seed, "objective": obj, "dtype": a.dtype,
                             "acc": sum(items) / len(items), "mean_p_test": p_te, "sec": sec,
                             "items": items})
                print(f"noise {lv} seed {seed} {obj:>20}: acc {runs[-1]['acc']:.3f} "
                      f"{sec:.1f} s", flush=True)
            if seed == 0 and lv == levels[-1] and a.dtype_check and a.dtype != "float32":
                h32, l32 = cache(sub, "float32")
                for obj in objs[:a.dtype_check]:
                    items, p_te, sec = run_one(h32, l32, *te["float32"], obj, seed, "float32")
                    runs.append({"noise": lv, "seed": seed, "objective": obj,
                                 "dtype": "float32", "acc": sum(items) / len(items),
                                 "mean_p_test": p_te, "sec": sec, "items": items})
                    print(f"noise {lv} seed {seed} {obj:>20}: acc {runs[-1]['acc']:.3f} "
                          f"(float32 check) {sec:.1f} s", flush=True)
            d = {"args": vars(a), "before": before, "runs": runs}
            for path in json_paths:  # after every seed, so a cut-off run keeps what it did
                path.write_text(json.dumps(d))
    print(f"\ntotal {time.time() - t0:.0f} s", flush=True)
    for t in stats_tables(d):
        print(results.render_table(t), "\n")
    if a.out_results:
        out = results.write(a.out_results, stats_tables(d), command=command, plugin="beyond-nll",
                            seeds=list(range(a.seeds)), clock=clock, threads=a.threads,
                            tolerance=TOLERANCE)
        print(f"# wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
