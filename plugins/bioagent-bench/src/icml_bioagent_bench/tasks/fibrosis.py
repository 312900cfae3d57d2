"""Cystic fibrosis in a three-generation family (the official ``cystic-fibrosis`` task at toy
scale): a joint VCF of the CEPH 1463 pedigree (4 grandparents, 2 parents, 11 siblings) with a
planted recessive CFTR nonsense variant (G542X: 7:117227832 G>T, homozygous in the affected
siblings NA12879, NA12885 and NA12886), ClinVar as the reference, and a transcript model for
effect prediction. Deliverable: the causal variant with its annotation. Graded by the official
rule: the CFTR record (chromosome 7, position 117227832, variant_id 7115, G>T, CFTR,
ENSG00000001626, stop_gained, HIGH, ENST00000003084) is reported exactly once.

Provenance: genotypes are simulated by Mendelian transmission from the seed; the CFTR
identifiers, position, ClinVar variation id 7115 and rs113993959 are the real ones of G542X;
the CFTR transcript is modelled as one exon of random codons with codon 542 = GGA, and every
other gene, variant and ClinVar record is synthetic."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np

from icml_bioagent_bench.simulate import read_fasta, write_fasta
from icml_bioagent_bench.task import BioTask
from icml_bioagent_bench.tasks.common import random_cds, read_csv, snv_effect, write_csv

TASK_ID = "cystic-fibrosis"
RULE = ("results_match is true only if the causal CFTR variant is reported exactly once with "
        "chromosome 7, position 117227832, variant_id 7115, reference G, alternate T, gene CFTR, "
        "gene_id ENSG00000001626, annotation stop_gained, impact HIGH, and transcript "
        "ENST00000003084.")
PROMPT = ("Find the genetic cause of Cystic fibrosis; identify the causal recessive variant "
          "consistent with affected siblings NA12885, NA12886, and NA12879. The output should "
          "be a CSV file with the following columns: chromosome,position,variant_id,reference,"
          "alternate,gene_name,gene_id,annotation,impact,transcript_id,hgvs_c,hgvs_p,"
          "clinical_significance,diseases,review_status,rs_id. <example>chromosome,position,"
          "variant_id,reference,alternate,gene_name,gene_id,annotation,impact,transcript_id,"
          "hgvs_c,hgvs_p,clinical_significance,diseases,review_status,rs_id\nX,123456789,VAR123,"
          "A,G,GENE1,ENSG00000000001,missense_variant,MODERATE,ENST00000000001,c.123A>G,"
          "p.Lys41Arg,Likely_pathogenic,Disease_A; Disease_B; not_provided,"
          "reviewed_by_expert_panel,rs0000001</example>")
HEADER = ["chromosome", "position", "variant_id", "reference", "alternate", "gene_name",
          "gene_id", "annotation", "impact", "transcript_id", "hgvs_c", "hgvs_p",
          "clinical_significance", "diseases", "review_status", "rs_id"]
GRANDPARENTS = ("NA12889", "NA12890", "NA12891", "NA12892")
FATHER, MOTHER = "NA12877", "NA12878"
CHILDREN = ("NA12879", "NA12880", "NA12881", "NA12882", "NA12883", "NA12884", "NA12885",
            "NA12886", "NA12887", "NA12888", "NA12893")
AFFECTED = ("NA12879", "NA12885", "NA12886")
SAMPLES = GRANDPARENTS + (FATHER, MOTHER) + CHILDREN
CFTR = {"gene_name": "CFTR", "gene_id": "ENSG00000001626", "transcript_id": "ENST00000003084",
        "chrom": "7", "cds_start": 117226209, "n_codons": 1481}
CAUSAL = ("7", 117227832, "G", "T")
CLINVAR_CFTR = {"ID": "7115", "CLNSIG": "Pathogenic", "CLNDN": "Cystic_fibrosis|"
                "CFTR-related_disorders|not_provided", "CLNREVSTAT": "reviewed_by_expert_panel",
                "GENEINFO": "CFTR:1080", "RS": "113993959"}


def _transmit(rng: np.random.Generator, a: tuple[int, int], b: tuple[int, int]) -> tuple[int,
                                                                                          int]:
    return (a[int(rng.integers(2))], b[int(rng.integers(2))])


def _family(rng: np.random.Generator, af: float) -> dict[str, tuple[int, int]]:
    g = {s: (int(rng.random() < af), int(rng.random() < af)) for s in GRANDPARENTS}
    g[FATHER] = _transmit(rng, g["NA12889"], g["NA12890"])
    g[MOTHER] = _transmit(rng, g["NA12891"], g["NA12892"])
    for c in CHILDREN:
        g[c] = _transmit(rng, g[FATHER], g[MOTHER])
    return g


def _causal_family(rng: np.random.Generator) -> dict[str, tuple[int, int]]:
    g = {s: (0, 0) for s in GRANDPARENTS}
    g["NA12889"], g["NA12892"] = (1, 0), (0, 1)
    g[FATHER], g[MOTHER] = (1, 0), (0, 1)
    for c in CHILDREN:
        g[c] = (1, 1) if c in AFFECTED else [(1, 0), (0, 1), (0, 0)][int(rng.integers(3))]
    return g


def _gt(a: tuple[int, int]) -> str:
    return f"{min(a)}/{max(a)}"


def make_task(root: str | Path, *, seed: int = 0, n_variants: int = 300, n_genes: int = 6
              ) -> BioTask:
    """``data/family.vcf.gz`` (17 samples), ``data/family.ped``,
    ``reference/clinvar_20250521.vcf.gz``, ``reference/transcripts.tsv``, ``reference/cds.fa``;
    truth ``truth/causal_variant.csv``."""
    root = Path(root)
    rng = np.random.default_rng([seed, 61])
    cftr = random_cds(rng, CFTR["n_codons"])
    off = CAUSAL[1] - CFTR["cds_start"]
    assert off % 3 == 0 and off // 3 == 541
    cftr = cftr[:off] + "GGA" + cftr[off + 3:]
    genes = [dict(CFTR, cds_end=CFTR["cds_start"] + len(cftr) - 1)]
    cds = {CFTR["transcript_id"]: cftr}
    for j in range(n_genes):
        n = int(rng.integers(150, 400))
        chrom = str(int(rng.integers(1, 23)))
        start = int(rng.integers(1_000_000, 90_000_000))
        tid = f"ENST{90_000_000 + 101 * j:011d}"
        cds[tid] = random_cds(rng, n)
        genes.append({"gene_name": f"GENE{j + 1}", "gene_id": f"ENSG{90_000_000 + 37 * j:011d}",
                      "transcript_id": tid, "chrom": chrom, "cds_start": start,
                      "cds_end": start + 3 * n - 1})
    records = [(CAUSAL, _causal_family(rng))]
    taken = {CAUSAL[:2]}
    while len(records) < n_variants:
        if rng.random() < 0.4:  # inside a gene
            gdef = genes[int(rng.integers(len(genes)))]
            pos = int(rng.integers(gdef["cds_start"], gdef["cds_end"] + 1))
            ref = cds[gdef["transcript_id"]][pos - gdef["cds_start"]]
            chrom = gdef["chrom"]
        else:
            chrom, pos = str(int(rng.integers(1, 23))), int(rng.integers(1_000_000, 150_000_000))
            ref = str(rng.choice(list("ACGT")))
        if (chrom, pos) in taken:
            continue
        taken.add((chrom, pos))
        alt = str(rng.choice([b for b in "ACGT" if b != ref]))
        records.append(((chrom, pos, ref, alt), _family(rng, float(rng.uniform(0.05, 0.6)))))
    records.sort(key=lambda r: (int(r[0][0]), r[0][1]))
    lines = ["##fileformat=VCFv4.2", '##FORMAT=<ID=GT,Number=1,Type=String,Description='
             '"Genotype">', *(f"##contig=<ID={c}>" for c in range(1, 23)),
             "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\t" + "\t".join(SAMPLES)]
    for (c, p, r, a), g in records:
        if all(g[s] == (0, 0) for s in SAMPLES):
            continue
        lines.append(f"{c}\t{p}\t.\t{r}\t{a}\t50\tPASS\t.\tGT\t"
                     + "\t".join(_gt(g[s]) for s in SAMPLES))
    _write_bgzip(root / "data" / "family.vcf.gz", "\n".join(lines) + "\n")
    ped = ["#FID\tIID\tPAT\tMAT\tSEX\tPHENO"]
    sex = {"NA12889": 1, "NA12890": 2, "NA12891": 1, "NA12892": 2, FATHER: 1, MOTHER: 2}
    for s in SAMPLES:
        pat, mat = ((FATHER, MOTHER) if s in CHILDREN else ("NA12889", "NA12890")
                    if s == FATHER else ("NA12891", "NA12892") if s == MOTHER else ("0", "0"))
        ped.append(f"CEPH1463\t{s}\t{pat}\t{mat}\t{sex.get(s, 1 + int(rng.integers(2)))}\t"
                   f"{2 if s in AFFECTED else 1}")
    (root / "data" / "family.ped").write_text("\n".join(ped) + "\n")
    _write_clinvar(root / "reference" / "clinvar_20250521.vcf.gz", records, rng,
                   with_causal=True)
    (root / "reference" / "transcripts.tsv").write_text(
        "gene_name\tgene_id\ttranscript_id\tchrom\tcds_start\tcds_end\tstrand\n" + "".join(
            f"{g['gene_name']}\t{g['gene_id']}\t{g['transcript_id']}\t{g['chrom']}\t"
            f"{g['cds_start']}\t{g['cds_end']}\t+\n" for g in genes))
    write_fasta(root / "reference" / "cds.fa", cds)
    eff = snv_effect(cftr, off, "T")
    write_csv(root / "truth" / "causal_variant.csv", HEADER, [[
        "7", CAUSAL[1], "7115", "G", "T", "CFTR", CFTR["gene_id"], eff["effect"], eff["impact"],
        CFTR["transcript_id"], eff["hgvs_c"], eff["hgvs_p"], "Pathogenic",
        "Cystic_fibrosis; CFTR-related_disorders; not_provided", "reviewed_by_expert_panel",
        "rs113993959"]])
    return BioTask(
        task_id=TASK_ID, name="Cystic Fibrosis Mendelian Variant Identification (simulated)",
        description=(f"joint VCF of {len(SAMPLES)} CEPH 1463 members, {n_variants} variants, "
                     f"{len(genes)} transcripts; one planted recessive CFTR variant."),
        task_prompt=PROMPT + (" The family's variants are family.vcf.gz with the pedigree "
                              "family.ped; the references are clinvar_20250521.vcf.gz, the "
                              "transcript models transcripts.tsv and their coding sequences "
                              "cds.fa."),
        root=root, inputs=["family.vcf.gz", "family.ped"],
        references=["clinvar_20250521.vcf.gz", "transcripts.tsv", "cds.fa"], result_rule=RULE,
        deliverable="*.csv", seed=seed, meta={"corrupt": {}})


def _write_bgzip(path: Path, text: str) -> None:
    """BGZF (readable by tabix/pysam and by gzip) via pysam; plain gzip without it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    plain = path.with_suffix("")
    plain.write_text(text)
    try:
        import pysam

        pysam.tabix_compress(str(plain), str(path), force=True)
    except ImportError:
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    plain.unlink()


