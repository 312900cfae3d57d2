"""Read alignment for the reference pipelines: mappy (minimap2, ``sr`` preset) by default,
Debian ``bwa mem`` where installed, or a built-in k-mer seed + ungapped extension aligner
(no indels: the fallback when neither is installed). All write SAM; :func:`sort_and_index`
turns it into a sorted, indexed BAM with pysam or Debian samtools."""

from __future__ import annotations

import shutil
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

from icml_bioagent_bench.simulate import FastqRecord, read_fasta, read_fastq, revcomp
from icml_bioagent_bench.tools import resolve, run_tool


def _sam_header(ref: dict[str, str], sample: str) -> str:
    lines = ["@HD\tVN:1.6\tSO:unsorted"]
    lines += [f"@SQ\tSN:{n}\tLN:{len(s)}" for n, s in ref.items()]
    lines.append(f"@RG\tID:{sample}\tSM:{sample}")
    return "\n".join(lines) + "\n"


def _qname(name: str) -> str:
    name = name.split()[0]
    return name[:-2] if name.endswith(("/1", "/2")) else name


class _Hit:
    """A uniform alignment record: reference name, 0-based start, strand, CIGAR, MAPQ."""

    def __init__(self, ctg: str, pos: int, strand: int, cigar: str, mapq: int,
                 nm: int = 0) -> None:
        self.ctg, self.pos, self.strand, self.cigar, self.mapq, self.nm = (
            ctg, pos, strand, cigar, mapq, nm)


def _sam_pair(r1: FastqRecord, r2: FastqRecord, h1: _Hit | None, h2: _Hit | None,
              sample: str) -> str:
    out = []
    q = _qname(r1.name)
    for mate, (rec, hit, other) in enumerate(((r1, h1, h2), (r2, h2, h1)), start=1):
        flag = 1 | (64 if mate == 1 else 128)
        if hit is None:
            flag |= 4
        if other is None:
            flag |= 8
        if hit is not None and hit.strand < 0:
            flag |= 16
        if other is not None and other.strand < 0:
            flag |= 32
        proper = (hit is not None and other is not None and hit.ctg == other.ctg
                  and hit.strand != other.strand)
        if proper:
            flag |= 2
        seq, qual = rec.seq, rec.qual
        if hit is not None and hit.strand < 0:
            seq, qual = revcomp(seq), qual[::-1]
        rname = hit.ctg if hit is not None else (other.ctg if other is not None else "*")
        pos = hit.pos + 1 if hit is not None else (other.pos + 1 if other is not None else 0)
        rnext = "=" if other is not None else "*"
        pnext = other.pos + 1 if other is not None else (pos if hit is not None else 0)
        tlen = 0
        if proper:
            lo, hi = min(hit.pos, other.pos), max(hit.pos, other.pos) + len(rec.seq)
            tlen = (hi - lo) * (1 if hit.pos <= other.pos else -1)
        cigar = hit.cigar if hit is not None else "*"
        mapq = hit.mapq if hit is not None else 0
        tags = f"RG:Z:{sample}" + (f"\tNM:i:{hit.nm}" if hit is not None else "")
        out.append(f"{q}\t{flag}\t{rname}\t{pos}\t{mapq}\t{cigar}\t{rnext}\t{pnext}\t{tlen}\t"
                   f"{seq}\t{qual}\t{tags}")
    return "\n".join(out) + "\n"


def _mappy_hits(ref_fa: Path, pairs: Iterator[tuple[FastqRecord, FastqRecord]]
                ) -> Iterator[tuple[FastqRecord, FastqRecord, _Hit | None, _Hit | None]]:
    import mappy

    aligner = mappy.Aligner(str(ref_fa), preset="sr", n_threads=1)
    if not aligner:
        raise RuntimeError(f"mappy could not index {ref_fa}")
    for r1, r2 in pairs:
        hits: dict[int, _Hit] = {}
        for h in aligner.map(r1.seq, r2.seq):
            if not h.is_primary or h.read_num in hits:
                continue
            n = len(r1.seq) if h.read_num == 1 else len(r2.seq)
            lead, trail = (h.q_st, n - h.q_en) if h.strand > 0 else (n - h.q_en, h.q_st)
            cig = (f"{lead}S" if lead else "") + h.cigar_str + (f"{trail}S" if trail else "")
            hits[h.read_num] = _Hit(h.ctg, h.r_st, h.strand, cig, h.mapq, h.NM)
        yield r1, r2, hits.get(1), hits.get(2)


