"""Experimental evolution of E. coli (the official ``evolution`` task at toy scale): paired
reads of an ancestor line and two evolved lines; the evolved lines carry planted SNVs, some
shared by both lines, some private. Deliverable: the variants shared by both evolved lines (not
in the ancestor) with MODERATE or HIGH predicted impact. Graded by the official rule: at least
one (chromosome, position) pair matches the expected variants.

Deviation (marked in the README): the official agent assembles and annotates the ancestor
itself (no reference is given); no assembler or annotator is installable here, so the
ancestor's assembly (``ancestor_contigs.fa``, SPAdes-style contig names) and annotation
(``ancestor_annotation.gff``, Prokka-style locus tags) are part of the data. Provenance: every
sequence is simulated by :func:`make_task` from the seed (uniform random bases, random codons)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from icml_bioagent_bench.simulate import simulate_pairs, write_fasta, write_fastq
from icml_bioagent_bench.task import BioTask
from icml_bioagent_bench.tasks.common import (
    SEVERE,
    random_cds,
    read_gff,
    snv_effect,
    write_csv,
    write_gff,
)

TASK_ID = "evolution"
RULE = ("results_match is true only if at least one chromosome/CHROM and position/POS pair "
        "matches the expected variants.")
PROMPT = ("Identify and annotate genome variants in two evolved lines relative to an ancestor "
          "lines of E. coli; report only variants shared by both evolved lines of moderate or "
          "higher predicted severity. The output should be a CSV file with the following "
          "columns: 'chrom','pos','ref','alt','gene','impact','effect',status'.<example>CHROM,"
          "POS,REF,ALT,GENE,IMPACT,EFFECT,STATUS\nNODE_4_length_102007_cov_6.351643,6352,T,C,"
          "ICCIAKIK_00327,MODERATE,missense_variant,shared</example>")
LINES = ("anc", "evol1", "evol2")
HEADER = ["chrom", "pos", "ref", "alt", "gene", "impact", "effect", "status"]


def _genome(rng: np.random.Generator, n_contigs: int, genes_per_contig: int
            ) -> tuple[dict[str, str], list[dict[str, Any]]]:
    contigs, feats, k = {}, [], 0
    for c in range(n_contigs):
        parts, pos = [], 1
        body: list[dict[str, Any]] = []
        for _ in range(genes_per_contig):
            gap = "".join(rng.choice(list("ACGT"), int(rng.integers(80, 200))))
            cds = random_cds(rng, int(rng.integers(100, 250)))
            parts.append(gap)
            pos += len(gap)
            k += 1
            body.append({"type": "CDS", "start": pos, "end": pos + len(cds) - 1, "strand": "+",
                         "attrs": {"ID": f"ICCIAKIK_{k:05d}", "locus_tag": f"ICCIAKIK_{k:05d}",
                                   "product": "hypothetical protein"}})
            parts.append(cds)
            pos += len(cds)
        parts.append("".join(rng.choice(list("ACGT"), 150)))
        seq = "".join(parts)
        name = f"NODE_{c + 1}_length_{len(seq)}_cov_{float(rng.uniform(20, 40)):.6f}"
        contigs[name] = seq
        feats += [{**f, "seqid": name} for f in body]
    return contigs, feats


def annotate(contigs: dict[str, str], feats: list[dict[str, Any]], chrom: str, pos: int,
             ref: str, alt: str) -> dict[str, str]:
    """Gene, effect and impact of an SNV (+ strand CDS features; intergenic otherwise)."""
    for f in feats:
        if f["type"] == "CDS" and f["seqid"] == chrom and f["start"] <= pos <= f["end"]:
            cds = contigs[chrom][f["start"] - 1:f["end"]]
            if len(ref) == len(alt) == 1:
                e = snv_effect(cds, pos - f["start"], alt)
            else:
                e = {"effect": "frameshift_variant" if (len(alt) - len(ref)) % 3
                     else "conservative_inframe_indel", "impact": "HIGH" if (len(alt) - len(
                         ref)) % 3 else "MODERATE"}
            return {"gene": f["attrs"].get("locus_tag", f["attrs"].get("ID", "")), **e}
    return {"gene": "", "effect": "intergenic_region", "impact": "MODIFIER"}


def _mutated(seq: str, name: str, muts: list) -> str:
    """Contig ``name``'s sequence with the planted substitutions ``(contig, 1-based pos, _,
    alt)`` that fall on it applied."""
    s = list(seq)
    for c, p, _, a in muts:
        if c == name:
            s[p - 1] = a
    return "".join(s)


def _plant(rng: np.random.Generator, contigs: dict[str, str], feats: list[dict[str, Any]],
           taken: set[tuple[str, int]], *, coding: bool) -> tuple[str, int, str, str]:
    names = list(contigs)
    while True:
        if coding:
            f = feats[int(rng.integers(len(feats)))]
            chrom, pos = f["seqid"], int(rng.integers(f["start"] + 3, f["end"] - 3))
        else:
            chrom = names[int(rng.integers(len(names)))]
            pos = int(rng.integers(50, len(contigs[chrom]) - 50))
            if any(f["seqid"] == chrom and f["start"] <= pos <= f["end"] for f in feats):
                continue
        if any(c == chrom and abs(p - pos) < 120 for c, p in taken):
            continue
        ref = contigs[chrom][pos - 1]
        alt = str(rng.choice([b for b in "ACGT" if b != ref]))
        taken.add((chrom, pos))
        return chrom, pos, ref, alt


def make_task(root: str | Path, *, seed: int = 0, n_contigs: int = 2, genes_per_contig: int = 8,
              coverage: float = 25.0, n_shared: int = 5, n_private: int = 2,
              read_len: int = 100, error_rate: float = 0.005) -> BioTask:
    """``data/{anc,evol1,evol2}_R{1,2}.fastq.gz``, ``data/ancestor_contigs.fa``,
    ``data/ancestor_annotation.gff``; truth ``truth/shared_variants.csv``."""
    root = Path(root)
    rng = np.random.default_rng([seed, 21])
    contigs, feats = _genome(rng, n_contigs, genes_per_contig)
    taken: set[tuple[str, int]] = set()
    shared = [_plant(rng, contigs, feats, taken, coding=True) for _ in range(n_shared)]
    shared.append(_plant(rng, contigs, feats, taken, coding=False))
    private = {ln: [_plant(rng, contigs, feats, taken, coding=True) for _ in range(n_private)]
               for ln in ("evol1", "evol2")}
    for line in LINES:
        muts = [] if line == "anc" else shared + private[line]
        r1s, r2s = [], []
        for name, seq in contigs.items():
            n = int(coverage * len(seq) / (2 * read_len))
            a1, a2 = simulate_pairs(rng, _mutated(seq, name, muts), n, read_len=read_len,
                                    error_rate=error_rate, prefix=line, contig=name)
            r1s += a1
            r2s += a2
        order = rng.permutation(len(r1s))
        write_fastq(root / "data" / f"{line}_R1.fastq.gz", [r1s[i] for i in order])
        write_fastq(root / "data" / f"{line}_R2.fastq.gz", [r2s[i] for i in order])
    write_fasta(root / "data" / "ancestor_contigs.fa", contigs)
    write_gff(root / "data" / "ancestor_annotation.gff", feats)
    rows = []
    for c, p, r, a in sorted(shared):
        e = annotate(contigs, feats, c, p, r, a)
        if e["impact"] in SEVERE:
            rows.append([c, p, r, a, e["gene"], e["impact"], e["effect"], "shared"])
    write_csv(root / "truth" / "shared_variants.csv", HEADER, rows)
    reads = [f"{ln}_R{m}.fastq.gz" for ln in LINES for m in (1, 2)]
    return BioTask(
        task_id=TASK_ID, name="Experimental Evolution Variant Calling (E. coli, simulated)",
        description=(f"{n_contigs} ancestor contigs with {n_contigs * genes_per_contig} genes; "
                     f"{n_shared + 1} shared and {n_private} private SNVs per evolved line; "
                     f"{coverage:g}x paired reads per line."),
        task_prompt=PROMPT + (" The reads are anc_R1.fastq.gz/anc_R2.fastq.gz (ancestor), "
                              "evol1_R1.fastq.gz/evol1_R2.fastq.gz and evol2_R1.fastq.gz/"
                              "evol2_R2.fastq.gz (evolved lines); the ancestor's assembly is "
                              "ancestor_contigs.fa with its annotation ancestor_annotation.gff."),
        root=root, inputs=reads + ["ancestor_contigs.fa", "ancestor_annotation.gff"],
        references=[], result_rule=RULE, deliverable="*.csv", seed=seed,
        meta={"reads": reads, "assembly": "ancestor_contigs.fa",
              "annotation": "ancestor_annotation.gff", "corrupt": {"fastq": reads[:2]},
              "n_truth": len(rows)})


# -- reference pipeline steps (called by TaskPipeline.run_step) -----------------------------
def _map_backend(pipe: Any, stage: str) -> str:
    b = {"align": {"pypi": "mappy", "debian": "bwa"}, "sort": {"pypi": "pysam",
         "debian": "samtools"}, "call": {"pypi": "pysam", "debian": "bcftools"}}[stage]
    name = b.get(pipe.backend, pipe.backend)
    ok = {"align": ("auto", "builtin", "mappy", "bwa"), "sort": ("auto", "pysam", "samtools",
          "builtin"), "call": ("auto", "pysam", "bcftools", "builtin")}[stage]
    return name if name in ok else "auto"


def step_index_reference(pipe: Any) -> str:
    from icml_bioagent_bench.calling import prepare_reference

    pipe.state["ref"] = prepare_reference(pipe.input("assembly"), pipe.out("index_reference"))
    return f"reference indexed: {pipe.state['ref'].name}"


def step_align(pipe: Any) -> str:
    from icml_bioagent_bench.align import align_pairs, sort_and_index

    d, used = pipe.out("align"), ""
    bams = {}
    for line in LINES:
        sam, used = align_pairs(pipe.state["ref"], pipe.input(f"{line}_1"),
                                pipe.input(f"{line}_2"), d / f"{line}.sam", sample=line,
                                backend=_map_backend(pipe, "align"))
        bams[line] = sort_and_index(sam, d / line, backend=_map_backend(pipe, "sort"))
    pipe.state["bams"] = bams
    return f"aligned 3 lines with {used}"


def step_call_variants(pipe: Any) -> str:
    from icml_bioagent_bench.calling import call_variants, read_vcf

    d, calls, used = pipe.out("call_variants"), {}, ""
    for line, bam in pipe.state["bams"].items():
        vcf, used = call_variants(pipe.state["ref"], bam, d / f"{line}.vcf",
                                  backend=_map_backend(pipe, "call"), sample=line)
        calls[line] = {v.key() for v in read_vcf(vcf)}
    anc = calls["anc"]
    shared = sorted((calls["evol1"] & calls["evol2"]) - anc)
    pipe.state.update(calls=calls, shared=shared,
                      private={ln: sorted(calls[ln] - anc - calls[o]) for ln, o in
                               (("evol1", "evol2"), ("evol2", "evol1"))})
    return (f"called with {used}: {len(shared)} variants shared by both evolved lines, "
            f"{len(anc)} in the ancestor")


def step_annotate_effects(pipe: Any) -> str:
    from icml_bioagent_bench.simulate import read_fasta

    contigs = read_fasta(pipe.input("assembly"))
    feats = read_gff(pipe.input("annotation"))
    rows = []
    for status, keys in (("shared", pipe.state["shared"]), *pipe.state["private"].items()):
        for c, p, r, a in keys:
            e = annotate(contigs, feats, c, p, r, a)
            rows.append([c, p, r, a, e["gene"], e["impact"], e["effect"], status])
    write_csv(pipe.out("annotate_effects") / "annotated_variants.csv", HEADER, rows)
    pipe.state["annotated"] = rows
    return f"annotated {len(rows)} variants"


def step_write_result(pipe: Any) -> str:
    rows = [r for r in pipe.state["annotated"] if r[7] == "shared" and r[5] in SEVERE]
    n = write_csv(pipe.ws / "results" / "shared_variants.csv", HEADER, rows)
    return f"wrote results/shared_variants.csv ({n} variants)"


def make_decoy(task: BioTask, new: BioTask, rng: np.random.Generator) -> list[str]:
    """Reads of a third, unrelated evolved line (``evol0``: other private mutations, none of
    the shared ones), named to sort first."""
    from icml_bioagent_bench.simulate import read_fasta

    contigs = read_fasta(task.data_dir / "ancestor_contigs.fa")
    feats = read_gff(task.data_dir / "ancestor_annotation.gff")
    muts = [_plant(rng, contigs, feats, set(), coding=True) for _ in range(4)]
    r1s, r2s = [], []
    for name, seq in contigs.items():
        a1, a2 = simulate_pairs(rng, _mutated(seq, name, muts), int(25 * len(seq) / 200),
                                prefix="evol0", contig=name)
        r1s += a1
        r2s += a2
    names = ["evol0_R1.fastq.gz", "evol0_R2.fastq.gz"]
    write_fastq(new.data_dir / names[0], r1s)
    write_fastq(new.data_dir / names[1], r2s)
    new.inputs += names
    return names