def _write_clinvar(path: Path, records: list, rng: np.random.Generator, *, with_causal: bool
                   ) -> None:
    lines = ["##fileformat=VCFv4.1", "##source=ClinVar (synthetic subset)",
             *(f"##contig=<ID={c}>" for c in range(1, 23)),
             *(f'##INFO=<ID={k},Number=.,Type=String,Description="{k}">'
               for k in ("ALLELEID", "CLNDN", "CLNREVSTAT", "CLNSIG", "GENEINFO", "RS")),
             "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO"]
    vid = 100000
    for (c, p, r, a), _ in records:
        if (c, p, r, a) == CAUSAL:
            if with_causal:
                info = ";".join(f"{k}={v}" for k, v in CLINVAR_CFTR.items() if k != "ID")
                lines.append(f"{c}\t{p}\t7115\t{r}\t{a}\t.\t.\tALLELEID=22174;{info}")
            continue
        if rng.random() < 0.15:
            vid += 1 + int(rng.integers(50))
            sig = str(rng.choice(["Benign", "Likely_benign", "Uncertain_significance",
                                  "Pathogenic"], p=[0.45, 0.3, 0.2, 0.05]))
            lines.append(f"{c}\t{p}\t{vid}\t{r}\t{a}\t.\t.\tALLELEID={vid + 7};CLNDN="
                         f"not_provided;CLNREVSTAT=criteria_provided,_single_submitter;CLNSIG="
                         f"{sig};RS={vid * 3 + 1}")
    _write_bgzip(path, "\n".join(lines) + "\n")


