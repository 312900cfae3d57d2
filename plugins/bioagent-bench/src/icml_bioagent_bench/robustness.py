"""Stability across repeated runs, as the official ``utils/robustness.py``: pairwise Jaccard of
the result-ID sets, and the mean Pearson correlation of numeric columns on shared IDs (pairs
with fewer than two shared rows skipped), each averaged over all run pairs."""

from __future__ import annotations

import csv
import io
import math
from itertools import combinations
from pathlib import Path

import numpy as np

#: ID columns and numeric columns per task (the official TASK_SPECS for the same tasks).
SPECS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "variant-calling": (("chrom", "pos", "ref", "alt"), ()),
    "transcript-quant": (("transcript_id",), ("count",)),
    "deseq": (("gene_id",), ("log2FoldChange", "padj", "pvalue", "baseMean")),
    "metagenomics": (("Phylum",), ("JP4D", "JC1A")),
}


def jaccard(a: set, b: set) -> float:
    """|a & b| / |a | b| (nan for two empty sets)."""
    u = a | b
    return len(a & b) / len(u) if u else float("nan")


def pearson(x: list[float], y: list[float]) -> float:
    """Pearson correlation; nan with fewer than two pairs or zero variance."""
    x_, y_ = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x_) & np.isfinite(y_)
    x_, y_ = x_[ok], y_[ok]
    if len(x_) < 2 or x_.std() == 0 or y_.std() == 0:
        return float("nan")
    return float(np.corrcoef(x_, y_)[0, 1])


def _mean(v: list[float]) -> float:
    v = [x for x in v if x is not None and not math.isnan(x)]
    return float(np.mean(v)) if v else float("nan")


def load_result(task_id: str, results_dir: str | Path) -> dict[str, dict[str, float]]:
    """``id -> {numeric column: value}`` of one run's result (values of duplicate IDs summed
    for metagenomics, averaged otherwise, as the official code aggregates)."""
    ids, vals = SPECS[task_id]
    results = Path(results_dir)
    out: dict[str, list[dict[str, float]]] = {}
    if task_id == "variant-calling":
        from icml_bioagent_bench.calling import read_vcf

        for p in sorted(results.glob("*.vcf.gz"))[:1]:
            try:
                for v in read_vcf(p):
                    out.setdefault(f"{v.chrom}|{v.pos}|{v.ref}|{v.alt}", []).append({})
            except ValueError:
                pass
        return {k: {} for k in out}
    for p in sorted(results.rglob("*")):
        if p.suffix not in (".csv", ".tsv"):
            continue
        rows = list(csv.DictReader(io.StringIO(p.read_text(errors="replace")),
                                   delimiter="\t" if p.suffix == ".tsv" else ","))
        for r in rows:
            if not all(c in r for c in ids):
                continue
            key = "|".join(str(r[c]) for c in ids)
            d = {}
            for c in vals:
                try:
                    d[c] = float(r.get(c, "nan"))
                except (TypeError, ValueError):
                    d[c] = float("nan")
            out.setdefault(key, []).append(d)
    agg = np.sum if task_id == "metagenomics" else np.mean
    return {k: {c: float(agg([d[c] for d in v])) for c in vals} for k, v in out.items()}


def stability(task_id: str, runs: list[str | Path]) -> dict[str, float]:
    """``{"jaccard": mean pairwise Jaccard, "pearson": mean pairwise value correlation,
    "runs": n}`` over the ``results/`` folders ``runs``."""
    if task_id not in SPECS:
        raise ValueError(f"no stability spec for {task_id!r}: use one of {', '.join(SPECS)}")
    loaded = [load_result(task_id, r) for r in runs]
    js, ps = [], []
    for a, b in combinations(loaded, 2):
        js.append(jaccard(set(a), set(b)))
        shared = sorted(set(a) & set(b))
        cols = sorted({c for v in a.values() for c in v} & {c for v in b.values() for c in v})
        cs = [pearson([a[k][c] for k in shared], [b[k][c] for k in shared]) for c in cols]
        ps.append(_mean(cs))
    return {"jaccard": _mean(js), "pearson": _mean(ps), "runs": float(len(runs))}
