"""Taxonomic read classification for the metagenomics reference pipeline: best mappy hit
against the reference genomes, Debian ``kraken2`` with a database built from the same genomes
and taxonomy where installed, or a built-in k-mer vote; then relative abundances per sample."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

from icml_bioagent_bench.align import KmerIndex
from icml_bioagent_bench.quant import count_pairs_by_target
from icml_bioagent_bench.simulate import read_fasta, read_fastq
from icml_bioagent_bench.tools import resolve, run_tool


def read_taxonomy(path: str | Path) -> dict[str, dict[str, str]]:
    """``OTU -> {Kingdom, Phylum, ...}`` from a TSV/CSV with an ``OTU`` column."""
    path = Path(path)
    delim = "\t" if path.suffix == ".tsv" else ","
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter=delim))
    if not rows or "OTU" not in rows[0]:
        raise ValueError(f"{path.name}: needs an 'OTU' column")
    return {r["OTU"]: r for r in rows}


def build_kraken2_db(genomes_fa: str | Path, taxonomy: dict[str, dict[str, str]],
                     db: str | Path) -> Path:
    """A kraken2 database from the reference genomes: NCBI-style ``nodes.dmp``/``names.dmp``
    (root -> Bacteria -> phylum -> OTU, OTU ids as taxids) and ``kraken:taxid`` headers."""
    db = Path(db)
    (db / "taxonomy").mkdir(parents=True, exist_ok=True)
    phyla = sorted({t["Phylum"] for t in taxonomy.values()})
    pid = {p: 10_000_000 + i for i, p in enumerate(phyla)}
    nodes = ["1\t|\t1\t|\tno rank\t|", "2\t|\t1\t|\tsuperkingdom\t|"]
    names = ["1\t|\troot\t|\t\t|\tscientific name\t|", "2\t|\tBacteria\t|\t\t|\tscientific name\t|"]
    for p, i in pid.items():
        nodes.append(f"{i}\t|\t2\t|\tphylum\t|")
        names.append(f"{i}\t|\t{p}\t|\t\t|\tscientific name\t|")
    for otu, t in taxonomy.items():
        nodes.append(f"{otu}\t|\t{pid[t['Phylum']]}\t|\tspecies\t|")
        names.append(f"{otu}\t|\tOTU {otu}\t|\t\t|\tscientific name\t|")
    (db / "taxonomy" / "nodes.dmp").write_text("\n".join(nodes) + "\n")
    (db / "taxonomy" / "names.dmp").write_text("\n".join(names) + "\n")
    lib = db / "library_input.fa"
    seqs = read_fasta(genomes_fa)
    lib.write_text("".join(f">{n}|kraken:taxid|{n}\n{s}\n" for n, s in seqs.items()))
    run_tool(["kraken2-build", "--add-to-library", str(lib), "--db", str(db), "--no-masking"])
    run_tool(["kraken2-build", "--build", "--db", str(db), "--threads", "1"])
    return db


def classify_pairs(genomes_fa: str | Path, taxonomy: dict[str, dict[str, str]],
                   r1: str | Path, r2: str | Path, work: str | Path, *, backend: str = "auto"
                   ) -> tuple[dict[str, int], str]:
    """Read-pair counts per OTU (unclassified pairs dropped) and the backend used."""
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    used = resolve("classify", backend)
    if used == "kraken2":
        db = work.parent / "kraken2_db"
        if not (db / "hash.k2d").exists():
            build_kraken2_db(genomes_fa, taxonomy, db)
        out = work / "kraken2_output.txt"
        run_tool(["kraken2", "--db", str(db), "--paired", "--threads", "1", "--output",
                  str(out), "--report", str(work / "kraken2_report.txt"), str(r1), str(r2)])
        counts: Counter = Counter()
        for line in out.read_text().splitlines():
            f = line.split("\t")
            if f[0] == "C" and f[2] in taxonomy:
                counts[f[2]] += 1
        return dict(counts), used
    if used == "mappy":
        c, used, _ = count_pairs_by_target(genomes_fa, r1, r2, backend="mappy")
        return {k: v for k, v in c.items() if v}, used
    index = KmerIndex(read_fasta(genomes_fa), k=21)
    counts = Counter()
    for a, b in zip(read_fastq(r1), read_fastq(r2)):
        hit = index.map_read(a.seq) or index.map_read(b.seq)
        if hit is not None:
            counts[hit.ctg] += 1
    return dict(counts), used


def abundance_table(per_sample: dict[str, dict[str, int]], taxonomy: dict[str, dict[str, str]]
                    ) -> list[dict[str, str]]:
    """Rows ``OTU, Kingdom, Phylum, <sample>...`` of relative abundance in percent of the
    classified pairs, sorted by total abundance (descending)."""
    otus = sorted({o for c in per_sample.values() for o in c})
    totals = {s: max(sum(c.values()), 1) for s, c in per_sample.items()}
    rows = []
    for o in otus:
        t = taxonomy.get(o, {})
        row = {"OTU": o, "Kingdom": t.get("Kingdom", "Unclassified"),
               "Phylum": t.get("Phylum", "Unclassified")}
        for s, c in per_sample.items():
            row[s] = f"{100.0 * c.get(o, 0) / totals[s]:.6g}"
        rows.append(row)
    rows.sort(key=lambda r: -sum(float(r[s]) for s in per_sample))
    return rows
