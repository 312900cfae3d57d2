"""Deterministic, numpy-only simulators: random genomes, planted variants, paired-end reads
and gzip FASTQ/FASTA writers (gzip ``mtime=0``, so equal seeds give byte-identical files)."""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BASES = np.frombuffer(b"ACGT", dtype=np.uint8)
_COMP = bytes.maketrans(b"ACGTNacgtn", b"TGCANtgcan")


@dataclass(frozen=True)
class Variant:
    """One small variant in VCF convention: 1-based ``pos``; indels carry the anchor base."""

    chrom: str
    pos: int
    ref: str
    alt: str

    @property
    def kind(self) -> str:
        return "snv" if len(self.ref) == len(self.alt) == 1 else "indel"

    def key(self) -> tuple[str, int, str, str]:
        return (self.chrom, self.pos, self.ref, self.alt)


@dataclass
class FastqRecord:
    name: str
    seq: str
    qual: str
    plus: str = ""  # what follows '+' on the third line (kept as read, e.g. a repeated name)


def revcomp(seq: str) -> str:
    """Reverse complement of a DNA string (N stays N)."""
    return seq.translate(_COMP)[::-1]


def random_genome(rng: np.random.Generator, length: int, gc: float = 0.5) -> str:
    """A random DNA string with GC content ``gc``."""
    if length < 1:
        raise ValueError(f"genome length {length} must be >= 1")
    p = np.array([(1 - gc) / 2, gc / 2, gc / 2, (1 - gc) / 2])
    return BASES[rng.choice(4, size=length, p=p)].tobytes().decode()


def _indel_is_unambiguous(ref: str, pos0: int, allele: str, deletion: bool) -> bool:
    """True when deleting ``allele`` (``ref[pos0+1:]``) or inserting it after 0-based ``pos0``
    cannot be shifted one base left or right, so the anchored VCF form is already the
    normalised (left-aligned) one."""
    nxt = pos0 + 1 + len(allele) if deletion else pos0 + 1
    return nxt < len(ref) and ref[pos0] != allele[-1] and ref[nxt] != allele[0]


def plant_variants(rng: np.random.Generator, ref: str, n_snv: int, n_indel: int, *,
                   chrom: str = "chr1", min_gap: int = 30, margin: int = 50,
                   max_indel: int = 3) -> tuple[str, list[Variant]]:
    """Plant ``n_snv`` SNVs and ``n_indel`` indels (1..``max_indel`` bp) at least ``min_gap``
    apart and ``margin`` from the ends. Returns the mutated (haploid) sequence and the sorted,
    normalised truth variants (REF always matches ``ref``)."""
    total = n_snv + n_indel
    span = len(ref) - 2 * margin
    if total and span < total * min_gap:
        raise ValueError(f"cannot place {total} variants {min_gap} bp apart in a {len(ref)} bp "
                         "genome: lower the variant counts or min_gap, or raise genome_len")
    kinds = ["snv"] * n_snv + ["indel"] * n_indel
    rng.shuffle(kinds)
    chosen: list[int] = []
    variants: list[Variant] = []
    tries = 0
    k = 0
    while k < total:
        tries += 1
        if tries > 200 * max(total, 1):
            raise ValueError("could not place the variants without ambiguity: raise genome_len")
        p0 = int(rng.integers(margin, len(ref) - margin))
        if any(abs(p0 - c) < min_gap for c in chosen):
            continue
        if kinds[k] == "snv":
            alt = "ACGT"[int(rng.choice([i for i in range(4) if "ACGT"[i] != ref[p0]]))]
            variants.append(Variant(chrom, p0 + 1, ref[p0], alt))
        else:
            n = int(rng.integers(1, max_indel + 1))
            if rng.random() < 0.5:  # deletion of ref[p0+1 : p0+1+n]
                allele = ref[p0 + 1: p0 + 1 + n]
                if not _indel_is_unambiguous(ref, p0, allele, deletion=True):
                    continue
                variants.append(Variant(chrom, p0 + 1, ref[p0] + allele, ref[p0]))
            else:  # insertion of a random allele after p0
                allele = random_genome(rng, n)
                if not _indel_is_unambiguous(ref, p0, allele, deletion=False):
                    continue
                variants.append(Variant(chrom, p0 + 1, ref[p0], ref[p0] + allele))
        chosen.append(p0)
        k += 1
    variants.sort(key=lambda v: v.pos)
    return apply_variants(ref, variants), variants


def apply_variants(ref: str, variants: Iterable[Variant]) -> str:
    """The sequence carrying ``variants`` (sorted, non-overlapping, REF matching ``ref``)."""
    out, last = [], 0
    for v in sorted(variants, key=lambda v: v.pos):
        p0 = v.pos - 1
        if ref[p0: p0 + len(v.ref)] != v.ref:
            raise ValueError(f"variant {v} does not match the reference base(s) "
                             f"{ref[p0:p0 + len(v.ref)]!r}")
        if p0 < last:
            raise ValueError(f"variant {v} overlaps the previous one")
        out.append(ref[last:p0])
        out.append(v.alt)
        last = p0 + len(v.ref)
    out.append(ref[last:])
    return "".join(out)


