"""Viral metagenomics of a dolphin fecal sample (the official ``viral-metagenomics`` task at
toy scale): paired reads from host DNA, two bacteria and a Bottlenose dolphin adenovirus 1
strain; a viral genome database with its taxonomy as the reference (the official run uses a
Kaiju viral database). Deliverable: contig counts per domain and species after assembly and
classification. Graded by the official rule: Bottlenose dolphin adenovirus 1 is reported under
the Viruses domain.

Provenance: every genome is random sequence generated from the seed; the sample's adenovirus
differs from its database entry by 2 % substitutions; species names are real ICTV names.
Deviation (README): no metagenome assembler (MEGAHIT/SPAdes) or Kaiju is installable here, so
the assembler is a built-in de Bruijn graph (unitigs, k = 31) and contigs are classified with
minimap2 (mappy), blastn (Debian) or a built-in k-mer containment."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from icml_bioagent_bench.simulate import (
    random_genome,
    read_fasta,
    read_fastq,
    revcomp,
    simulate_pairs,
    write_fasta,
    write_fastq,
)
from icml_bioagent_bench.task import BioTask
from icml_bioagent_bench.tasks.common import read_csv, write_csv

TASK_ID = "viral-metagenomics"
RULE = ("results_match is true only if Bottlenose dolphin adenovirus 1 is explicitly reported "
        "under the Viruses domain.")
PROMPT = ("Analyze paired-end metagenomic sequencing data from a dolphin fecal sample to "
          "identify potential viral agents. Assemble and classify contigs, then summarize "
          "results by taxonomic domain and species. The output should be a CSV file with the "
          "following columns: 'contig_count','domain','species'.<example>contig_count,domain,"
          "species\n2,Viruses,H1N1 5\n68,Unclassified,</example>")
TARGET = "Bottlenose dolphin adenovirus 1"
#: database entries: accession -> species (all Viruses)
VIRUSES = {"NC_035207.1": TARGET, "NC_001405.1": "Human mastadenovirus C",
           "NC_005283.1": "Dolphin morbillivirus", "NC_008184.1": "Tursiops truncatus "
           "papillomavirus 2", "NC_000866.4": "Escherichia phage T4",
           "NC_001422.1": "Escherichia phage phiX174"}
HEADER = ["contig_count", "domain", "species"]


def make_task(root: str | Path, *, seed: int = 0, virus_len: int = 6000,
              virus_coverage: float = 20.0, bacteria_len: int = 6000,
              bacteria_coverage: float = 6.0, host_len: int = 20000, host_coverage: float = 1.0,
              read_len: int = 100, error_rate: float = 0.003) -> BioTask:
    """``data/dolphin_R{1,2}.fastq.gz``, ``reference/viral_db.fa`` +
    ``reference/viral_taxonomy.tsv``; truth ``truth/species_summary.csv``."""
    root = Path(root)
    rng = np.random.default_rng([seed, 51])
    db = {acc: random_genome(rng, virus_len, gc=float(rng.uniform(0.4, 0.6))) for acc in VIRUSES}
    strain = list(db["NC_035207.1"])
    for i in rng.choice(virus_len, int(0.02 * virus_len), replace=False):
        strain[i] = str(rng.choice([b for b in "ACGT" if b != strain[i]]))
    sources = [("virus", "".join(strain), virus_coverage),
               *((f"bacterium{j}", random_genome(rng, bacteria_len), bacteria_coverage)
                 for j in (1, 2)),
               ("host", random_genome(rng, host_len, gc=0.41), host_coverage)]
    r1s, r2s = [], []
    for name, seq, cov in sources:
        a, b = simulate_pairs(rng, seq, int(cov * len(seq) / (2 * read_len)), read_len=read_len,
                              error_rate=error_rate, prefix=name, contig=name)
        r1s += a
        r2s += b
    order = rng.permutation(len(r1s))
    write_fastq(root / "data" / "dolphin_R1.fastq.gz", [r1s[i] for i in order])
    write_fastq(root / "data" / "dolphin_R2.fastq.gz", [r2s[i] for i in order])
    write_fasta(root / "reference" / "viral_db.fa", db)
    (root / "reference" / "viral_taxonomy.tsv").write_text(
        "accession\tdomain\tspecies\n" + "".join(f"{a}\tViruses\t{s}\n"
                                                 for a, s in VIRUSES.items()))
    write_csv(root / "truth" / "species_summary.csv", HEADER, [[1, "Viruses", TARGET]])
    reads = ["dolphin_R1.fastq.gz", "dolphin_R2.fastq.gz"]
    return BioTask(
        task_id=TASK_ID, name="Viral Metagenomics: Species Identification (Dolphin, simulated)",
        description=(f"reads of a {virus_len} bp adenovirus at {virus_coverage:g}x, two "
                     f"bacteria and host DNA; {len(VIRUSES)} viral genomes in the database."),
        task_prompt=PROMPT + (" The reads are dolphin_R1.fastq.gz and dolphin_R2.fastq.gz; the "
                              "viral database is viral_db.fa with its taxonomy "
                              "viral_taxonomy.tsv."),
        root=root, inputs=reads, references=["viral_db.fa", "viral_taxonomy.tsv"],
        result_rule=RULE, deliverable="*.csv", seed=seed,
        meta={"reads": reads, "corrupt": {"fastq": reads}})


def assemble(reads: Iterable[str], *, k: int = 31, min_count: int = 3, min_len: int = 300
             ) -> list[str]:
    """Unitigs of the de Bruijn graph of the solid k-mers (both strands), each reported once
    (the lexicographically smaller strand), longest first."""
    counts: Counter = Counter()
    for s in reads:
        for seq in (s, revcomp(s)):
            for i in range(len(seq) - k + 1):
                km = seq[i:i + k]
                if "N" not in km:
                    counts[km] += 1
    solid = {km for km, c in counts.items() if c >= min_count}

    def succ(km: str) -> list[str]:
        return [km[1:] + b for b in "ACGT" if km[1:] + b in solid]

    def pred(km: str) -> list[str]:
        return [b + km[:-1] for b in "ACGT" if b + km[:-1] in solid]

    seen: set[str] = set()
    out: set[str] = set()
    for start in sorted(solid):
        if start in seen:
            continue
        p = pred(start)
        if len(p) == 1 and len(succ(p[0])) == 1 and p[0] != start:
            continue  # inside a unitig: reached from its start
        path, km = [start], start
        seen.add(start)
        while True:
            s = succ(km)
            if len(s) != 1 or len(pred(s[0])) != 1 or s[0] in seen:
                break
            km = s[0]
            seen.add(km)
            path.append(km)
        contig = path[0] + "".join(x[-1] for x in path[1:])
        if len(contig) >= min_len:
            out.add(min(contig, revcomp(contig)))
    return sorted(out, key=lambda c: (-len(c), c))


def classify(contigs: dict[str, str], db_fa: Path, work: Path, backend: str = "auto"
             ) -> tuple[dict[str, str], str]:
    """Best database hit (accession) per contig with >= 50 % of the contig aligned; contigs
    without one are absent."""
    from icml_bioagent_bench.tools import resolve, run_tool

    used = resolve("homology", backend)
    hits: dict[str, str] = {}
    if used == "mappy":
        import mappy

        aligner = mappy.Aligner(str(db_fa), preset="asm20", n_threads=1)
        for name, seq in contigs.items():
            best = max((h for h in aligner.map(seq) if h.is_primary), default=None,
                       key=lambda h: h.mlen)
            if best is not None and best.q_en - best.q_st >= 0.5 * len(seq):
                hits[name] = best.ctg
    elif used == "blastn":
        q = work / "contigs_query.fa"
        write_fasta(q, contigs)
        out = work / "blastn_hits.tsv"
        run_tool(["blastn", "-query", str(q), "-subject", str(db_fa), "-outfmt",
                  "6 qseqid sseqid length bitscore", "-evalue", "1e-20"], stdout=out)
        best: dict[str, tuple[float, str, int]] = {}
        for ln in out.read_text().splitlines():
            qid, sid, length, bits = ln.split("\t")
            if qid not in best or float(bits) > best[qid][0]:
                best[qid] = (float(bits), sid, int(length))
        hits = {q_: s for q_, (_, s, n) in best.items() if n >= 0.5 * len(contigs[q_])}
    else:
        db = read_fasta(db_fa)
        kk = 15
        index = {acc: {seq[i:i + kk] for i in range(len(seq) - kk + 1)} for acc, seq in db.items()}
        for name, seq in contigs.items():
            kms = [seq[i:i + kk] for i in range(0, len(seq) - kk + 1, 3)]
            rc = revcomp(seq)
            kms += [rc[i:i + kk] for i in range(0, len(rc) - kk + 1, 3)]
            frac = {acc: sum(km in s for km in kms) / max(len(kms) / 2, 1)
                    for acc, s in index.items()}
            acc = max(frac, key=frac.get) if frac else None
            if acc is not None and frac[acc] >= 0.2:
                hits[name] = acc
    return hits, used


# -- reference pipeline steps ---------------------------------------------------------------
def step_assemble(pipe: Any) -> str:
    seqs = [r.seq for f in ("reads_1", "reads_2") for r in read_fastq(pipe.input(f))]
    contigs = {f"contig_{i + 1}_len_{len(c)}": c for i, c in enumerate(assemble(seqs))}
    write_fasta(pipe.out("assemble") / "contigs.fa", contigs)
    pipe.state["contigs"] = contigs
    longest = max(map(len, contigs.values()), default=0)
    return f"{len(contigs)} contigs >= 300 bp (longest {longest})"


def step_classify_contigs(pipe: Any) -> str:
    tax = {r["accession"]: r for r in read_csv(pipe.input("taxonomy"), "\t")}
    d = pipe.out("classify_contigs")
    b = {"pypi": "mappy", "debian": "blastn"}.get(pipe.backend, pipe.backend)
    hits, used = classify(pipe.state["contigs"], pipe.input("viral_db"), d,
                          b if b in ("auto", "mappy", "blastn", "builtin") else "auto")
    rows = []
    for name in pipe.state["contigs"]:
        t = tax.get(hits.get(name, ""))
        rows.append([name, hits.get(name, ""), t["domain"] if t else "Unclassified",
                     t["species"] if t else ""])
    write_csv(d / "contig_classification.csv", ["contig", "accession", "domain", "species"],
              rows)
    pipe.state["classified"] = rows
    return f"classified with {used}: {sum(1 for r in rows if r[2] != 'Unclassified')} viral"


def step_write_result(pipe: Any) -> str:
    c = Counter((r[2], r[3]) for r in pipe.state["classified"])
    rows = [[n, dom, sp] for (dom, sp), n in sorted(c.items(), key=lambda x: (-x[1], x[0]))]
    write_csv(pipe.ws / "results" / "species_summary.csv", HEADER, rows)
    return f"wrote results/species_summary.csv ({len(rows)} rows)"


def make_decoy(task: BioTask, new: BioTask, rng: np.random.Generator) -> list[str]:
    """``bacteria_db.fa``: a bacterial database (random genomes; their accessions are not in
    the viral taxonomy), named to sort first."""
    db = {f"NZ_CP{100000 + i}.1": random_genome(rng, 6000) for i in range(5)}
    name = "bacteria_db.fa"
    write_fasta(new.reference_dir / name, db)
    new.references.append(name)
    return [name]
