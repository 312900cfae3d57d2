"""The paper's protocol on a real pretrained model (default: SmolLM2-135M-Instruct, 30 blocks,
from ``icml.models.load_pretrained``, offline) with the controlled English data of
``icml_synsem.english`` (48 POS templates x ``--per-template`` meanings, syntax twins,
paraphrases, Spanish/French/German translations).

One extraction of every sentence set at the default layer subset (15 of the 30 blocks, first
and last included), then the analysis under several settings on the same representations:

* ``main``: the plugin's defaults (official centering, our permuted control, all-pairs
  Information Imbalance) with 95% bootstrap intervals over the queries;
* ``paper``: the official code's permuted control and split-half Information Imbalance;
* centering variants, leave-one-out syntactic centroids, pair-only syntax retrieval;
* semantic centroids from one language at a time (what each language contributes);
* translation -> English retrieval per language and layer (what the model aligns across
  languages).

Writes ``report.md`` (all tables), ``results.json`` and the PNG profiles into ``--out``, and
with ``--out-results`` the tables as a results file (``icml.results``) that the README renders:

    python plugins/synsem/benchmarks/real_model.py --out plugins/synsem/docs/real \
        --out-results plugins/synsem/results/real_model.json

``--dtype bfloat16 --compare-dtype float32`` extracts twice (the second dtype first) and adds
the agreement of the two: per layer and condition the paired difference of recall (this dtype
minus the other, :func:`icml.stats.paired_diff_ci` over the queries) for the main and the
English-centroid tables, how many cells fall inside the other dtype's 95% interval, the
cosine of the representations, and both extraction times (``timing``):

    python plugins/synsem/benchmarks/real_model.py --dtype bfloat16 --compare-dtype float32 \
        --out plugins/synsem/docs/real_bf16 \
        --out-results plugins/synsem/results/real_model_bf16.json

Intervals are :func:`icml.stats.mean_ci` over the queries; each table's "MDE" column is the
minimum detectable difference between two conditions' recalls over these queries
(:func:`icml.stats.mde_proportion`, independent-samples worst case).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from icml_synsem.config import AnalysisOptions, ExtractionOptions

from icml import results as R
from icml import stats


def md_table(cols: list[str], rows: list[list]) -> str:
    def fmt(v):  # noqa: ANN001, ANN202
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def ci_cell(val: float, ci: tuple[float, float]) -> str:
    return f"{val:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"


def ci_table(title: str, cols: list[str], layers: list[int], vals: dict, cis: dict,
             conditions: tuple, mde: float, name: str | None = None) -> dict:
    """A layer x condition table of recall estimates (value [lo, hi]) plus the MDE column."""
    rows = [[layer] + [{"value": vals[c][i], "lo": cis[c][i][0], "hi": cis[c][i][1]}
                       for c in conditions] + [mde] for i, layer in enumerate(layers)]
    return R.make_table(title, cols + ["MDE"], rows,
                        name=name or title.split(":")[0].lower() + "-main",
                        formats={c: ".2f" for c in cols[1:] + ["MDE"]})


TIMING_WHY = ("read off this machine's clock under its load, or a property of the machine: "
              "shown, not compared")


def cpu_flags() -> str:
    """The CPU's bfloat16 / AMX / AVX-512 flags (``/proc/cpuinfo``), which decide whether a
    bfloat16 matmul runs natively (avx512_bf16, amx_bf16) or is emulated."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = line.split(":", 1)[1].split()
                keep = [f for f in have if f.startswith(("avx512", "amx")) or f in ("avx2", "fma")]
                return " ".join(keep) or "none of avx2/avx512/amx"
    except OSError:
        pass
    return "unknown"


def machine_note() -> str:
    import platform

    import torch

    return (f"CPU {R.cpu_model()}; flags: {cpu_flags()}; torch {torch.__version__}, "
            f"{torch.get_num_threads()} thread(s); {platform.machine()}")