def read_vcf_rows(path: Path, backend: str = "auto") -> tuple[list[str], list[dict[str, Any]]]:
    """(samples, records) of a (bgzipped) VCF: chrom, pos, id, ref, alt, info dict, genotypes
    (sample -> allele count or None), with pysam where installed."""
    from icml_bioagent_bench.tools import resolve

    used = resolve("vcf", backend)
    rows: list[dict[str, Any]] = []
    if used == "pysam":
        import pysam

        level = pysam.set_verbosity(0)  # no "could not retrieve index" noise: no index needed
        try:
            vf = pysam.VariantFile(str(path))
        finally:
            pysam.set_verbosity(level)
        with vf:
            samples = list(vf.header.samples)
            for rec in vf:
                info = {k: ("|".join(map(str, v)) if isinstance(v, tuple) else str(v))
                        for k, v in rec.info.items()}
                gts = {}
                for s in samples:
                    gt = rec.samples[s]["GT"]
                    gts[s] = None if gt is None or None in gt else int(sum(x > 0 for x in gt))
                rows.append({"chrom": rec.chrom, "pos": rec.pos, "id": rec.id or "",
                             "ref": rec.ref, "alt": (rec.alts or ("",))[0], "info": info,
                             "gt": gts})
        return samples, rows
    opener = gzip.open if str(path).endswith(".gz") else open
    samples = []
    with opener(path, "rt") as fh:
        for ln in fh:
            if ln.startswith("##"):
                continue
            f = ln.rstrip("\n").split("\t")
            if ln.startswith("#"):
                samples = f[9:]
                continue
            info = dict(kv.split("=", 1) if "=" in kv else (kv, "") for kv in f[7].split(";"))
            gts = {}
            for s, v in zip(samples, f[9:]):
                a = v.split(":")[0].replace("|", "/").split("/")
                gts[s] = None if "." in a else sum(x != "0" for x in a)
            rows.append({"chrom": f[0], "pos": int(f[1]), "id": "" if f[2] == "." else f[2],
                         "ref": f[3], "alt": f[4].split(",")[0], "info": info, "gt": gts})
    return samples, rows