def simulate_pairs(rng: np.random.Generator, seq: str, n_pairs: int, *, read_len: int = 100,
                   insert_mean: float = 300.0, insert_sd: float = 30.0,
                   error_rate: float = 0.005, qual: int = 30, prefix: str = "read",
                   contig: str = "chr1") -> tuple[list[FastqRecord], list[FastqRecord]]:
    """Paired-end reads (forward-reverse, Illumina style) uniformly from ``seq``; substitution
    errors at ``error_rate``; constant Phred ``qual``. Read names carry the origin
    (``prefix:contig:start:strand``, 1-based fragment start) so tests can check mapping."""
    L = len(seq)
    if read_len > L:
        raise ValueError(f"read_len {read_len} exceeds the sequence length {L}")
    ins = np.clip(np.rint(rng.normal(insert_mean, insert_sd, n_pairs)), read_len, L).astype(int)
    starts = (rng.random(n_pairs) * (L - ins + 1)).astype(int)
    flip = rng.random(n_pairs) < 0.5
    arr = np.frombuffer(seq.encode(), dtype=np.uint8)
    q = chr(33 + qual) * read_len
    r1s, r2s = [], []
    err1 = rng.random((n_pairs, read_len)) < error_rate
    err2 = rng.random((n_pairs, read_len)) < error_rate
    sub1 = rng.integers(1, 4, (n_pairs, read_len))
    sub2 = rng.integers(1, 4, (n_pairs, read_len))
    idx = {65: 0, 67: 1, 71: 2, 84: 3}
    lut = np.full(256, 0, dtype=np.int64)
    for b, i in idx.items():
        lut[b] = i
    for i in range(n_pairs):
        s, n = int(starts[i]), int(ins[i])
        frag = arr[s: s + n]
        a = frag[:read_len].copy()
        b = frag[n - read_len:].copy()
        for read, err, sub in ((a, err1[i], sub1[i]), (b, err2[i], sub2[i])):
            if err.any():
                codes = (lut[read[err]] + sub[err]) % 4
                read[err] = BASES[codes]
        fwd, rev = a.tobytes().decode(), revcomp(b.tobytes().decode())
        if flip[i]:  # fragment from the other strand: mate 1 reads the reverse strand
            fwd, rev = rev, fwd
        name = f"{prefix}:{contig}:{s + 1}:{'-' if flip[i] else '+'}:{i}"
        r1s.append(FastqRecord(name + "/1", fwd, q))
        r2s.append(FastqRecord(name + "/2", rev, q))
    return r1s, r2s


def write_fastq(path: str | Path, records: Iterable[FastqRecord]) -> Path:
    """Write FASTQ (gzip when the name ends in .gz, with mtime 0 for reproducible bytes)."""
    path = Path(path)
    text = "".join(f"@{r.name}\n{r.seq}\n+{r.plus}\n{r.qual}\n" for r in records)
    _write_text(path, text)
    return path


def read_fastq(path: str | Path) -> Iterator[FastqRecord]:
    """Iterate FASTQ records; raises ``ValueError`` naming the file and record on a truncated
    or malformed record."""
    path = Path(path)
    with _open_text(path) as fh:
        rec = 0
        while True:
            h = fh.readline()
            if not h:
                return
            s, p, q = fh.readline(), fh.readline(), fh.readline()
            rec += 1
            if not (s and p and q):
                raise ValueError(f"{path.name}: truncated FASTQ record {rec}")
            if not h.startswith("@") or not p.startswith("+"):
                raise ValueError(f"{path.name}: malformed FASTQ record {rec} (header {h[:40]!r})")
            s, q = s.rstrip("\n"), q.rstrip("\n")
            if len(s) != len(q):
                raise ValueError(f"{path.name}: record {rec} has {len(s)} bases but {len(q)} "
                                 "quality values")
            yield FastqRecord(h[1:].rstrip("\n"), s, q, p[1:].rstrip("\n"))


def write_fasta(path: str | Path, seqs: dict[str, str], width: int = 60) -> Path:
    """Write FASTA (gzip when the name ends in .gz)."""
    path = Path(path)
    buf = io.StringIO()
    for name, s in seqs.items():
        buf.write(f">{name}\n")
        for i in range(0, len(s), width):
            buf.write(s[i:i + width] + "\n")
    _write_text(path, buf.getvalue())
    return path


def read_fasta(path: str | Path) -> dict[str, str]:
    """Read a (gzipped) FASTA into ``{name: sequence}`` (name = first word of the header)."""
    out: dict[str, list[str]] = {}
    cur = None
    with _open_text(Path(path)) as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            if line.startswith(">"):
                cur = line[1:].split()[0] if line[1:].split() else ""
                out[cur] = []
            elif cur is None:
                raise ValueError(f"{Path(path).name}: sequence before the first '>' header")
            else:
                out[cur].append(line)
    return {k: "".join(v) for k, v in out.items()}


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                                    filename="") as gz:
            gz.write(text.encode())
    else:
        path.write_text(text)


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")
