"""Comparative genomics of four Micrococcus genomes (the official ``comparative-genomics``
task at toy scale): genome FASTA + GFF annotation per genome and a KEGG-orthology reference;
the agent clusters orthologous genes (COGs), keeps clusters present in all four genomes,
coding-only, with a high-confidence consensus annotation, and reconstructs the phylogeny.
Graded by the official rule: at least one consensus_annotation value exactly matches.

Provenance: genomes are random sequence generated from the seed (ancestral genes, 3 %
substitutions per genome); KO identifiers and definitions are real KEGG orthology entries,
their sequences are synthetic. The consensus annotation is written as KEGG lists a KO
(``K01069  gloB, gloC, HAGH, ...``, two spaces), as in the official example."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from icml_bioagent_bench.simulate import random_genome, write_fasta
from icml_bioagent_bench.task import BioTask
from icml_bioagent_bench.tasks.common import random_cds, read_gff, write_csv, write_gff

TASK_ID = "comparative-genomics"
RULE = ("results_match is true only if at least one consensus_annotation value exactly matches "
        "the expected results.")
PROMPT = ("Reconstruct phylogeny and identify COGs across four Micrococcus genomes; filter "
          "clusters present in all genomes, coding-only, with high-confidence annotations. The "
          "output should be a CSV file with the following columns: 'cluster_number, "
          "'consensus_annotation'.<example>cluster_number,consensus_annotation\n1,K07222  "
          "K07222, putative flavoprotein involved in K+ transport\n2,K01069  gloB, gloC, HAGH, "
          "hydroxyacylglutathione hydrolase [EC:3.1.2.6]\n</example>")
GENOMES = ("Micrococcus_luteus_NCTC2665", "Micrococcus_lylae_DSM20315",
           "Micrococcus_antarcticus_T2", "Micrococcus_yunnanensis_YIM65004")
KOS = (
    ("K07222", "K07222, putative flavoprotein involved in K+ transport"),
    ("K01069", "gloB, gloC, HAGH, hydroxyacylglutathione hydrolase [EC:3.1.2.6]"),
    ("K02335", "DPO1, polA; DNA polymerase I [EC:2.7.7.7]"),
    ("K03046", "rpoC; DNA-directed RNA polymerase subunit beta' [EC:2.7.7.6]"),
    ("K03043", "rpoB; DNA-directed RNA polymerase subunit beta [EC:2.7.7.6]"),
    ("K02906", "RP-L3, MRPL3, rplC; large subunit ribosomal protein L3"),
    ("K02946", "RP-S10, MRPS10, rpsJ; small subunit ribosomal protein S10"),
    ("K01876", "aspS; aspartyl-tRNA synthetase [EC:6.1.1.12]"),
    ("K01873", "VARS, valS; valyl-tRNA synthetase [EC:6.1.1.9]"),
    ("K03701", "uvrA; excinuclease ABC subunit A"),
    ("K03553", "recA; recombination protein RecA"),
    ("K02313", "dnaA; chromosomal replication initiator protein"),
    ("K02314", "dnaB; replicative DNA helicase [EC:3.6.4.12]"),
    ("K00134", "GAPDH, gapA; glyceraldehyde 3-phosphate dehydrogenase [EC:1.2.1.12]"),
    ("K01689", "ENO, eno; enolase [EC:4.2.1.11]"),
    ("K00927", "PGK, pgk; phosphoglycerate kinase [EC:2.7.2.3]"),
    ("K01803", "TPI, tpiA; triosephosphate isomerase (TIM) [EC:5.3.1.1]"),
    ("K06147", "ABCB-BAC; ATP-binding cassette, subfamily B, bacterial"),
    ("K02469", "gyrA; DNA gyrase subunit A [EC:5.6.2.2]"),
    ("K03310", "TC.AGCS; alanine or glycine:cation symporter, AGCS family"),
    ("K01895", "ACSS1_2, acs; acetyl-CoA synthetase [EC:6.2.1.1]"),
)
N_CORE_ANNOTATED, N_CORE_HYPO, N_ACCESSORY, N_NONCODING = 15, 5, 6, 3
HEADER = ["cluster_number", "consensus_annotation"]


def annotation(ko: str, definition: str) -> str:
    return f"{ko}  {definition}"


def _mutate(rng: np.random.Generator, seq: str, rate: float) -> str:
    s = list(seq)
    for i in rng.choice(len(s), int(rate * len(s)), replace=False):
        s[i] = str(rng.choice([b for b in "ACGT" if b != s[i]]))
    return "".join(s)


def read_fasta_described(path: Path) -> dict[str, str]:
    """``{name: description}`` of a FASTA's headers (the text after the first word)."""
    out = {}
    for ln in Path(path).read_text().splitlines():
        if ln.startswith(">"):
            parts = ln[1:].split(None, 1)
            out[parts[0]] = parts[1] if len(parts) > 1 else ""
    return out


