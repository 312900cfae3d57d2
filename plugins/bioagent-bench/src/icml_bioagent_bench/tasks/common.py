"""Helpers the six further official tasks share: the genetic code and SNV effect prediction
(snpEff's effect and impact names), a minimal GFF, Benjamini-Hochberg, the hypergeometric
upper tail, CSV writing, and the pipeline-step plumbing for task modules."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

BASES = "TCAG"
AMINO = "FFLLSSSSYY**CC*WLLLLPPPPHHQQRRRRIIIMTTTTNNKKSSRRVVVVAAAADDEEGGGG"
CODON_TABLE = {a + b + c: AMINO[16 * i + 4 * j + k] for i, a in enumerate(BASES)
               for j, b in enumerate(BASES) for k, c in enumerate(BASES)}
THREE = {"A": "Ala", "R": "Arg", "N": "Asn", "D": "Asp", "C": "Cys", "Q": "Gln", "E": "Glu",
         "G": "Gly", "H": "His", "I": "Ile", "L": "Leu", "K": "Lys", "M": "Met", "F": "Phe",
         "P": "Pro", "S": "Ser", "T": "Thr", "W": "Trp", "Y": "Tyr", "V": "Val", "*": "*"}
#: snpEff's impact class of each effect we predict
IMPACT = {"stop_gained": "HIGH", "stop_lost": "HIGH", "start_lost": "HIGH",
          "missense_variant": "MODERATE", "synonymous_variant": "LOW",
          "intergenic_region": "MODIFIER"}
SEVERE = ("HIGH", "MODERATE")


def random_cds(rng: np.random.Generator, n_codons: int) -> str:
    """ATG + ``n_codons - 2`` random sense codons + TAA."""
    sense = [c for c, a in CODON_TABLE.items() if a != "*"]
    mid = [sense[i] for i in rng.integers(0, len(sense), n_codons - 2)]
    return "ATG" + "".join(mid) + "TAA"


def translate(cds: str) -> str:
    return "".join(CODON_TABLE.get(cds[i:i + 3], "X") for i in range(0, len(cds) - 2, 3))


def snv_effect(cds: str, offset: int, alt: str) -> dict[str, str]:
    """Effect of replacing ``cds[offset]`` (0-based, coding strand) by ``alt``: effect,
    impact, HGVS c. and p. notation (snpEff's names)."""
    i = offset // 3
    codon = cds[3 * i:3 * i + 3]
    new = codon[:offset % 3] + alt + codon[offset % 3 + 1:]
    a, b = CODON_TABLE[codon], CODON_TABLE[new]
    if a == b:
        eff = "synonymous_variant"
    elif b == "*":
        eff = "stop_gained"
    elif a == "*":
        eff = "stop_lost"
    elif i == 0:
        eff = "start_lost"
    else:
        eff = "missense_variant"
    return {"effect": eff, "impact": IMPACT[eff],
            "hgvs_c": f"c.{offset + 1}{cds[offset]}>{alt}",
            "hgvs_p": f"p.{THREE[a]}{i + 1}{THREE[b]}"}


def read_gff(path: str | Path) -> list[dict[str, Any]]:
    """Features of a GFF3 file: seqid, type, start, end (1-based), strand, attributes."""
    out = []
    for ln in Path(path).read_text().splitlines():
        if not ln.strip() or ln.startswith("#"):
            continue
        f = ln.split("\t")
        if len(f) < 9:
            raise ValueError(f"{Path(path).name}: malformed GFF line {ln[:60]!r}")
        attrs = dict(kv.split("=", 1) for kv in f[8].split(";") if "=" in kv)
        out.append({"seqid": f[0], "type": f[2], "start": int(f[3]), "end": int(f[4]),
                    "strand": f[6], "attrs": attrs})
    return out


def write_gff(path: Path, feats: Iterable[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["##gff-version 3"]
    for f in feats:
        attrs = ";".join(f"{k}={v}" for k, v in f["attrs"].items())
        lines.append("\t".join([f["seqid"], "sim", f["type"], str(f["start"]), str(f["end"]),
                                ".", f["strand"], "0" if f["type"] == "CDS" else ".", attrs]))
    path.write_text("\n".join(lines) + "\n")


def bh(p: Sequence[float]) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values."""
    p = np.asarray(p, dtype=float)
    n = len(p)
    if n == 0:
        return p
    order = np.argsort(p)
    adj = p[order] * n / np.arange(1, n + 1)
    adj = np.minimum.accumulate(adj[::-1])[::-1]
    out = np.empty(n)
    out[order] = np.minimum(adj, 1.0)
    return out


def hypergeom_sf(k: int, M: int, n: int, N: int) -> float:
    """P(X >= k) for X ~ Hypergeometric(population M, n successes, N draws)."""
    def lc(a: int, b: int) -> float:
        return math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(a - b + 1)

    hi = min(n, N)
    if k > hi:
        return 0.0
    den = lc(M, N)
    terms = [lc(n, x) + lc(M - n, N - x) - den for x in range(max(k, 0), hi + 1)
             if N - x <= M - n]
    if not terms:
        return 0.0
    m = max(terms)
    return float(min(1.0, math.exp(m) * sum(math.exp(t - m) for t in terms)))


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for r in rows:
            w.writerow(r)
            n += 1
    return n


def read_csv(path: str | Path, delimiter: str = ",") -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh, delimiter=delimiter))
