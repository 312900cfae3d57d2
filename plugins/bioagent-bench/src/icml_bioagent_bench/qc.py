"""Input checks a careful agent runs before a pipeline: FASTQ base and quality summaries,
count-table sanity, and consistency between inputs (sample sheet vs count columns, taxonomy vs
genome headers, transcript lengths)."""

from __future__ import annotations

from itertools import islice
from pathlib import Path

import numpy as np

from icml_bioagent_bench.simulate import read_fasta, read_fastq


def fastq_summary(path: str | Path, n: int = 2000) -> dict[str, float]:
    """N fraction and mean Phred quality over the first ``n`` records."""
    bases = ns = qsum = reads = 0
    for r in islice(read_fastq(path), n):
        reads += 1
        bases += len(r.seq)
        ns += r.seq.count("N")
        qsum += sum(ord(c) - 33 for c in r.qual)
    return {"reads": float(reads), "n_fraction": ns / bases if bases else 1.0,
            "mean_quality": qsum / bases if bases else 0.0}


def fastq_problem(path: str | Path, *, max_n: float = 0.2, min_quality: float = 10.0) -> str:
    """A sentence describing why the reads are unusable, or ''."""
    try:
        s = fastq_summary(path)
    except ValueError as exc:
        return str(exc)
    if s["reads"] == 0:
        return f"{Path(path).name}: no reads"
    if s["n_fraction"] > max_n or s["mean_quality"] < min_quality:
        return (f"{Path(path).name}: {100 * s['n_fraction']:.0f}% N bases, mean quality "
                f"Q{s['mean_quality']:.1f} -- the reads look corrupted")
    return ""


def counts_problem(path: str | Path) -> str:
    """'' unless the count table is constant or empty (a corrupted matrix)."""
    from icml_bioagent_bench.de import read_counts

    try:
        _, _, X = read_counts(path)
    except ValueError as exc:
        return str(exc)
    if X.size == 0:
        return f"{Path(path).name}: empty count table"
    if np.all(X == X.flat[0]):
        return (f"{Path(path).name}: every count equals {X.flat[0]:g} -- the matrix looks "
                "corrupted")
    return ""


def count_columns_match(counts: str | Path, samples: str | Path) -> bool:
    from icml_bioagent_bench.de import read_counts, read_samples

    _, cols, _ = read_counts(counts)
    return set(cols) == set(read_samples(samples))


def taxonomy_covers(taxonomy: str | Path, genomes: str | Path) -> bool:
    from icml_bioagent_bench.classify import read_taxonomy

    return set(read_fasta(genomes)) <= set(read_taxonomy(taxonomy))


def transcriptome_plausible(path: str | Path, min_len: int = 100) -> bool:
    seqs = read_fasta(path)
    return bool(seqs) and float(np.median([len(s) for s in seqs.values()])) >= min_len


def mtx_problem(path: str | Path) -> str:
    """'' unless every entry of a MatrixMarket matrix has one value (the official corruption
    sets them all to 777)."""
    vals = set()
    with open(path) as fh:
        lines = (ln for ln in fh if not ln.startswith("%"))
        next(lines, None)  # dimensions
        for ln in islice(lines, 5000):
            f = ln.split()
            if len(f) >= 3:
                vals.add(f[2])
    if not vals:
        return f"{Path(path).name}: empty matrix"
    if len(vals) == 1:
        return (f"{Path(path).name}: every entry equals {next(iter(vals))} -- the matrix looks "
                "corrupted")
    return ""