def _vcf_backend(pipe: Any) -> str:
    return {"pypi": "pysam", "debian": "builtin"}.get(pipe.backend, pipe.backend) \
        if pipe.backend in ("pypi", "debian", "builtin", "pysam") else "auto"


# -- reference pipeline steps ---------------------------------------------------------------
def step_filter_inheritance(pipe: Any) -> str:
    ped = [ln.split("\t") for ln in pipe.input("pedigree").read_text().splitlines()
           if ln and not ln.startswith("#")]
    affected = {r[1] for r in ped if r[5].strip() == "2"}
    unaffected = {r[1] for r in ped if r[5].strip() == "1"}
    parents = {x for r in ped if r[1] in affected for x in (r[2], r[3]) if x != "0"}
    if not affected:
        raise ValueError("the pedigree marks no affected member")
    samples, rows = read_vcf_rows(pipe.input("variants"), _vcf_backend(pipe))
    keep = [r for r in rows
            if all(r["gt"].get(s) == 2 for s in affected)
            and all(r["gt"].get(s) == 1 for s in parents)
            and not any(r["gt"].get(s) == 2 for s in unaffected)]
    write_csv(pipe.out("filter_inheritance") / "recessive_candidates.csv",
              ["chrom", "pos", "ref", "alt"], [[r["chrom"], r["pos"], r["ref"], r["alt"]]
                                               for r in keep])
    pipe.state["candidates"] = keep
    return (f"{len(keep)} of {len(rows)} variants are homozygous in all {len(affected)} "
            "affected, heterozygous in both parents and not homozygous in unaffected members")


