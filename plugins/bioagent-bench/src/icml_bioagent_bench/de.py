"""Differential expression for the reference pipeline: a DESeq2-style test in numpy (median-of-
ratios size factors, moment dispersions shared with a fitted ``a0 + a1/mu`` trend, a
negative-binomial Wald test on the log fold change, Benjamini-Hochberg), or ``pydeseq2`` where
installed. The built-in test
is ours, not DESeq2: it reproduces DESeq2's steps, not its numbers."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np


def read_counts(path: str | Path) -> tuple[list[str], list[str], np.ndarray]:
    """A gene x sample count table (TSV or CSV, first column gene_id). Raises ``ValueError``
    naming the file on a ragged or non-numeric table."""
    path = Path(path)
    delim = "\t" if path.suffix == ".tsv" else ","
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh, delimiter=delim))
    if len(rows) < 2:
        raise ValueError(f"{path.name}: no count rows")
    header, body = rows[0], rows[1:]
    if any(len(r) != len(header) for r in body):
        raise ValueError(f"{path.name}: rows have different numbers of columns")
    try:
        X = np.array([[float(v) for v in r[1:]] for r in body])
    except ValueError as exc:
        raise ValueError(f"{path.name}: non-numeric count ({exc})") from None
    return [r[0] for r in body], header[1:], X


def read_samples(path: str | Path) -> dict[str, str]:
    """The sample sheet: ``sample -> condition`` (TSV/CSV with columns sample, condition)."""
    path = Path(path)
    delim = "\t" if path.suffix == ".tsv" else ","
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter=delim))
    if not rows or not {"sample", "condition"} <= set(rows[0]):
        raise ValueError(f"{path.name}: needs columns 'sample' and 'condition'")
    return {r["sample"]: r["condition"] for r in rows}


def size_factors(X: np.ndarray) -> np.ndarray:
    """DESeq2's median-of-ratios size factors (genes with a zero in any sample excluded)."""
    keep = (X > 0).all(axis=1)
    if not keep.any():
        return np.ones(X.shape[1])
    logs = np.log(X[keep])
    return np.exp(np.median(logs - logs.mean(axis=1, keepdims=True), axis=0))


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """BH-adjusted p-values (nan stays nan)."""
    p = np.asarray(p, dtype=float)
    out = np.full_like(p, np.nan)
    ok = ~np.isnan(p)
    if not ok.any():
        return out
    q = p[ok]
    order = np.argsort(q)
    ranked = q[order] * len(q) / np.arange(1, len(q) + 1)
    ranked = np.minimum.accumulate(ranked[::-1])[::-1]
    adj = np.empty_like(q)
    adj[order] = np.minimum(ranked, 1.0)
    out[ok] = adj
    return out


def fit_dispersion_trend(mu: np.ndarray, alpha: np.ndarray) -> tuple[float, float]:
    """DESeq2's parametric trend ``alpha(mu) = a0 + a1 / mu``, fitted by least squares on the
    gene-wise estimates with iterative removal of outliers (ratio to the fit > 15 or < 1e-4)."""
    ok = (mu > 0) & (alpha > 1e-7)
    a0, a1 = 0.1, 1.0
    for _ in range(10):
        if ok.sum() < 3:
            break
        A = np.stack([np.ones(ok.sum()), 1 / mu[ok]], axis=1)
        (a0, a1), *_ = np.linalg.lstsq(A, alpha[ok], rcond=None)
        a0, a1 = max(float(a0), 1e-8), max(float(a1), 0.0)
        r = alpha / (a0 + a1 / np.maximum(mu, 1e-8))
        new_ok = (mu > 0) & (alpha > 1e-7) & (r < 15) & (r > 1e-4)
        if (new_ok == ok).all():
            break
        ok = new_ok
    return a0, a1


