import numpy as np
import pytest
from icml_bioagent_bench.simulate import (
    apply_variants,
    plant_variants,
    random_genome,
    read_fasta,
    read_fastq,
    revcomp,
    simulate_pairs,
)


def test_planted_variants_unique_inside_and_match_reference():
    rng = np.random.default_rng(3)
    ref = random_genome(rng, 5000)
    alt, vs = plant_variants(rng, ref, 20, 3)
    assert len(vs) == 23 and len({v.pos for v in vs}) == 23
    assert sum(v.kind == "indel" for v in vs) == 3
    for v in vs:
        assert 1 <= v.pos <= len(ref) - len(v.ref) + 1
        assert ref[v.pos - 1: v.pos - 1 + len(v.ref)] == v.ref
        assert v.ref != v.alt
    gaps = np.diff([v.pos for v in vs])
    assert gaps.min() >= 30
    assert len(alt) == len(ref) + sum(len(v.alt) - len(v.ref) for v in vs)


def test_indels_are_left_normalised():
    rng = np.random.default_rng(5)
    ref = random_genome(rng, 8000)
    _, vs = plant_variants(rng, ref, 0, 30)
    for v in vs:  # shifting the event one base left must change the haplotype
        p0 = v.pos - 1
        allele = v.ref[1:] if len(v.ref) > 1 else v.alt[1:]
        assert ref[p0] != allele[-1]


def test_too_many_variants_for_the_genome_is_a_clear_error():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="cannot place"):
        plant_variants(rng, random_genome(rng, 300), 50, 0)


def test_apply_variants_rejects_wrong_reference_base():
    from icml_bioagent_bench.simulate import Variant

    with pytest.raises(ValueError, match="does not match"):
        apply_variants("ACGTACGT", [Variant("c", 2, "G", "T")])


def test_error_free_reads_map_back_to_their_origin():
    import mappy

    rng = np.random.default_rng(1)
    ref = random_genome(rng, 4000)
    r1, r2 = simulate_pairs(rng, ref, 200, error_rate=0.0, contig="c")
    a = mappy.Aligner(seq=ref, preset="sr")
    for x, y in zip(r1, r2):
        _, _, start, strand, _ = x.name.split(":")
        hits = [h for h in a.map(x.seq, y.seq) if h.is_primary]
        assert hits
        lo = min(h.r_st for h in hits)
        assert lo == int(start) - 1
        # the reads are exact substrings of the genome
        assert x.seq in ref or revcomp(x.seq) in ref


def test_generation_is_deterministic_per_seed(tmp_path):
    from icml_bioagent_bench.tasks import TASK_IDS, make_task

    for tid in TASK_IDS:
        a = make_task(tid, tmp_path / "a" / tid, seed=7)
        b = make_task(tid, tmp_path / "b" / tid, seed=7)
        c = make_task(tid, tmp_path / "c" / tid, seed=8)
        for sub in ("data", "reference", "truth"):
            fa = sorted(p.relative_to(a.root) for p in (a.root / sub).rglob("*") if p.is_file())
            for rel in fa:
                assert (a.root / rel).read_bytes() == (b.root / rel).read_bytes(), rel
        assert any((a.root / rel).read_bytes() != (c.root / rel).read_bytes()
                   for rel in (p.relative_to(a.root) for p in (a.root / "truth").rglob("*")
                               if p.is_file())), tid


def test_fastq_reader_reports_malformed_records(tmp_path):
    p = tmp_path / "bad.fq"
    p.write_text("@r1\nACGT\n+\nII\n")
    with pytest.raises(ValueError, match="4 bases but 2 quality"):
        list(read_fastq(p))
    p.write_text(">x\nACGT\n")
    assert read_fasta(p) == {"x": "ACGT"}