class KmerIndex:
    """Exact k-mer index of a reference for the built-in aligner and classifiers."""

    def __init__(self, ref: dict[str, str], k: int = 15) -> None:
        self.k, self.ref = k, ref
        self.table: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for name, s in ref.items():
            for i in range(len(s) - k + 1):
                self.table[s[i:i + k]].append((name, i))

    def map_read(self, seq: str, max_mismatch: int = 8) -> _Hit | None:
        """Best ungapped placement of ``seq`` (either strand) by diagonal voting."""
        best = None
        for strand, s in ((1, seq), (-1, revcomp(seq))):
            votes: Counter = Counter()
            for off in range(0, len(s) - self.k + 1, max(1, self.k // 2)):
                for ctg, p in self.table.get(s[off:off + self.k], ())[:8]:
                    votes[(ctg, p - off)] += 1
            for (ctg, start), _ in votes.most_common(2):
                r = self.ref[ctg]
                if start < 0 or start + len(s) > len(r):
                    continue
                mm = sum(a != b for a, b in zip(s, r[start:start + len(s)]))
                if mm <= max_mismatch and (best is None or mm < best.nm):
                    best = _Hit(ctg, start, strand, f"{len(s)}M", 60, mm)
        return best


def _builtin_hits(ref_fa: Path, pairs: Iterator[tuple[FastqRecord, FastqRecord]]
                  ) -> Iterator[tuple[FastqRecord, FastqRecord, _Hit | None, _Hit | None]]:
    index = KmerIndex(read_fasta(ref_fa))
    for r1, r2 in pairs:
        yield r1, r2, index.map_read(r1.seq), index.map_read(r2.seq)


def align_pairs(ref_fa: str | Path, r1: str | Path, r2: str | Path, out_sam: str | Path, *,
                sample: str = "sample", backend: str = "auto") -> tuple[Path, str]:
    """Align paired FASTQ to ``ref_fa`` and write SAM. Returns (path, backend used)."""
    ref_fa, out_sam = Path(ref_fa), Path(out_sam)
    out_sam.parent.mkdir(parents=True, exist_ok=True)
    used = resolve("align", backend)
    if used == "bwa":
        work = out_sam.parent / "bwa_index"
        work.mkdir(exist_ok=True)
        local = work / ref_fa.name
        shutil.copyfile(ref_fa, local)
        run_tool(["bwa", "index", str(local)])
        run_tool(["bwa", "mem", "-t", "1", "-R", f"@RG\\tID:{sample}\\tSM:{sample}", str(local),
                  str(r1), str(r2)], stdout=out_sam)
        return out_sam, used
    pairs = zip(read_fastq(r1), read_fastq(r2))
    hits = _mappy_hits(ref_fa, pairs) if used == "mappy" else _builtin_hits(ref_fa, pairs)
    with open(out_sam, "w") as fh:
        fh.write(_sam_header(read_fasta(ref_fa), sample))
        for a, b, h1, h2 in hits:
            fh.write(_sam_pair(a, b, h1, h2, sample))
    return out_sam, used


def sort_and_index(sam: str | Path, out_prefix: str | Path, *, backend: str = "auto") -> Path:
    """Coordinate-sort and index an alignment: ``<prefix>.bam`` + ``.bai`` with pysam (or
    Debian samtools); without either, a position-sorted ``<prefix>.sorted.sam``."""
    sam, out_prefix = Path(sam), Path(out_prefix)
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    used = resolve("sort", backend)
    if used == "pysam":
        import pysam

        bam = out_prefix.with_suffix(".bam")
        pysam.sort("-o", str(bam), str(sam))
        pysam.index(str(bam))
        return bam
    if used == "samtools":
        bam = out_prefix.with_suffix(".bam")
        run_tool(["samtools", "sort", "-o", str(bam), str(sam)])
        run_tool(["samtools", "index", str(bam)])
        return bam
    header, body = [], []
    for line in sam.read_text().splitlines():
        (header if line.startswith("@") else body).append(line)
    order = {ln.split("\t")[1]: i for i, ln in enumerate(h for h in header if h.startswith("@SQ"))}

    def key(ln: str) -> tuple[int, int]:
        f = ln.split("\t")
        return (order.get("SN:" + f[2], 1 << 30) if f[2] != "*" else 1 << 31, int(f[3]))

    body.sort(key=key)
    out = Path(str(out_prefix) + ".sorted.sam")
    out.write_text("\n".join([h.replace("SO:unsorted", "SO:coordinate") for h in header]
                             + body) + "\n")
    return out