def wald_test(X: np.ndarray, groups: np.ndarray, *, sharing: str = "maximum"
              ) -> dict[str, np.ndarray]:
    """Two-group NB Wald test; ``groups`` is 0 (reference level) / 1. Returns baseMean,
    log2FoldChange (group 1 vs 0), lfcSE, stat, pvalue, padj. ``sharing`` combines the gene-wise
    moment dispersion with the fitted trend: ``maximum`` (the original DESeq's conservative
    rule, default) or ``geometric`` (the mean of the logs, closer to a MAP shrinkage)."""
    groups = np.asarray(groups)
    if set(np.unique(groups)) != {0, 1}:
        raise ValueError("the design needs exactly two conditions with samples in each")
    if sharing not in ("maximum", "geometric"):
        raise ValueError(f"sharing {sharing!r}: use maximum or geometric")
    s = size_factors(X)
    N = X / s
    a, b = N[:, groups == 0], N[:, groups == 1]
    ma, mb = a.mean(1), b.mean(1)
    mu = N.mean(1)
    resid = np.concatenate([a - ma[:, None], b - mb[:, None]], axis=1)
    dof = max(X.shape[1] - 2, 1)
    var = (resid ** 2).sum(1) / dof
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha_g = np.where(mu > 0, (var - mu * np.mean(1 / s)) / mu ** 2, np.nan)
    alpha_g = np.clip(np.nan_to_num(alpha_g, nan=1e-8), 1e-8, 10.0)
    a0, a1 = fit_dispersion_trend(mu, alpha_g)
    trend = a0 + a1 / np.maximum(mu, 1e-8)
    alpha = (np.maximum(alpha_g, trend) if sharing == "maximum"
             else np.sqrt(alpha_g * trend))
    sbar = float(np.mean(s))
    eps = 0.5 / sbar
    with np.errstate(divide="ignore", invalid="ignore"):
        va = (1 / ((ma + eps) * sbar) + alpha) / a.shape[1]
        vb = (1 / ((mb + eps) * sbar) + alpha) / b.shape[1]
        lfc = (np.log(mb + eps) - np.log(ma + eps)) / math.log(2)
        se = np.sqrt(va + vb) / math.log(2)
        stat = lfc / se
    p = np.array([math.erfc(abs(z) / math.sqrt(2)) if np.isfinite(z) else np.nan for z in stat])
    p[mu == 0] = np.nan
    return {"baseMean": mu, "log2FoldChange": lfc, "lfcSE": se, "stat": stat, "pvalue": p,
            "padj": benjamini_hochberg(p)}


def pydeseq2_test(X: np.ndarray, samples: list[str], conditions: list[str], ref_level: str
                  ) -> dict[str, np.ndarray]:
    """The same table from ``pydeseq2`` (a peer; optional)."""
    import pandas as pd
    from pydeseq2.dds import DeseqDataSet
    from pydeseq2.ds import DeseqStats

    counts = pd.DataFrame(X.T.astype(int), index=samples)
    meta = pd.DataFrame({"condition": conditions}, index=samples)
    dds = DeseqDataSet(counts=counts, metadata=meta, design="~condition", quiet=True)
    dds.deseq2()
    other = next(c for c in conditions if c != ref_level)
    st = DeseqStats(dds, contrast=["condition", other, ref_level], quiet=True)
    st.summary()
    r = st.results_df
    return {k: r[k].to_numpy() for k in ("baseMean", "log2FoldChange", "lfcSE", "stat",
                                            "pvalue", "padj")}


def differential_expression(counts_path: str | Path, samples_path: str | Path, *,
                            reference_level: str, backend: str = "auto"
                            ) -> tuple[list[str], dict[str, np.ndarray], str]:
    """Run the DE test on files; ``reference_level`` is the baseline condition."""
    from icml_bioagent_bench.tools import resolve

    genes, cols, X = read_counts(counts_path)
    sheet = read_samples(samples_path)
    missing = [c for c in cols if c not in sheet]
    if missing:
        raise ValueError(f"count columns {missing} are not in the sample sheet")
    conds = [sheet[c] for c in cols]
    if reference_level not in conds:
        raise ValueError(f"reference level {reference_level!r} is not a condition of "
                         f"{sorted(set(conds))}")
    used = resolve("de", backend)
    if used == "pydeseq2":
        return genes, pydeseq2_test(X, cols, conds, reference_level), used
    g = np.array([0 if c == reference_level else 1 for c in conds])
    return genes, wald_test(X, g), used


def write_de_table(path: str | Path, genes: list[str], table: dict[str, np.ndarray], *,
                   padj_max: float | None = None) -> Path:
    """Write the DESeq2-style CSV (optionally only rows with padj < ``padj_max``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = ["baseMean", "log2FoldChange", "lfcSE", "stat", "pvalue", "padj"]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["gene_id", *cols])
        for i, g in enumerate(genes):
            pa = table["padj"][i]
            if padj_max is not None and not (np.isfinite(pa) and pa < padj_max):
                continue
            w.writerow([g, *(f"{float(table[c][i]):.6g}" for c in cols)])
    return path
