"""Variant calling for the reference pipeline: ``bcftools mpileup | bcftools call -mv`` through
pysam's bundled bcftools by default, Debian bcftools where installed, or a built-in pileup
caller (allele fraction >= 0.3, depth >= 5) that reads SAM or BAM."""

from __future__ import annotations

import gzip
import shutil
import zlib
from collections import Counter, defaultdict
from pathlib import Path

from icml_bioagent_bench.simulate import Variant, read_fasta
from icml_bioagent_bench.tools import resolve, run_tool

VCF_HEADER = ("##fileformat=VCFv4.2\n{contigs}##INFO=<ID=DP,Number=1,Type=Integer,"
              "Description=\"Depth\">\n##INFO=<ID=AF,Number=A,Type=Float,Description=\"Allele "
              "fraction\">\n##FORMAT=<ID=GT,Number=1,Type=String,Description=\"Genotype\">\n"
              "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\t{sample}\n")


def prepare_reference(ref_fa: str | Path, out_dir: str | Path) -> Path:
    """Copy the reference into the run's outputs (``reference/`` is read-only) and index it
    (``.fai``) with pysam when available."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    local = out_dir / Path(ref_fa).name
    shutil.copyfile(ref_fa, local)
    try:
        import pysam

        pysam.faidx(str(local))
    except ImportError:
        seqs = read_fasta(local)
        (out_dir / (local.name + ".fai")).write_text(
            "".join(f"{n}\t{len(s)}\t0\t0\t0\n" for n, s in seqs.items()))
    return local


def call_variants(ref_fa: str | Path, alignment: str | Path, out_vcf: str | Path, *,
                  ploidy: int = 1, backend: str = "auto", sample: str = "sample"
                  ) -> tuple[Path, str]:
    """Call SNVs and indels; writes an uncompressed VCF. Returns (path, backend used)."""
    out_vcf = Path(out_vcf)
    out_vcf.parent.mkdir(parents=True, exist_ok=True)
    used = resolve("call", backend)
    if str(alignment).endswith(".sam") and used != "builtin":
        used = "builtin"  # a SAM without pysam/samtools: only the pileup caller reads it
    pile = out_vcf.with_name(out_vcf.stem + ".mpileup.bcf")
    mp = ["mpileup", "-f", str(ref_fa), "-a", "AD,DP", "-Ou", "-o", str(pile), str(alignment)]
    call = ["call", "-mv", "--ploidy", str(ploidy), "-Ov", "-o", str(out_vcf), str(pile)]
    if used == "pysam":
        import pysam.bcftools

        pysam.bcftools.mpileup(*mp[1:], catch_stdout=False)
        pysam.bcftools.call(*call[1:], catch_stdout=False)
    elif used == "bcftools":
        run_tool(["bcftools", *mp])
        run_tool(["bcftools", *call])
    else:
        calls = pileup_call(ref_fa, alignment)
        write_vcf(out_vcf, calls, read_fasta(ref_fa), sample=sample)
    return out_vcf, used


def _alignments(path: Path):  # noqa: ANN202 - yields (ctg, pos0, cigar ops, seq)
    if path.suffix == ".bam":
        import pysam

        with pysam.AlignmentFile(str(path), "rb") as bam:
            for r in bam:
                if r.is_unmapped or r.is_secondary or r.is_supplementary:
                    continue
                yield r.reference_name, r.reference_start, r.cigartuples, r.query_sequence
        return
    ops = {"M": 0, "I": 1, "D": 2, "N": 3, "S": 4, "H": 5, "=": 7, "X": 8}
    with open(path) as fh:
        for line in fh:
            if line.startswith("@"):
                continue
            f = line.rstrip("\n").split("\t")
            if int(f[1]) & (4 | 256 | 2048) or f[5] == "*":
                continue
            cig, num = [], ""
            for ch in f[5]:
                if ch.isdigit():
                    num += ch
                else:
                    cig.append((ops[ch], int(num)))
                    num = ""
            yield f[2], int(f[3]) - 1, cig, f[9]


def pileup_call(ref_fa: str | Path, alignment: str | Path, *, min_depth: int = 5,
                min_af: float = 0.3) -> list[Variant]:
    """A small haploid pileup caller: per position, the most frequent non-reference base or
    indel with allele fraction >= ``min_af`` at depth >= ``min_depth``."""
    ref = read_fasta(ref_fa)
    depth: Counter = Counter()
    alleles: dict[tuple[str, int], Counter] = defaultdict(Counter)
    for ctg, pos, cigar, seq in _alignments(Path(alignment)):
        r, q = pos, 0
        for op, n in cigar:
            if op in (0, 7, 8):
                for i in range(n):
                    depth[(ctg, r + i)] += 1
                    b = seq[q + i]
                    if b != ref[ctg][r + i] and b != "N":
                        alleles[(ctg, r + i)][b] += 1
                r += n
                q += n
            elif op == 1:  # insertion after r-1
                if r > 0:
                    alleles[(ctg, r - 1)]["+" + seq[q:q + n]] += 1
                q += n
            elif op in (2, 3):
                if r > 0:
                    alleles[(ctg, r - 1)]["-" + ref[ctg][r:r + n]] += 1
                r += n
            elif op == 4:
                q += n
    calls = []
    for (ctg, p0), cnt in sorted(alleles.items()):
        allele, c = cnt.most_common(1)[0]
        d = max(depth[(ctg, p0)], 1)
        if d < min_depth or c / d < min_af:
            continue
        base = ref[ctg][p0]
        if allele.startswith("+"):
            calls.append(Variant(ctg, p0 + 1, base, base + allele[1:]))
        elif allele.startswith("-"):
            calls.append(Variant(ctg, p0 + 1, base + allele[1:], base))
        else:
            calls.append(Variant(ctg, p0 + 1, base, allele))
    return calls


def write_vcf(path: str | Path, variants: list[Variant], ref: dict[str, str], *,
              sample: str = "sample") -> Path:
    """Write a minimal sorted VCF (gzip when the name ends in ``.gz``)."""
    path = Path(path)
    contigs = "".join(f"##contig=<ID={n},length={len(s)}>\n" for n, s in ref.items())
    order = {n: i for i, n in enumerate(ref)}
    body = "".join(f"{v.chrom}\t{v.pos}\t.\t{v.ref}\t{v.alt}\t60\tPASS\t.\tGT\t1\n"
                   for v in sorted(variants, key=lambda v: (order.get(v.chrom, 1 << 30), v.pos)))
    text = VCF_HEADER.format(contigs=contigs, sample=sample) + body
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(text.encode())
    else:
        path.write_text(text)
    return path


def read_vcf(path: str | Path) -> list[Variant]:
    """Variants of a (b)gzipped or plain VCF, multi-allelic records split, FILTER PASS or '.'
    only. Raises ``ValueError`` naming the file on a malformed record."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    try:
        with opener(path, "rt") as fh:  # type: ignore[operator]
            saw_header = False
            for n, line in enumerate(fh, 1):
                if line.startswith("##"):
                    continue
                if line.startswith("#CHROM"):
                    saw_header = True
                    continue
                f = line.rstrip("\n").split("\t")
                if len(f) < 8 or not f[1].isdigit():
                    raise ValueError(f"{path.name}: line {n} is not a VCF record")
                if f[6] not in ("PASS", "."):
                    continue
                for alt in f[4].split(","):
                    if alt not in (".", "*") and not alt.startswith("<"):
                        out.append(Variant(f[0], int(f[1]), f[3].upper(), alt.upper()))
            if not saw_header:
                raise ValueError(f"{path.name}: no #CHROM header line")
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        # zlib.error: a gzip whose compressed body is damaged (not an OSError)
        raise ValueError(f"{path.name}: unreadable VCF ({exc})") from None
    return out


def finalize_vcf(raw_vcf: str | Path, out_gz: str | Path, *, min_qual: float = 20.0) -> Path:
    """Keep calls with QUAL >= ``min_qual`` and write a bgzipped (pysam) or gzipped VCF."""
    raw_vcf, out_gz = Path(raw_vcf), Path(out_gz)
    lines = []
    for line in raw_vcf.read_text().splitlines():
        if line.startswith("#"):
            lines.append(line)
            continue
        f = line.split("\t")
        try:
            q = float(f[5])
        except ValueError:
            q = min_qual
        if q >= min_qual:
            lines.append(line)
    out_gz.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + "\n"
    try:
        import pysam

        tmp = raw_vcf.with_name(raw_vcf.stem + ".filtered.vcf")
        tmp.write_text(text)
        pysam.tabix_compress(str(tmp), str(out_gz), force=True)
    except ImportError:
        with open(out_gz, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(text.encode())
    return out_gz