def agreement_tables(args, tables, parts, reps, reps_cmp, main_res, en_res, cmp_res,
                     t_main, t_cmp, n_sent, mde):  # noqa: ANN001, ANN201, PLR0913
    """Tables of how the ``--dtype`` results agree with the ``--compare-dtype`` ones; returns
    the results file's tolerance (the timing and machine columns)."""
    import torch
    from icml_synsem.protocol import CONDITION_NAMES, CONDITIONS

    a, b = args.dtype, args.compare_dtype
    summary = []
    pairs = [("semantics (translation c_sem)", "semantic", main_res, cmp_res["main"]),
             ("syntax (translation c_sem)", "syntactic", main_res, cmp_res["main"])]
    if en_res is not None:
        pairs += [("semantics (English-rewording c_sem)", "semantic", en_res, cmp_res["en"]),
                  ("syntax (English-rewording c_sem)", "syntactic", en_res, cmp_res["en"])]
    for label, task, ra, rb in pairs:
        hits_a = ra.semantic_hits if task == "semantic" else ra.syntactic_hits
        hits_b = rb.semantic_hits if task == "semantic" else rb.syntactic_hits
        ci_b = rb.semantic_ci if task == "semantic" else rb.syntactic_ci
        val_a = ra.semantic if task == "semantic" else ra.syntactic
        rows, inside, excl, worst, disc = [], 0, 0, 0.0, []
        for li, layer in enumerate(ra.layers):
            row = [layer]
            n_in = 0
            for c in CONDITIONS:
                est = stats.paired_diff_ci(hits_a[c][li], hits_b[c][li], n_boot=args.n_boot,
                                           seed=args.seed + 1)
                row.append({"value": est.value, "lo": est.lo, "hi": est.hi})
                lo, hi = ci_b[c][li]
                n_in += lo - 1e-12 <= val_a[c][li] <= hi + 1e-12
                excl += not (est.lo <= 0 <= est.hi)
                worst = max(worst, abs(est.value))
                disc.append(sum(x != y for x, y in zip(hits_a[c][li], hits_b[c][li],
                                                       strict=True)) / len(hits_a[c][li]))
            inside += n_in
            rows.append(row + [f"{n_in}/{len(CONDITIONS)}"])
        name = "dtype-" + label.split(" ")[0] + ("-english" if "English" in label else "")
        cols = ["layer"] + [CONDITION_NAMES[c] for c in CONDITIONS]
        tables.append(R.make_table(
            f"{label}: recall@{args.k} in {a} minus in {b} (paired 95% interval over the "
            "queries)", cols + [f"{a} inside the {b} 95% interval"], rows, name=name,
            formats={c: "+.3f" for c in cols[1:]}))
        n_cells = len(ra.layers) * len(CONDITIONS)
        summary.append([label, n_cells, f"{inside}/{n_cells}", f"{excl}/{n_cells}", worst,
                        max(disc), mde])
    scols = ["recall table", "cells", f"{a} estimate inside the {b} 95% interval",
             "paired 95% interval of the difference excludes 0", "max |difference|",
             "max share of queries whose hit differs", "MDE"]
    tables.append(R.make_table(f"Agreement of {a} with {b} (every layer x condition of the "
                               "real-model recall tables)", scols, summary,
                               name="dtype-agreement",
                               formats={"max |difference|": ".3f",
                                        "max share of queries whose hit differs": ".3f",
                                        "MDE": ".2f"}))
    cos = [torch.nn.functional.cosine_similarity(x.double(), y.double(), dim=-1)
           for x, y in [(reps.originals, reps_cmp.originals), (reps.twins, reps_cmp.twins),
                        (reps.paraphrases, reps_cmp.paraphrases)]
           + [(reps.translations[k], reps_cmp.translations[k]) for k in reps.translations]]
    cos = torch.cat(cos, dim=1)  # [layers, sentences]
    tables.append(R.make_table(
        f"Representations: cosine of {a} to {b}, every sentence and layer", [
            "sentences x layers", "min cosine", "median cosine", "layer of the min"],
        [[f"{cos.shape[1]} x {cos.shape[0]}", float(cos.min()), float(cos.median()),
          reps.layers[int(cos.min(1).values.argmin())]]], name="dtype-cosine",
        formats={"min cosine": ".5f", "median cosine": ".5f"}))
    tcols = ["dtype", f"extraction of {n_sent} sentences, s wall / CPU", "sentences/s wall / CPU",
             f"speed vs {b}, wall / CPU", "CPU flags"]
    flags = cpu_flags()
    trow = [[b, f"{t_cmp[0]:.1f} / {t_cmp[1]:.1f}",
             f"{n_sent / t_cmp[0]:.3g} / {n_sent / t_cmp[1]:.3g}", "1.0x / 1.0x", flags],
            [a, f"{t_main[0]:.1f} / {t_main[1]:.1f}",
             f"{n_sent / t_main[0]:.3g} / {n_sent / t_main[1]:.3g}",
             f"{t_cmp[0] / t_main[0]:.2f}x / {t_cmp[1] / t_main[1]:.2f}x", flags]]
    tables.append(R.make_table(f"Batched extraction time, {a} vs {b} (same run, same process)",
                               tcols, trow, name="dtype-time"))
    parts += [f"## Agreement of {a} with {b}\n", md_table(scols, summary), "",
              md_table(tcols, trow), ""]
    return {c: {"timing": True, "why": TIMING_WHY} for c in tcols[1:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--per-template", type=int, default=5, help="originals per POS template")
    ap.add_argument("--rewordings", type=int, default=2,
                    help="English rewordings as a second source of semantic centroids")
    ap.add_argument("--languages", default="es,fr,de")
    ap.add_argument("--layers", default="", help="comma-separated; empty = default subset")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--resamples", type=int, default=200, help="Information Imbalance resamples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (ICML_THREADS wins)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                    help="dtype of the forward pass (extraction.dtype; the model loads in float32)")
    ap.add_argument("--compare-dtype", default="", choices=("", "float32", "bfloat16", "float16"),
                    help="also extract in this dtype and tabulate the agreement")
    ap.add_argument("--out", default="results/real")
    ap.add_argument("--out-results", default="", help="write the tables as a results file")
    args = ap.parse_args()
    clock = R.Clock()
    tables: list[dict] = []

    from icml_synsem import analyse_reps, make_english_data, sentence_reps
    from icml_synsem.protocol import CONDITION_NAMES, CONDITIONS, SentenceReps
    from icml_synsem.report import band_plot, profile_plots

    from icml.models import load_pretrained

    threads = R.apply_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model, tok = load_pretrained(args.model, device=args.device)
    t_load = time.perf_counter() - t0
    langs = [x for x in args.languages.split(",") if x]
    data = make_english_data(per_template=args.per_template, languages=langs, seed=args.seed,
                             rewordings=args.rewordings)
    n_sent = len(data) * (3 + len(data.translations))
    en = [x for x in data.translations if x not in langs]
    layers = [int(x) for x in args.layers.split(",")] if args.layers else None
    reps_cmp, t_cmp = None, (0.0, 0.0)
    if args.compare_dtype:  # first, so that the main dtype's extraction is not the first one
        t0, c0 = time.perf_counter(), time.process_time()
        reps_cmp = sentence_reps(model, tok, data, ExtractionOptions(
            layers=layers, dtype=args.compare_dtype), device=args.device)
        t_cmp = (time.perf_counter() - t0, time.process_time() - c0)
    t0 = time.perf_counter()
    c0 = time.process_time()
    reps = sentence_reps(model, tok, data, ExtractionOptions(layers=layers, dtype=args.dtype),
                         device=args.device)
    t_extract, cpu_extract = time.perf_counter() - t0, time.process_time() - c0
    n_tokens = sum(len(tok(s, add_special_tokens=False)["input_ids"])
                   for part in (data.originals, data.twins, data.paraphrases,
                                *data.translations.values()) for s in part)

    def only(keys, reps=reps):  # noqa: ANN001, ANN202
        """The representations and data with the given translation sets as the only ones."""
        from icml_synsem import SynSemData

        r = SentenceReps(reps.layers, reps.originals, reps.twins, reps.paraphrases,
                         {x: reps.translations[x] for x in keys})
        d = SynSemData(data.originals, data.twins, data.templates, data.paraphrases,
                       {x: data.translations[x] for x in keys})
        return r, d

    t0 = time.perf_counter()
    reps_l, data_l = only(langs)
    main_opts = AnalysisOptions(k=args.k, n_boot=args.n_boot, imbalance_resamples=args.resamples)
    main_res = analyse_reps(reps_l, data_l, main_opts, seed=args.seed)
    en_res = None
    if en:
        reps_e, data_e = only(en)
        en_res = analyse_reps(reps_e, data_e, main_opts, seed=args.seed)
    cmp_res = {}
    if reps_cmp is not None:  # the same analyses (same seeds) of the other dtype's reps
        cmp_res["main"] = analyse_reps(only(langs, reps_cmp)[0], data_l, main_opts,
                                       seed=args.seed)
        if en:
            cmp_res["en"] = analyse_reps(only(en, reps_cmp)[0], only(en)[1], main_opts,
                                         seed=args.seed)
    reps_all = reps
    reps, data = reps_l, data_l

    def variant(**change):  # noqa: ANN003, ANN202
        """The main analysis with some settings changed (no II resamples unless asked)."""
        opts = AnalysisOptions(k=args.k, **{"imbalance_resamples": 0, **change})
        return analyse_reps(reps, data, opts, seed=args.seed)

    variants = {
        "main (defaults: official centering, our control, all-pairs II)": main_res,
        "paper's code: official control + split-half II": variant(
            perm_control="official", imbalance_estimator="official",
            imbalance_resamples=args.resamples),
        "centering: originals' mean for every set": variant(centering="originals"),
        "centering: each set (each language) by its own mean": variant(centering="each"),
        "centering: pooled mean of all sets": variant(centering="pooled"),
        "no centering": variant(centering="none"),
        "leave-one-out c_syn": variant(leave_one_out=True),
        "no decoupling of c_syn": variant(decouple=False),
        "plain subtraction": variant(ablation="subtract"),
        "syntax hit = the twin only (pair)": variant(syntax_match="pair"),
    }
    if en_res is not None:
        variants[f"c_sem from English rewordings {en} (not in the paper)"] = en_res
    per_lang = {}
    for lang in langs:
        one = SentenceReps(reps.layers, reps.originals, reps.twins, reps.paraphrases,
                           {lang: reps.translations[lang]})
        per_lang[lang] = analyse_reps(one, data, AnalysisOptions(
            k=args.k, imbalance_resamples=0, translation_retrieval=False), seed=args.seed)
    t_analyse = time.perf_counter() - t0

    # ---- tables
    parts = [f"# {args.model}: syntactic and semantic centroids on controlled English data\n",
             f"{len(data)} originals ({len(set(data.templates))} POS templates x "
             f"{args.per_template}), languages {langs}, {n_sent} sentences, {n_tokens} tokens; "
             f"layers {reps.layers}; recall@{args.k}; 95% bootstrap intervals over the queries "
             f"({args.n_boot} resamples). Chance: paraphrase recall@{args.k} = "
             f"{args.k / len(data):.3f}, same-template recall@{args.k} ~ "
             f"{1 - (1 - args.per_template / len(data)) ** args.k:.3f}.\n",
             f"Times: model load {t_load:.1f} s, extraction {t_extract:.1f} s "
             f"({n_sent / t_extract:.1f} sentences/s; {cpu_extract:.0f} s of CPU time), "
             "analysis (all variants) "
             f"{t_analyse:.1f} s.\n"]
    cols = ["layer"] + [CONDITION_NAMES[c] for c in CONDITIONS]
    mde = stats.mde_proportion(len(data))
    for title, vals, cis in (("Semantics: paraphrase recall", main_res.semantic,
                              main_res.semantic_ci),
                             ("Syntax: same-template twin recall", main_res.syntactic,
                              main_res.syntactic_ci)):
        rows = [[layer] + [ci_cell(vals[c][i], cis[c][i]) for c in CONDITIONS]
                for i, layer in enumerate(main_res.layers)]
        parts += [f"## {title} (main settings)\n", md_table(cols, rows), ""]
        tables.append(ci_table(f"{title} (main settings)", cols, main_res.layers, vals, cis,
                               CONDITIONS, mde))
    if en_res is not None:
        for title, vals, cis in (("Semantics: paraphrase recall", en_res.semantic,
                                  en_res.semantic_ci),
                                 ("Syntax: same-template twin recall", en_res.syntactic,
                                  en_res.syntactic_ci)):
            rows = [[layer] + [ci_cell(vals[c][i], cis[c][i]) for c in CONDITIONS]
                    for i, layer in enumerate(en_res.layers)]
            parts += [f"## {title}, c_sem = mean of the English rewordings {en} (not in the "
                      "paper)\n", md_table(cols, rows), ""]
            tables.append(ci_table(f"{title}, c_sem = mean of the English rewordings {en}",
                                   cols, en_res.layers, vals, cis, CONDITIONS, mde,
                                   name=f"{title.split(':')[0].lower()}-english-centroids"))
    geo_cols = ["layer", "expl. c_sem", "expl. c_sem perm", "expl. c_syn", "expl. c_syn perm",
                "II syn->sem", "II sem->syn", "II syn->sem (official est.)",
                "II sem->syn (official est.)"]
    paper = variants["paper's code: official control + split-half II"]
    rows = [[layer] + [main_res.explained[n][i] for n in
                       ("explained_sem", "explained_sem_perm", "explained_syn",
                        "explained_syn_perm")]
            + [main_res.imbalance["ii_syn_to_sem"][i], main_res.imbalance["ii_sem_to_syn"][i],
               paper.imbalance["ii_syn_to_sem"][i], paper.imbalance["ii_sem_to_syn"][i]]
            for i, layer in enumerate(main_res.layers)]
    parts += ["## Centroid geometry (main settings)\n", md_table(geo_cols, rows), ""]
    tables.append(R.make_table("Centroid geometry (main settings)", geo_cols, rows,
                               name="geometry", formats={c: ".2f" for c in geo_cols[1:]}))
    trows = [[layer] + [main_res.translation_recall[lang][i] for lang in langs]
             + [per_lang[lang].semantic["sem"][i] for lang in langs]
             for i, layer in enumerate(main_res.layers)]
    parts += ["## Other languages: translation -> English original recall, and paraphrase "
              "recall after removing a one-language c_sem\n",
              md_table(["layer"] + [f"{lang}->en R@{args.k}" for lang in langs]
                       + [f"sem R@{args.k} -c_sem({lang})" for lang in langs], trows), ""]
    tcols = (["layer"] + [f"{lang}->en R@{args.k}" for lang in langs]
             + [f"sem R@{args.k} -c_sem({lang})" for lang in langs])
    tables.append(R.make_table("Other languages: translation -> English original recall, and "
                               "paraphrase recall after removing a one-language c_sem", tcols,
                               trows, name="languages",
                               formats={c: ".2f" for c in tcols[1:]}))
    vcols = ["setting", "sem none", "sem -c_sem", "sem -c_sem perm", "sem -c_syn",
             "sem -c_syn perm", "syn none", "syn -c_sem", "syn -c_sem perm", "syn -c_syn",
             "syn -c_syn perm", "II syn->sem"]
    vrows = []
    for name, r in variants.items():
        s = r.summary()
        vrows.append([name] + [s[f"sem_recall_{c}"] for c in CONDITIONS]
                     + [s[f"syn_recall_{c}"] for c in CONDITIONS]
                     + [s.get("ii_syn_to_sem", float("nan"))])
    parts += ["## Settings compared (recall averaged over layers; same representations)\n",
              md_table(vcols, vrows), ""]
    tables.append(R.make_table("Settings compared (recall averaged over layers; same "
                               "representations)", vcols + ["MDE"],
                               [r + [mde] for r in vrows], name="settings",
                               formats={c: ".2f" for c in vcols[1:] + ["MDE"]}))
    tolerance = None
    if reps_cmp is not None:
        tolerance = agreement_tables(args, tables, parts, reps_all, reps_cmp, main_res, en_res,
                                     cmp_res, (t_extract, cpu_extract), t_cmp, n_sent, mde)
    (out / "report.md").write_text("\n".join(parts) + "\n")

    # ---- plots
    written = profile_plots(main_res, out)
    if en_res is not None:
        band_plot(out / "profile_semantics_english_centroids.png", en_res.layers,
                  en_res.semantic, en_res.semantic_ci,
                  title=f"Paraphrase recall@{args.k}, c_sem from English rewordings")
        band_plot(out / "profile_syntax_english_centroids.png", en_res.layers,
                  en_res.syntactic, en_res.syntactic_ci,
                  title=f"Same-template twin recall@{args.k}, c_sem from English rewordings")
        written["semantics profile (English c_sem)"] = "profile_semantics_english_centroids.png"
        written["syntax profile (English c_sem)"] = "profile_syntax_english_centroids.png"
    band_plot(out / "profile_semantics_paper_control.png", paper.layers, paper.semantic, {},
              title=f"Paraphrase recall@{args.k}, official permuted control")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.5, 4.2), dpi=110)
        for lang in langs:
            ax.plot(main_res.layers, main_res.translation_recall[lang], marker="o",
                    markersize=3, label=f"{lang} -> en")
        ax.axhline(args.k / len(data), color="grey", ls="--", lw=0.8, label="chance")
        ax.set(title=f"Translation -> English original recall@{args.k}", xlabel="layer",
               ylabel="recall", ylim=(-0.02, 1.02))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "translation_retrieval.png")
        plt.close(fig)
        written["translation retrieval"] = "translation_retrieval.png"
    except ImportError:
        pass
    res_json = {
        "model": args.model, "n_originals": len(data), "languages": langs,
        "layers": main_res.layers, "n_sentences": n_sent, "n_tokens": n_tokens,
        "seconds": {"load": t_load, "extract": t_extract, "analyse": t_analyse},
        "main": main_res.rows(), "summaries": {n: r.summary() for n, r in variants.items()},
        "per_language_sem": {lang: r.semantic for lang, r in per_lang.items()},
        "plots": written,
    }
    (out / "results.json").write_text(json.dumps(res_json, indent=1))
    print((out / "report.md").read_text())
    print(f"total {time.perf_counter() - t0 + t_extract + t_load:.1f} s; wrote {out}")
    if args.out_results:
        R.write(args.out_results, tables, plugin="synsem", seeds=[args.seed], clock=clock,
                threads=threads, quick=False, tolerance=tolerance,
                notes=machine_note() if reps_cmp is not None else "",
                command=" ".join(["python", "plugins/synsem/benchmarks/real_model.py"]
                                 + [shlex.quote(x) for x in sys.argv[1:]]))


if __name__ == "__main__":
    main()
