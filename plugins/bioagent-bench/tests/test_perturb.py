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
    from icml_bioagent_bench.perturbations import perturb

    with pytest.raises(ValueError, match="unknown perturbation"):
        perturb(suite[("deseq", "clean")], "shuffle", tmp_path)
    with pytest.raises(ValueError, match="already perturbed"):
        perturb(suite[("deseq", "decoy")], "bloat", tmp_path)


def test_corruption_keeps_header_and_plus_lines(tmp_path):
    """The official corruption writes the header and the plus line back as read: a plus line
    that repeats the read name stays ``+SRR001``."""
    import gzip
    import random

    from icml_bioagent_bench.perturbations import corrupt_fastq

    src, dst = tmp_path / "in.fq.gz", tmp_path / "out.fq.gz"
    with gzip.open(src, "wt") as fh:
        fh.write("@SRR001 len=10\nACGTACGTAC\n+SRR001 len=10\nIIIIIIIIII\n"
                 "@SRR002\nACGTACGTAC\n+\nIIIIIIIIII\n")
    assert corrupt_fastq(src, dst, random.Random(0)) == 2
    lines = gzip.open(dst, "rt").read().splitlines()
    assert lines[0] == "@SRR001 len=10" and lines[2] == "+SRR001 len=10"
    assert lines[4] == "@SRR002" and lines[6] == "+"
    assert lines[3] == lines[7] == "!" * 10 and lines[1].count("N") == 9


DOCUMENTED = ("perturb", "stability", "jaccard", "pearson", "make_task", "run_agent")


def test_documented_imports_give_the_functions_in_any_import_order():
    """``from icml_bioagent_bench import perturb`` is the function the README documents, even
    after the modules that use it were imported (no submodule shares an exported name)."""
    import subprocess
    import sys

    code = ("import icml_bioagent_bench.suite, icml_bioagent_bench.job\n"
            "from icml_bioagent_bench import perturb, stability\n"
            "import inspect; assert inspect.isfunction(perturb), perturb\n"
            "assert inspect.isfunction(stability), stability\n"
            "from icml_bioagent_bench import perturbations, robustness\n"
            "assert perturb is perturbations.perturb and stability is robustness.stability\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_no_exported_name_is_also_a_submodule():
    import pkgutil

    import icml_bioagent_bench as pkg

    subs = {m.name for m in pkgutil.iter_modules(pkg.__path__)}
    assert not subs & set(pkg.__all__), subs & set(pkg.__all__)
    for name in DOCUMENTED:
        assert callable(getattr(pkg, name)), name
