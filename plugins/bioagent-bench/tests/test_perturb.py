from icml_bioagent_bench.simulate import read_fastq


def test_corruption_keeps_counts_and_lengths(suite):
    clean, bad = suite[("variant-calling", "clean")], suite[("variant-calling", "corrupt")]
    for name in bad.meta["corrupted"]:
        a = list(read_fastq(clean.data_dir / name))
        b = list(read_fastq(bad.data_dir / name))
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert x.name == y.name and len(x.seq) == len(y.seq) == len(y.qual)
            assert y.qual == "!" * len(y.qual)
            assert y.seq.count("N") == round(0.9 * len(y.seq))
            assert all(c == d for c, d in zip(x.seq, y.seq) if d != "N")
    # the clean task is untouched
    assert all(set(r.qual) != {"!"} for r in read_fastq(clean.data_dir / name))


def test_corrupted_counts_are_constant(suite):
    from icml_bioagent_bench.de import read_counts

    g0, c0, X0 = read_counts(suite[("deseq", "clean")].data_dir / "counts.tsv")
    g1, c1, X1 = read_counts(suite[("deseq", "corrupt")].data_dir / "counts.tsv")
    assert g0 == g1 and c0 == c1 and X0.shape == X1.shape
    assert (X1 == X1.flat[0]).all() and not (X0 == X0.flat[0]).all()


def test_variant_decoy_carries_no_variants(suite, tmp_path):
    from icml_bioagent_bench.align import align_pairs, sort_and_index
    from icml_bioagent_bench.calling import call_variants, prepare_reference, read_vcf

    t = suite[("variant-calling", "decoy")]
    assert t.meta["decoys"] == ["NA12877_R1.fq.gz", "NA12877_R2.fq.gz"]
    ref = prepare_reference(t.reference_dir / "ref.fa", tmp_path / "ref")
    sam, _ = align_pairs(ref, t.data_dir / "NA12877_R1.fq.gz", t.data_dir / "NA12877_R2.fq.gz",
                         tmp_path / "d.sam")
    bam = sort_and_index(sam, tmp_path / "d")
    vcf, _ = call_variants(ref, bam, tmp_path / "d.vcf")
    assert read_vcf(vcf) == []
    names = [r.name for r in read_fastq(t.data_dir / "NA12877_R1.fq.gz")]
    assert all(n.startswith("NA12877") for n in names)


def test_other_decoys_are_plausible_and_listed(suite):
    from icml_bioagent_bench.simulate import read_fasta

    tq = suite[("transcript-quant", "decoy")]
    short = read_fasta(tq.data_dir / "transcriptome_short_error.fa")
    assert len(short) == 2000 and {len(s) for s in short.values()} == {25}
    assert "transcriptome_short_error.fa" in tq.inputs
    mg = suite[("metagenomics", "decoy")]
    assert "silva_taxonomy_old.tsv" in mg.references
    de = suite[("deseq", "decoy")]
    assert (de.data_dir / "all_counts_raw.tsv").is_file()


def test_bloated_prompt_contains_the_original(suite):
    for tid in ("variant-calling", "transcript-quant", "deseq", "metagenomics"):
        clean, bloat = suite[(tid, "clean")], suite[(tid, "bloat")]
        assert clean.prompt in bloat.prompt
        extra = len(bloat.prompt.split()) - len(clean.prompt.split())
        assert 900 <= extra <= 1000, (tid, extra)


def test_perturb_rejects_unknown_kind_and_double_perturbation(suite, tmp_path):
    import pytest
    from icml_bioagent_bench.perturb import perturb

    with pytest.raises(ValueError, match="unknown perturbation"):
        perturb(suite[("deseq", "clean")], "shuffle", tmp_path)
    with pytest.raises(ValueError, match="already perturbed"):
        perturb(suite[("deseq", "decoy")], "bloat", tmp_path)