def make_task(root: str | Path, *, seed: int = 0, divergence: float = 0.03) -> BioTask:
    """``data/<genome>.fna`` + ``data/<genome>.gff`` for four genomes,
    ``reference/ko_reference.fa``; truth ``truth/core_clusters.csv``."""
    root = Path(root)
    rng = np.random.default_rng([seed, 71])
    fams: list[dict[str, Any]] = []
    kos = list(KOS)
    for _ in range(N_CORE_ANNOTATED):
        fams.append({"ko": kos.pop(0), "type": "CDS", "in": set(range(4))})
    for _ in range(N_CORE_HYPO):
        fams.append({"ko": None, "type": "CDS", "in": set(range(4))})
    for _ in range(N_ACCESSORY):
        k = int(rng.integers(2, 4))
        fams.append({"ko": kos.pop(0), "type": "CDS",
                     "in": set(rng.choice(4, k, replace=False).tolist())})
    for j in range(N_NONCODING):
        fams.append({"ko": None, "type": "rRNA" if j == 0 else "tRNA", "in": set(range(4))})
    for f in fams:
        f["seq"] = (random_cds(rng, int(rng.integers(120, 300))) if f["type"] == "CDS"
                    else random_genome(rng, 1500 if f["type"] == "rRNA" else 80))
    files = []
    for gi, gname in enumerate(GENOMES):
        parts, feats, pos, k = [], [], 1, 0
        for fi in rng.permutation(len(fams)):
            f = fams[fi]
            if gi not in f["in"]:
                continue
            gap = random_genome(rng, int(rng.integers(60, 200)))
            parts.append(gap)
            pos += len(gap)
            seq = _mutate(rng, f["seq"], divergence)
            if f["type"] == "CDS":  # keep the frame: no new stop codons
                from icml_bioagent_bench.tasks.common import translate

                if "*" in translate(seq)[:-1]:
                    seq = f["seq"]
            k += 1
            tag = f"{gname.split('_')[1][:4].upper()}_{k:05d}"
            feats.append({"seqid": gname, "type": f["type"], "start": pos,
                          "end": pos + len(seq) - 1, "strand": "+",
                          "attrs": {"ID": tag, "locus_tag": tag, "product": "hypothetical "
                                    "protein" if f["type"] == "CDS" else f["type"]}})
            parts.append(seq)
            pos += len(seq)
        write_fasta(root / "data" / f"{gname}.fna", {gname: "".join(parts)})
        write_gff(root / "data" / f"{gname}.gff", feats)
        files += [f"{gname}.fna", f"{gname}.gff"]
    ref = root / "reference" / "ko_reference.fa"
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text("".join(f">{f['ko'][0]} {f['ko'][1]}\n{_mutate(rng, f['seq'], divergence)}\n"
                           for f in fams if f["ko"]))
    core = [f for f in fams if f["ko"] and f["type"] == "CDS" and len(f["in"]) == 4]
    write_csv(root / "truth" / "core_clusters.csv", HEADER,
              [[i + 1, annotation(*f["ko"])] for i, f in enumerate(core)])
    return BioTask(
        task_id=TASK_ID, name="Comparative Genomics: Co-evolving Gene Clusters (simulated)",
        description=(f"4 genomes, {len(fams)} gene families ({N_CORE_ANNOTATED} core with a KO, "
                     f"{N_CORE_HYPO} core without, {N_ACCESSORY} accessory, {N_NONCODING} "
                     "non-coding)."),
        task_prompt=PROMPT + (" The genomes are " + ", ".join(f"{g}.fna" for g in GENOMES)
                              + " with their annotations " + ", ".join(f"{g}.gff"
                                                                      for g in GENOMES)
                              + "; the KEGG orthology reference is ko_reference.fa."),
        root=root, inputs=files, references=["ko_reference.fa"], result_rule=RULE,
        deliverable="*.csv", seed=seed, meta={"corrupt": {}})


