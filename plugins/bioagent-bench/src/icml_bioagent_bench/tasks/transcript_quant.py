"""Transcript quantification (the official ``transcript-quant`` task at toy scale): paired
reads simulated from a small transcriptome with known counts; graded by the official rule, the
complete transcript_id -> count map equals the truth (numbers compared as decimals)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icml_bioagent_bench.simulate import random_genome, simulate_pairs, write_fasta, write_fastq
from icml_bioagent_bench.task import BioTask

TASK_ID = "transcript-quant"
RULE = ("results_match is true only if the complete transcript_id to count mapping equals the "
        "expected mapping; row order and formatting may differ.")


def make_transcript_quant_task(root: str | Path, *, seed: int = 0, n_transcripts: int = 30,
                               mean_pairs: float = 40.0, read_len: int = 100,
                               error_rate: float = 0.002, n_silent: int = 2) -> BioTask:
    """``data/transcriptome.fa``, ``data/reads_{1,2}.fq.gz``; truth
    ``truth/transcript_counts.tsv`` (every transcript, ``n_silent`` of them with count 0)."""
    root = Path(root)
    rng = np.random.default_rng([seed, 2])
    names = [f"ENST{900000 + 17 * i:011d}" for i in range(n_transcripts)]
    lengths = rng.integers(500, 1500, n_transcripts)
    tx = {n: random_genome(rng, int(L)) for n, L in zip(names, lengths)}
    counts = rng.poisson(rng.lognormal(np.log(mean_pairs), 0.8, n_transcripts)).astype(int)
    counts[rng.choice(n_transcripts, size=min(n_silent, n_transcripts), replace=False)] = 0
    r1s, r2s = [], []
    for n, c in zip(names, counts):
        if c:
            a, b = simulate_pairs(rng, tx[n], int(c), read_len=read_len, insert_mean=250,
                                  insert_sd=25, error_rate=error_rate, prefix=n, contig=n)
            r1s += a
            r2s += b
    order = rng.permutation(len(r1s))
    write_fasta(root / "data" / "transcriptome.fa", tx)
    write_fastq(root / "data" / "reads_1.fq.gz", [r1s[i] for i in order])
    write_fastq(root / "data" / "reads_2.fq.gz", [r2s[i] for i in order])
    (root / "truth").mkdir(parents=True, exist_ok=True)
    (root / "truth" / "transcript_counts.tsv").write_text(
        "transcript_id\tcount\n" + "".join(f"{n}\t{c}\n" for n, c in zip(names, counts)))
    prompt = ("Perform transcript quantification on the provided paired-end RNA-Seq reads "
              "(reads_1.fq.gz, reads_2.fq.gz) using the transcriptome reference "
              "(transcriptome.fa). Because the data is simulated, the quantification should "
              "exactly reproduce the underlying read-pair counts. The output should be a .tsv "
              "file with the following columns: 'transcript_id'\t'count'. "
              "<example>transcript_id\tcount\nENST000000001\t523</example>")
    return BioTask(
        task_id=TASK_ID, name="Transcript quantification (simulated RNA-Seq)",
        description=(f"{n_transcripts} transcripts, {len(r1s)} simulated read pairs; the "
                     "result maps transcript IDs to read-pair counts."),
        task_prompt=prompt, root=root,
        inputs=["reads_1.fq.gz", "reads_2.fq.gz", "transcriptome.fa"], references=[],
        result_rule=RULE, deliverable="*.tsv", seed=seed,
        meta={"reads": ["reads_1.fq.gz", "reads_2.fq.gz"], "reference": "transcriptome.fa",
              "n_pairs": len(r1s)})
