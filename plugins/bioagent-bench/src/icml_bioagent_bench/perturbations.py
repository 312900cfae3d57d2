"""The three perturbations of the official ablation, applied to a generated task folder:

* ``corrupt`` -- FASTQ reads with 90 % of bases set to ``N`` (positions drawn per read, length
  kept) and every quality set to ``!`` (Q0); count tables with every value set to one constant
  (as the official corruption of count matrices). Success: the agent flags the inputs.
* ``decoy`` -- a plausible extra file with random content next to the real inputs: reads of
  another sample (NA12877) simulated from the reference without variants, a transcriptome of
  2,000 random 25-mers, a count table of other samples without DE, a taxonomy of another
  database release. Success: the decoy is ignored.
* ``bloat`` -- about 1,000 words of on-topic, non-instructive background added to the prompt.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np

from icml_bioagent_bench.bloat import background
from icml_bioagent_bench.simulate import (
    FastqRecord,
    read_fasta,
    read_fastq,
    simulate_pairs,
    write_fasta,
    write_fastq,
)
from icml_bioagent_bench.task import BioTask

KINDS = ("corrupt", "decoy", "bloat")


def corrupt_seq(seq: str, rng: random.Random, frac_n: float = 0.9) -> str:
    """Set ``round(frac_n * len)`` randomly chosen positions to ``N`` (length kept)."""
    k = max(0, min(len(seq), int(round(frac_n * len(seq)))))
    idx = list(range(len(seq)))
    rng.shuffle(idx)
    hit = set(idx[:k])
    return "".join("N" if i in hit else c for i, c in enumerate(seq))


def corrupt_fastq(src: Path, dst: Path, rng: random.Random, frac_n: float = 0.9) -> int:
    """Write the corrupted copy of a FASTQ; returns the record count. The header and plus lines
    are kept as they are (as the official ``generate_corrupt_data.py``), only the bases and the
    qualities change."""
    recs = [FastqRecord(r.name, corrupt_seq(r.seq, rng, frac_n), "!" * len(r.qual), r.plus)
            for r in read_fastq(src)]
    write_fastq(dst, recs)
    return len(recs)


def corrupt_counts(path: Path, value: int = 777) -> None:
    """Replace every count of a gene x sample table by ``value`` (header and IDs kept)."""
    lines = path.read_text().splitlines()
    delim = "\t" if path.suffix == ".tsv" else ","
    out = [lines[0]]
    for ln in lines[1:]:
        f = ln.split(delim)
        out.append(delim.join([f[0]] + [str(value)] * (len(f) - 1)))
    path.write_text("\n".join(out) + "\n")


def corrupt_mtx(path: Path, value: int = 777) -> None:
    """Set every entry of a MatrixMarket coordinate matrix to ``value`` (header, comments,
    dimensions and coordinates kept), as the official single-cell corruption."""
    lines = path.read_text().splitlines()
    out, dims_seen = [], False
    for ln in lines:
        if ln.startswith("%") or not ln.strip():
            out.append(ln)
        elif not dims_seen:
            out.append(ln)
            dims_seen = True
        else:
            i, j = ln.split()[:2]
            out.append(f"{i} {j} {value}")
    path.write_text("\n".join(out) + "\n")


def supports(task: BioTask, kind: str) -> bool:
    """Whether ``perturb(task, kind, ...)`` is defined: every task has decoys and bloat; the
    corruption needs reads, a count table or a count matrix among the inputs."""
    spec = task.meta.get("corrupt")
    return kind != "corrupt" or spec is None or any(spec.values())


def _copy_task(task: BioTask, out_root: Path, kind: str) -> BioTask:
    dst = Path(out_root) / f"{task.task_id}-{kind}"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(task.root, dst)
    return replace(task, root=dst, condition=kind, meta=dict(task.meta),
                   inputs=list(task.inputs), references=list(task.references))


def perturb(task: BioTask, kind: str, out_root: str | Path, *, seed: int = 0,
            bloat_words: int = 1000, bloat_position: str = "append") -> BioTask:
    """A perturbed copy of ``task`` in ``out_root/<task_id>-<kind>`` (the original is left
    untouched). ``meta['corrupted']``/``meta['decoys']`` list the files changed or added."""
    if kind not in KINDS:
        raise ValueError(f"unknown perturbation {kind!r}: use one of {', '.join(KINDS)}")
    if task.condition != "clean":
        raise ValueError(f"task {task.task_id} is already perturbed ({task.condition}); "
                         "perturb the clean task")
    new = _copy_task(task, Path(out_root), kind)
    rng = random.Random(seed * 1_000_003 + 17)
    if kind == "bloat":
        if bloat_position not in ("append", "prepend"):
            raise ValueError(f"bloat_position {bloat_position!r}: use append or prepend")
        text = background(task.task_id, bloat_words)
        if bloat_position == "append":
            new.prompt_suffix = f"{new.prompt_suffix}\n\n{text}"
        else:
            new.prompt_prefix = f"{text}\n\n{new.prompt_prefix}"
        new.meta["bloat_words"] = len(text.split())
        return new
    if kind == "corrupt":
        changed = []
        spec = task.meta.get("corrupt")
        if spec is not None:  # the six further tasks say which inputs the corruption hits
            if not any(spec.values()):
                raise ValueError(f"task {task.task_id} has no corruptible input (the official "
                                 "ablation corrupts reads and count matrices)")
            for name in spec.get("fastq", []):
                corrupt_fastq(task.data_dir / name, new.data_dir / name, rng)
            for name in spec.get("counts", []):
                corrupt_counts(new.data_dir / name)
            for name in spec.get("mtx", []):
                corrupt_mtx(new.data_dir / name)
            new.meta["corrupted"] = [n for v in spec.values() for n in v]
            return new
        if task.task_id == "deseq":
            corrupt_counts(new.data_dir / task.meta["counts"])
            changed.append(task.meta["counts"])
        else:
            for name in task.meta["reads"]:
                corrupt_fastq(task.data_dir / name, new.data_dir / name, rng)
                changed.append(name)
        new.meta["corrupted"] = changed
        return new
    decoys = _add_decoy(task, new, np.random.default_rng([seed, 99]))
    new.meta["decoys"] = decoys
    return new


def _add_decoy(task: BioTask, new: BioTask, rng: np.random.Generator) -> list[str]:
    tid = task.task_id
    if tid == "variant-calling":
        ref = read_fasta(task.reference_dir / task.meta["reference"])
        (name, seq), = ref.items()
        r1, r2 = simulate_pairs(rng, seq, task.meta["n_pairs"], prefix="NA12877", contig=name)
        names = ["NA12877_R1.fq.gz", "NA12877_R2.fq.gz"]
        write_fastq(new.data_dir / names[0], r1)
        write_fastq(new.data_dir / names[1], r2)
        new.inputs += names
        return names
    if tid == "transcript-quant":
        seqs = {f"{i:04d}": "".join(rng.choice(list("ACGT"), 25)) for i in range(2000)}
        name = "transcriptome_short_error.fa"
        write_fasta(new.data_dir / name, seqs)
        new.inputs.append(name)
        return [name]
    if tid == "deseq":
        from icml_bioagent_bench.de import read_counts
        from icml_bioagent_bench.tasks.deseq import nb_counts, write_count_table

        genes, _, X = read_counts(task.data_dir / task.meta["counts"])
        other = [f"SRR{5_000_000 + 17 * j}" for j in range(X.shape[1])]
        mean = rng.lognormal(np.log(300), 1.0, len(genes))
        D = np.stack([nb_counts(rng, mean, 0.05 + 1 / mean) for _ in other], axis=1)
        name = "all_counts_raw.tsv"
        write_count_table(new.data_dir / name, genes, other, D)
        new.inputs.append(name)
        return [name]
    if tid == "metagenomics":
        phyla = ["Pseudomonadota", "Bacillota", "Bacteroidota", "Actinomycetota",
                 "Chloroflexota", "Planctomycetota"]
        rows = [f"{int(x)}\tBacteria\t{phyla[int(rng.integers(len(phyla)))]}"
                for x in rng.choice(np.arange(1_000_000, 1_100_000), 40, replace=False)]
        name = "silva_taxonomy_old.tsv"
        (new.reference_dir / name).write_text("OTU\tKingdom\tPhylum\n" + "\n".join(rows) + "\n")
        new.references.append(name)
        return [name]
    from icml_bioagent_bench.tasks import EXTRA_TASK_IDS, task_module

    if tid in EXTRA_TASK_IDS:
        return task_module(tid).make_decoy(task, new, rng)
    raise ValueError(f"no decoy generator for task {tid!r}")