def similar_pairs(queries: dict[str, str], targets_fa: Path, work: Path, backend: str = "auto",
                  *, min_identity: float = 0.8, min_cover: float = 0.5
                  ) -> tuple[list[tuple[str, str, float]], str]:
    """(query, target, identity) for every hit covering >= ``min_cover`` of the query at
    >= ``min_identity``: minimap2 (mappy), blastn or built-in k-mer similarity."""
    from icml_bioagent_bench.simulate import read_fasta
    from icml_bioagent_bench.tools import resolve, run_tool

    used = resolve("homology", backend)
    out: list[tuple[str, str, float]] = []
    if used == "mappy":
        import mappy

        aligner = mappy.Aligner(str(targets_fa), preset="asm20", n_threads=1)
        for q, seq in queries.items():
            for h in aligner.map(seq):
                ident = h.mlen / max(h.blen, 1)
                if h.strand > 0 and (h.q_en - h.q_st) >= min_cover * len(seq) \
                        and ident >= min_identity:
                    out.append((q, h.ctg, ident))
    elif used == "blastn":
        qf = work / "queries.fa"
        write_fasta(qf, queries)
        res = work / "blastn.tsv"
        run_tool(["blastn", "-query", str(qf), "-subject", str(targets_fa), "-outfmt",
                  "6 qseqid sseqid pident length", "-evalue", "1e-10", "-strand", "plus"],
                 stdout=res)
        seen = set()
        for ln in res.read_text().splitlines():
            q, t, pid, n = ln.split("\t")
            if (q, t) not in seen and int(n) >= min_cover * len(queries[q]) \
                    and float(pid) / 100 >= min_identity:
                seen.add((q, t))
                out.append((q, t, float(pid) / 100))
    else:
        k = 11
        tg = {t: {s[i:i + k] for i in range(len(s) - k + 1)}
              for t, s in read_fasta(targets_fa).items()}
        for q, seq in queries.items():
            qs = {seq[i:i + k] for i in range(len(seq) - k + 1)}
            for t, ts in tg.items():
                shared = len(qs & ts) / max(min(len(qs), len(ts)), 1)
                ident = shared ** (1 / k)  # P(k-mer intact) = identity^k
                if ident >= min_identity:
                    out.append((q, t, ident))
    return out, used


def _backend(pipe: Any) -> str:
    b = {"pypi": "mappy", "debian": "blastn"}.get(pipe.backend, pipe.backend)
    return b if b in ("auto", "mappy", "blastn", "builtin") else "auto"


# -- reference pipeline steps ---------------------------------------------------------------
def step_extract_genes(pipe: Any) -> str:
    from icml_bioagent_bench.simulate import read_fasta

    d, genes, owner = pipe.out("extract_genes"), {}, {}
    for i in range(1, 5):
        seqs = read_fasta(pipe.input(f"genome_{i}"))
        mine = {}
        for f in read_gff(pipe.input(f"annotation_{i}")):
            if f["type"] != "CDS" or f["seqid"] not in seqs:
                continue  # coding-only
            name = f"g{i}|{f['attrs'].get('locus_tag', f['attrs'].get('ID'))}"
            mine[name] = seqs[f["seqid"]][f["start"] - 1:f["end"]]
            owner[name] = i
        write_fasta(d / f"genome_{i}_genes.fa", mine)
        genes.update(mine)
    write_fasta(d / "all_genes.fa", genes)
    pipe.state.update(genes=genes, owner=owner)
    return f"{len(genes)} coding genes from 4 genomes"


def step_cluster_orthologs(pipe: Any) -> str:
    genes, d = pipe.state["genes"], pipe.out("cluster_orthologs")
    hits, used = [], ""
    for i in range(1, 5):  # each genome's genes against every other genome's (no self hits)
        others = {g: s for g, s in genes.items() if pipe.state["owner"][g] != i}
        h, used = similar_pairs(others, pipe.out("extract_genes") / f"genome_{i}_genes.fa", d,
                                _backend(pipe))
        hits += h
    parent = {g: g for g in genes}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for q, t, _ in hits:
        if q != t and t in parent:
            parent[find(q)] = find(t)
    groups: dict[str, list[str]] = {}
    for g in genes:
        groups.setdefault(find(g), []).append(g)
    clusters = sorted((sorted(v) for v in groups.values()), key=lambda v: (-len(v), v[0]))
    write_csv(d / "clusters.csv", ["cluster_number", "gene", "genome"],
              [[i + 1, g, pipe.state["owner"][g]] for i, c in enumerate(clusters) for g in c])
    pipe.state["clusters"] = clusters
    return f"{len(clusters)} clusters with {used}"