def step_annotate_effects(pipe: Any) -> str:
    tx = read_csv(pipe.input("transcripts"), "\t")
    cds = read_fasta(pipe.input("cds"))
    out = []
    for r in pipe.state["candidates"]:
        ann = {"gene_name": "", "gene_id": "", "transcript_id": "", "effect": "intergenic_region",
               "impact": "MODIFIER", "hgvs_c": "", "hgvs_p": ""}
        for t in tx:
            if t["chrom"] == r["chrom"] and int(t["cds_start"]) <= r["pos"] <= int(t["cds_end"]):
                seq = cds[t["transcript_id"]]
                off = r["pos"] - int(t["cds_start"])
                if len(r["ref"]) == len(r["alt"]) == 1 and seq[off] == r["ref"]:
                    ann = {**{k: t[k] for k in ("gene_name", "gene_id", "transcript_id")},
                           **snv_effect(seq, off, r["alt"])}
                break
        out.append({**r, **ann})
    write_csv(pipe.out("annotate_effects") / "candidate_effects.csv",
              ["chrom", "pos", "ref", "alt", "gene_name", "effect", "impact"],
              [[a["chrom"], a["pos"], a["ref"], a["alt"], a["gene_name"], a["effect"],
                a["impact"]] for a in out])
    pipe.state["annotated"] = out
    return f"annotated {len(out)} candidates: " + ", ".join(
        f"{a['gene_name'] or 'intergenic'} {a['effect']}" for a in out[:5])


def step_clinvar_lookup(pipe: Any) -> str:
    _, rows = read_vcf_rows(pipe.input("clinvar"), _vcf_backend(pipe))
    db = {(r["chrom"], r["pos"], r["ref"], r["alt"]): r for r in rows}
    hits = 0
    for a in pipe.state["annotated"]:
        cv = db.get((a["chrom"], a["pos"], a["ref"], a["alt"]))
        a["clinvar"] = cv
        hits += cv is not None
    write_csv(pipe.out("clinvar_lookup") / "clinvar_matches.csv",
              ["chrom", "pos", "variant_id", "clinical_significance"],
              [[a["chrom"], a["pos"], a["clinvar"]["id"], a["clinvar"]["info"].get("CLNSIG", "")]
               for a in pipe.state["annotated"] if a["clinvar"]])
    return f"{hits} candidates in ClinVar"


def step_write_result(pipe: Any) -> str:
    rows = []
    for a in pipe.state["annotated"]:
        cv = a["clinvar"] or {"id": "", "info": {}}
        sig = cv["info"].get("CLNSIG", "")
        if "athogenic" not in sig and a["impact"] != "HIGH":
            continue
        rows.append([a["chrom"], a["pos"], cv["id"], a["ref"], a["alt"], a["gene_name"],
                     a["gene_id"], a["effect"], a["impact"], a["transcript_id"], a["hgvs_c"],
                     a["hgvs_p"], sig, cv["info"].get("CLNDN", "").replace("|", "; "),
                     cv["info"].get("CLNREVSTAT", ""),
                     f"rs{cv['info']['RS']}" if cv["info"].get("RS") else ""])
    n = write_csv(pipe.ws / "results" / "causal_variant.csv", HEADER, rows)
    return f"wrote results/causal_variant.csv ({n} variants)"


def make_decoy(task: BioTask, new: BioTask, rng: np.random.Generator) -> list[str]:
    """``clinvar_20180101.vcf.gz``: an older ClinVar release without the CFTR record, named to
    sort first."""
    _, rows = read_vcf_rows(task.data_dir / "family.vcf.gz", "builtin")
    recs = [((r["chrom"], r["pos"], r["ref"], r["alt"]), None) for r in rows]
    name = "clinvar_20180101.vcf.gz"
    _write_clinvar(new.reference_dir / name, recs, rng, with_causal=False)
    new.references.append(name)
    return [name]
