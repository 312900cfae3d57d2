"""Differential expression (the official ``deseq`` task at toy scale, starting from the count
matrix): negative-binomial counts for 3 planktonic and 3 biofilm samples with planted DE genes;
graded by the official rule, at least five gene_id values overlap the expected DE genes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icml_bioagent_bench.task import BioTask

TASK_ID = "deseq"
RULE = ("results_match is true only if at least five gene_id values overlap the expected DESeq "
        "output.")
SAMPLES = {"SRR1278968": "planktonic", "SRR1278969": "planktonic", "SRR1278970": "planktonic",
           "SRR1278971": "biofilm", "SRR1278972": "biofilm", "SRR1278973": "biofilm"}


def nb_counts(rng: np.random.Generator, mean: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Negative-binomial draws as a gamma-Poisson mixture (variance mu + alpha mu^2)."""
    lam = rng.gamma(1 / alpha, mean * alpha)
    return rng.poisson(lam)


def write_count_table(path: Path, genes: list[str], samples: list[str], X: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["gene_id\t" + "\t".join(samples)]
    lines += [g + "\t" + "\t".join(str(int(v)) for v in row) for g, row in zip(genes, X)]
    path.write_text("\n".join(lines) + "\n")


def make_deseq_task(root: str | Path, *, seed: int = 0, n_genes: int = 300, n_de: int = 30,
                    min_lfc: float = 1.5, max_lfc: float = 3.0) -> BioTask:
    """``data/counts.tsv`` (genes x 6 samples), ``data/samples.tsv``; truth
    ``truth/de_genes.csv`` (the planted DE genes with their true log2 fold changes)."""
    root = Path(root)
    rng = np.random.default_rng([seed, 3])
    genes = [f"CPAR2_{100000 + 10 * i}" for i in range(n_genes)]
    base = rng.lognormal(np.log(300), 1.0, n_genes)
    alpha = 0.02 + 1.0 / base
    lfc = np.zeros(n_genes)
    de = rng.choice(n_genes, size=n_de, replace=False)
    lfc[de] = rng.uniform(min_lfc, max_lfc, n_de) * rng.choice([-1, 1], n_de)
    samples = list(SAMPLES)
    sf = rng.uniform(0.7, 1.3, len(samples))
    X = np.stack([nb_counts(rng, base * sf[j] * (2 ** lfc if SAMPLES[s] == "biofilm" else 1),
                            alpha) for j, s in enumerate(samples)], axis=1)
    write_count_table(root / "data" / "counts.tsv", genes, samples, X)
    (root / "data" / "samples.tsv").write_text(
        "sample\tcondition\n" + "".join(f"{s}\t{c}\n" for s, c in SAMPLES.items()))
    (root / "truth").mkdir(parents=True, exist_ok=True)
    (root / "truth" / "de_genes.csv").write_text(
        "gene_id,log2FoldChange\n" + "".join(f"{genes[i]},{lfc[i]:.4f}\n" for i in sorted(de)))
    prompt = ("Identify differentially expressed genes between planktonic and biofilm conditions "
              "of Candida parapsilosis (biofilm versus planktonic) from the gene count matrix "
              "counts.tsv and the sample sheet samples.tsv. Report the genes with adjusted "
              "p-value below 0.05. The output should be a CSV file with the following columns: "
              "'gene_id','log2FoldChange','pvalue','padj'. <example>gene_id,log2FoldChange,"
              "pvalue,padj\nCPAR2_100010,2.31,1.2e-08,3.4e-06</example>")
    return BioTask(
        task_id=TASK_ID, name="RNA-Seq differential expression (DESeq2-style)",
        description=(f"{n_genes} genes x 6 samples (3 planktonic, 3 biofilm) of negative-"
                     f"binomial counts; {n_de} planted DE genes."),
        task_prompt=prompt, root=root, inputs=["counts.tsv", "samples.tsv"], references=[],
        result_rule=RULE, deliverable="*.csv", seed=seed,
        meta={"counts": "counts.tsv", "samples": "samples.tsv", "reference_level": "planktonic",
              "n_de": n_de})