def step_annotate_clusters(pipe: Any) -> str:
    ref = pipe.input("ko_reference")
    desc = read_fasta_described(ref)
    hits, used = similar_pairs(pipe.state["genes"], ref, pipe.out("annotate_clusters"),
                               _backend(pipe))
    best: dict[str, tuple[float, str]] = {}
    for q, t, ident in hits:
        if q not in best or ident > best[q][0]:
            best[q] = (ident, t)
    cons = []
    for c in pipe.state["clusters"]:
        votes = Counter(best[g][1] for g in c if g in best)
        ko, n = votes.most_common(1)[0] if votes else ("", 0)
        # high confidence: >= 75 % of the members agree on the KO
        cons.append(annotation(ko, desc.get(ko, "")) if ko and n >= 0.75 * len(c) else "")
    write_csv(pipe.out("annotate_clusters") / "cluster_annotations.csv",
              ["cluster_number", "members", "consensus_annotation"],
              [[i + 1, len(c), a] for i, (c, a) in enumerate(zip(pipe.state["clusters"], cons))])
    pipe.state["consensus"] = cons
    return f"{sum(bool(a) for a in cons)} clusters annotated with {used}"


def step_phylogeny(pipe: Any) -> str:
    """UPGMA over gene-content (Jaccard) distances between the genomes, as Newick."""
    sets = {i: {k for k, c in enumerate(pipe.state["clusters"])
                if any(pipe.state["owner"][g] == i for g in c)} for i in range(1, 5)}
    nodes = {f"genome_{i}": (sets[i], 1) for i in sets}
    trees = {n: n for n in nodes}
    dist = {}
    for a in nodes:
        for b in nodes:
            if a < b:
                u, v = nodes[a][0], nodes[b][0]
                dist[(a, b)] = 1 - len(u & v) / max(len(u | v), 1)
    while len(trees) > 1:
        (a, b), dab = min(dist.items(), key=lambda x: x[1])
        na, nb = nodes[a][1], nodes[b][1]
        new = f"({trees[a]}:{dab / 2:.4f},{trees[b]}:{dab / 2:.4f})"
        trees[new] = new
        nodes[new] = (set(), na + nb)
        for c in list(trees):
            if c in (a, b, new):
                continue
            dac = dist.get((a, c), dist.get((c, a)))
            dbc = dist.get((b, c), dist.get((c, b)))
            dist[(new, c)] = (na * dac + nb * dbc) / (na + nb)
        for x in (a, b):
            del trees[x]
        dist = {k: v for k, v in dist.items() if a not in k and b not in k}
    (tree,) = trees
    (pipe.out("phylogeny") / "species_tree.nwk").write_text(tree + ";\n")
    return f"tree {tree};"


def step_write_result(pipe: Any) -> str:
    rows = [[i + 1, a] for i, (c, a) in enumerate(zip(pipe.state["clusters"],
                                                      pipe.state["consensus"]))
            if a and {pipe.state["owner"][g] for g in c} == {1, 2, 3, 4}]
    n = write_csv(pipe.ws / "results" / "core_clusters.csv", HEADER, rows)
    return f"wrote results/core_clusters.csv ({n} clusters)"


def make_decoy(task: BioTask, new: BioTask, rng: np.random.Generator) -> list[str]:
    """A genome of another genus (``Kocuria_rhizophila_DC2201``, no gene shared with the
    Micrococcus genomes), named to sort first."""
    name = "Kocuria_rhizophila_DC2201"
    parts, feats, pos = [], [], 1
    for k in range(30):
        gap, cds = random_genome(rng, 120), random_cds(rng, int(rng.integers(120, 300)))
        parts.append(gap + cds)
        pos += len(gap)
        feats.append({"seqid": name, "type": "CDS", "start": pos, "end": pos + len(cds) - 1,
                      "strand": "+", "attrs": {"ID": f"KRH_{k + 1:05d}",
                                               "locus_tag": f"KRH_{k + 1:05d}"}})
        pos += len(cds)
    write_fasta(new.data_dir / f"{name}.fna", {name: "".join(parts)})
    write_gff(new.data_dir / f"{name}.gff", feats)
    names = [f"{name}.fna", f"{name}.gff"]
    new.inputs += names
    return names
