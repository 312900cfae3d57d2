"""Metagenomic community profiling (the official ``metagenomics`` task at toy scale): reads of
a control (JC1A) and a fertilised (JP4D) sample drawn from ten reference genomes in five phyla;
graded by the official rule, the most abundant row (JP4D + JC1A) is Pseudomonadota and at least
two further (OTU, Phylum) pairs match the truth."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icml_bioagent_bench.simulate import random_genome, simulate_pairs, write_fasta, write_fastq
from icml_bioagent_bench.task import BioTask

TASK_ID = "metagenomics"
SAMPLES = ("JC1A", "JP4D")
RULE = ("results_match is true only if the most abundant phylum is Pseudomonadota when comparing "
        "JP4D and JC1A and at least two additional OTUs have the expected Phylum labels.")
PHYLA = ("Pseudomonadota", "Pseudomonadota", "Pseudomonadota", "Pseudomonadota", "Bacillota",
         "Bacillota", "Bacteroidota", "Bacteroidota", "Actinomycetota", "Cyanobacteriota")


def make_metagenomics_task(root: str | Path, *, seed: int = 0, genome_len: int = 4000,
                           pairs_per_sample: int = 1200, read_len: int = 100,
                           error_rate: float = 0.005) -> BioTask:
    """``reference/otu_genomes.fa`` + ``reference/taxonomy.tsv`` (the classification database),
    ``data/{JC1A,JP4D}_R{1,2}.fq.gz``; truth ``truth/abundance.csv`` (true percentages)."""
    root = Path(root)
    rng = np.random.default_rng([seed, 4])
    otus = [str(2771361 + 7919 * i) for i in range(len(PHYLA))]
    genomes = {o: random_genome(rng, genome_len, gc=float(rng.uniform(0.35, 0.65)))
               for o in otus}
    # a dominant Pseudomonadota OTU in both samples, the rest Dirichlet-distributed
    frac = {}
    for s in SAMPLES:
        w = rng.dirichlet(np.ones(len(otus)) * 1.5) * 0.6
        w[0] += 0.4
        frac[s] = w / w.sum()
    tables = []
    for s in SAMPLES:
        n = rng.multinomial(pairs_per_sample, frac[s])
        r1s, r2s = [], []
        for o, k in zip(otus, n):
            if k:
                a, b = simulate_pairs(rng, genomes[o], int(k), read_len=read_len,
                                      error_rate=error_rate, prefix=f"{s}.{o}", contig=o)
                r1s += a
                r2s += b
        order = rng.permutation(len(r1s))
        write_fastq(root / "data" / f"{s}_R1.fq.gz", [r1s[i] for i in order])
        write_fastq(root / "data" / f"{s}_R2.fq.gz", [r2s[i] for i in order])
        tables.append(100.0 * n / n.sum())
    write_fasta(root / "reference" / "otu_genomes.fa", genomes)
    (root / "reference" / "taxonomy.tsv").write_text(
        "OTU\tKingdom\tPhylum\n" + "".join(f"{o}\tBacteria\t{p}\n" for o, p in zip(otus, PHYLA)))
    (root / "truth").mkdir(parents=True, exist_ok=True)
    (root / "truth" / "abundance.csv").write_text(
        "OTU,Kingdom,Phylum,JP4D,JC1A\n" + "".join(
            f"{o},Bacteria,{p},{tables[1][i]:.6g},{tables[0][i]:.6g}\n"
            for i, (o, p) in enumerate(zip(otus, PHYLA))))
    prompt = ("Perform metagenomic analysis of the control (JC1A) and fertilized (JP4D) samples "
              "(paired reads JC1A_R1.fq.gz/JC1A_R2.fq.gz and JP4D_R1.fq.gz/JP4D_R2.fq.gz) to "
              "classify microbial taxa against the reference genomes otu_genomes.fa with the "
              "taxonomy taxonomy.tsv and estimate relative abundances. The output should be a "
              "CSV file with the following columns: 'OTU','Kingdom','Phylum','JP4D','JC1A'."
              "<example>OTU,Kingdom,Phylum,JP4D,JC1A\n2771361,Bacteria,Pseudomonadota,"
              "84.8612882653061,66.4367816091954</example>")
    reads = [f"{s}_R{m}.fq.gz" for s in SAMPLES for m in (1, 2)]
    return BioTask(
        task_id=TASK_ID, name="Metagenomics: community comparison (simulated)",
        description=(f"{len(otus)} reference genomes in {len(set(PHYLA))} phyla; "
                     f"{pairs_per_sample} read pairs per sample."),
        task_prompt=prompt, root=root, inputs=reads,
        references=["otu_genomes.fa", "taxonomy.tsv"], result_rule=RULE, deliverable="*.csv",
        seed=seed, meta={"samples": list(SAMPLES), "reads": reads,
                         "reference": "otu_genomes.fa", "taxonomy": "taxonomy.tsv"})
