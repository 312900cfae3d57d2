"""Germline variant calling on a simulated haploid genome (the official ``giab`` task at toy
scale): planted SNVs and indels, paired-end reads of sample NA12878; graded by the official
rule, SNP F1 > 0.7 (hap.py's SNP row; our exact-match F1 on normalised records)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icml_bioagent_bench.calling import write_vcf
from icml_bioagent_bench.simulate import (
    plant_variants,
    random_genome,
    simulate_pairs,
    write_fasta,
    write_fastq,
)
from icml_bioagent_bench.task import BioTask

TASK_ID = "variant-calling"
SAMPLE = "NA12878"
RULE = "results_match is true only if the SNP F1 score of the VCF in results/ is greater than 0.7."


def make_variant_task(root: str | Path, *, seed: int = 0, genome_len: int = 5000,
                      n_snv: int = 20, n_indel: int = 3, coverage: float = 30.0,
                      read_len: int = 100, error_rate: float = 0.005) -> BioTask:
    """Generate the task folder under ``root``: ``reference/ref.fa``, ``data/NA12878_R{1,2}
    .fq.gz`` and ``truth/truth.vcf`` (sorted, normalised)."""
    root = Path(root)
    rng = np.random.default_rng([seed, 1])
    ref = random_genome(rng, genome_len)
    alt, variants = plant_variants(rng, ref, n_snv, n_indel, chrom="chr1")
    n_pairs = max(1, int(round(coverage * genome_len / (2 * read_len))))
    r1, r2 = simulate_pairs(rng, alt, n_pairs, read_len=read_len, error_rate=error_rate,
                            prefix=SAMPLE)
    write_fasta(root / "reference" / "ref.fa", {"chr1": ref})
    write_fastq(root / "data" / f"{SAMPLE}_R1.fq.gz", r1)
    write_fastq(root / "data" / f"{SAMPLE}_R2.fq.gz", r2)
    write_vcf(root / "truth" / "truth.vcf", variants, {"chr1": ref}, sample=SAMPLE)
    prompt = (f"Use the paired-end sequencing data of sample {SAMPLE} "
              f"({SAMPLE}_R1.fq.gz, {SAMPLE}_R2.fq.gz) and the reference genome ref.fa to "
              "perform germline variant calling (SNVs and small indels) on this haploid "
              "genome. The output should be a .vcf.gz variant call file.")
    return BioTask(
        task_id=TASK_ID, name="Germline variant calling (simulated haploid genome)",
        description=(f"Simulated {genome_len} bp haploid genome with planted SNVs and indels; "
                     f"{n_pairs} read pairs ({coverage:g}x) of sample {SAMPLE}."),
        task_prompt=prompt, root=root,
        inputs=[f"{SAMPLE}_R1.fq.gz", f"{SAMPLE}_R2.fq.gz"], references=["ref.fa"],
        result_rule=RULE, deliverable="*.vcf.gz", seed=seed,
        meta={"sample": SAMPLE, "reads": [f"{SAMPLE}_R1.fq.gz", f"{SAMPLE}_R2.fq.gz"],
              "reference": "ref.fa", "n_snv": n_snv, "n_indel": n_indel,
              "genome_len": genome_len, "n_pairs": n_pairs})
