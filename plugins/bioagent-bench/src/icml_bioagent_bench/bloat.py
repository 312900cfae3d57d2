"""On-topic, non-instructive background text for the prompt-bloat perturbation (the official
ablation adds about 1,000 hand-written words per task; these paragraphs are ours). The text is
built from task-specific paragraphs followed by general ones, cycled to the word budget."""

from __future__ import annotations

TASK_BACKGROUND = {
    "variant-calling": [
        "Germline variant calling asks which positions of an individual's genome differ from a "
        "reference assembly. Reference samples such as NA12878 and its relatives NA12877 and "
        "NA12882 have been sequenced many times on many platforms, and consortia have curated "
        "high-confidence call sets for them, which is why they are popular for comparing "
        "pipelines. A typical comparison reports precision, recall and the F1 score separately "
        "for single-nucleotide variants and for insertions and deletions, because the two "
        "classes behave differently during alignment and calling.",
        "Small insertions and deletions are harder than substitutions: reads that span them "
        "align with gaps, and the same event can often be written at several positions inside "
        "a repeat, which is why call sets are normalised and left-aligned before they are "
        "compared. Coverage matters too: at low depth a true variant may be supported by only a "
        "handful of reads, while sequencing errors occasionally line up by chance. Ploidy "
        "shapes the expected allele fractions; a haploid genome carries each variant on every "
        "read that covers it, whereas a diploid genome also has heterozygous sites near one "
        "half.",
    ],
    "transcript-quant": [
        "Transcript quantification estimates how many sequenced fragments originate from each "
        "transcript of a transcriptome. Because the fragments are short and many transcripts "
        "share exons, early methods aligned reads to the genome and counted overlaps, while "
        "newer tools map or pseudo-align reads directly to transcript sequences and resolve "
        "ambiguous assignments with an expectation-maximisation procedure. The resulting "
        "estimates are reported as read counts and as length-normalised abundances such as "
        "transcripts per million.",
        "Simulated RNA-Seq experiments are a common way to study such tools, since the true "
        "origin of every fragment is known. Simulators draw transcript abundances from skewed "
        "distributions, so a few transcripts receive most fragments while others are barely "
        "expressed or silent. Fragment lengths follow a distribution around a mean insert size, "
        "and reads may carry substitution errors at a low rate. Quantification accuracy is then "
        "summarised by correlations or by the fraction of transcripts whose count is exact.",
    ],
    "deseq": [
        "Candida parapsilosis is a yeast that forms biofilms on medical devices, and biofilm "
        "growth differs from free-floating planktonic growth in adhesion, matrix production and "
        "drug tolerance. Comparing the two conditions by RNA-Seq is a standard way to find the "
        "genes behind these differences. Count tables summarise how many reads fall on each "
        "gene in each sample, and a sample sheet records which condition every library belongs "
        "to, along with identifiers from the sequencing archive.",
        "Count data are overdispersed: replicate libraries vary more than a Poisson model "
        "predicts, and the extra variance grows with expression. Negative-binomial models "
        "capture this with a dispersion parameter per gene, usually stabilised by borrowing "
        "information across genes. Libraries also differ in depth, so counts are scaled by "
        "size factors before they are compared. Thousands of genes are tested at once, which "
        "is why p-values are adjusted for multiple testing, most often with the "
        "Benjamini-Hochberg procedure controlling the false discovery rate.",
    ],
    "metagenomics": [
        "The Cuatro Cienegas Basin in Mexico hosts pools with unusually diverse microbial "
        "communities that have been studied as analogues of early Earth environments. "
        "Fertilisation experiments add nutrients to some pools and compare their communities "
        "with untreated controls, asking which groups of bacteria profit when a limiting "
        "resource becomes available. Shotgun metagenomic sequencing samples DNA from every "
        "organism present, so the reads must be assigned to taxa before communities can be "
        "compared.",
        "Taxonomic classifiers compare reads with reference genomes or with databases of "
        "k-mers labelled by taxon, and they report, for each sample, how many reads fall in "
        "each taxon. Relative abundances are compositional: they sum to one hundred percent, so "
        "an increase of one group implies a decrease of others. Phyla such as Pseudomonadota, "
        "Bacillota, Bacteroidota, Actinomycetota and Cyanobacteriota are frequent in aquatic "
        "communities, and their balance shifts with nutrients, light and salinity.",
    ],
}

GENERAL_BACKGROUND = [
    "High-throughput sequencing turned many questions in biology into data-analysis problems. "
    "Instruments produce millions of short reads with per-base quality scores on the Phred "
    "scale, where a score of thirty corresponds to an error probability of one in a thousand. "
    "Reads are stored in FASTQ files, often compressed, and are usually paired: two reads come "
    "from the two ends of the same DNA fragment, separated by an insert whose length follows "
    "the library preparation.",
    "Reproducibility is a recurring concern in computational biology. Analyses combine many "
    "tools, each with versions, defaults and parameters, and small differences between them "
    "can change results. Workflow managers, containers and environment files help record what "
    "was run. Keeping intermediate files, logs and the exact commands makes it possible to "
    "audit a result later and to rerun it when a reference or a tool changes.",
    "Reference resources evolve. Genome assemblies are revised, annotation releases add and "
    "retire genes, and taxonomies rename whole phyla as phylogenies improve; the phylum once "
    "called Proteobacteria is now named Pseudomonadota, and Firmicutes is now Bacillota. "
    "Results computed against different releases are therefore not always comparable without "
    "mapping identifiers between them.",
    "Quality control appears at every stage of sequencing analysis. Typical checks look at "
    "base-quality profiles along the read, the fraction of ambiguous bases, adapter content, "
    "duplication levels and the fraction of reads that align. Many problems, such as a failed "
    "run, a swapped sample or a truncated file, are visible in such summaries long before they "
    "surface as odd biological results.",
    "Benchmarks for analysis pipelines rely on data where the answer is known, either because "
    "the data were simulated or because a well-studied sample has a curated truth set. "
    "Simulations give complete control but may miss the quirks of real data; curated truth "
    "sets are realistic but cover only the regions where the truth is confidently known.",
]


def background(task_id: str, words: int = 1000) -> str:
    """About ``words`` words of background for ``task_id`` (whole paragraphs; the last one may
    be cut at a sentence boundary)."""
    if words < 1:
        raise ValueError(f"bloat words must be >= 1, got {words}")
    paras = TASK_BACKGROUND.get(task_id, []) + GENERAL_BACKGROUND
    out: list[str] = []
    n = 0
    i = 0
    while n < words:
        p = paras[i % len(paras)]
        w = p.split()
        if n + len(w) > words:
            cut = " ".join(w[: words - n])
            end = cut.rfind(".")
            p = cut[: end + 1] if end > 0 else cut
            out.append(p)
            break
        out.append(p)
        n += len(w)
        i += 1
    return "\n\n".join(out)
