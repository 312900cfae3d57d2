import pytest
from icml_bioagent_bench.scoring import score_results, variant_f1


def test_f1_limits():
    t = {("1", 5, "A", "C"), ("1", 9, "G", "T")}
    assert variant_f1(t, t)["f1_score"] == 1.0
    assert variant_f1(set(), t)["f1_score"] == 0.0
    assert variant_f1(t, set())["f1_score"] == 0.0
    half = variant_f1({("1", 5, "A", "C")}, t)
    assert half["precision"] == 1.0 and half["recall"] == 0.5
    assert half["f1_score"] == pytest.approx(2 / 3)


def _ws(tmp_path, files):
    res = tmp_path / "results"
    res.mkdir(parents=True, exist_ok=True)
    for n, text in files.items():
        (res / n).write_text(text)
    return res


def test_truth_vcf_scores_one_and_missing_vcf_zero(suite, tmp_path):
    import gzip
    import shutil

    task = suite[("variant-calling", "clean")]
    res = tmp_path / "results"
    res.mkdir()
    with open(task.truth_dir / "truth.vcf", "rb") as src, gzip.open(res / "x.vcf.gz", "wb") as d:
        shutil.copyfileobj(src, d)
    s = score_results(task.task_id, res, task.truth_dir)
    assert s.results_match and s.metrics["f1_score"] == 1.0 and s.metrics["all_f1"] == 1.0
    s = score_results(task.task_id, tmp_path / "empty", task.truth_dir)
    assert not s.results_match and s.problems
    (res / "x.vcf.gz").write_bytes(b"not gzip at all")
    s = score_results(task.task_id, res, task.truth_dir)
    assert not s.results_match and "unreadable" in s.problems[0]


def test_transcript_map_must_be_exact(suite, tmp_path):
    task = suite[("transcript-quant", "clean")]
    truth = (task.truth_dir / "transcript_counts.tsv").read_text()
    lines = truth.splitlines()
    salmon_style = "\n".join([lines[0]] + [ln + ".000" for ln in lines[1:]]) + "\n"
    res = _ws(tmp_path / "a", {"counts.tsv": salmon_style})  # "12" vs "12.000"
    assert score_results(task.task_id, res, task.truth_dir).results_match  # decimals equal
    res = _ws(tmp_path / "b", {"counts.tsv": "\n".join(lines[:-1]) + "\n"})  # one missing
    assert not score_results(task.task_id, res, task.truth_dir).results_match
    k, v = lines[1].split("\t")
    res = _ws(tmp_path / "c", {"counts.tsv": truth.replace(f"{k}\t{v}\n",
                                                           f"{k}\t{int(v) + 1}\n")})
    s = score_results(task.task_id, res, task.truth_dir)
    assert not s.results_match and s.metrics["exact_count_fraction"] < 1
    res = _ws(tmp_path / "d", {"counts.tsv": truth.replace(f"{k}\t{v}\n", f"{k}\tmany\n")})
    s = score_results(task.task_id, res, task.truth_dir)
    assert not s.results_match and any("non-numeric" in p for p in s.problems)


def test_deseq_overlap_rule(suite, tmp_path):
    task = suite[("deseq", "clean")]
    genes = [ln.split(",")[0] for ln in (task.truth_dir / "de_genes.csv").read_text()
             .splitlines()[1:]]
    ok = "gene_id,log2FoldChange\n" + "".join(f"{g},1\n" for g in genes[:5])
    assert score_results(task.task_id, _ws(tmp_path / "a", {"r.csv": ok}),
                         task.truth_dir).results_match
    four = "GENE_ID,log2FoldChange\n" + "".join(f"{g},1\n" for g in genes[:4])
    assert not score_results(task.task_id, _ws(tmp_path / "b", {"r.csv": four}),
                             task.truth_dir).results_match
    s = score_results(task.task_id, _ws(tmp_path / "c", {"r.csv": "foo,bar\n1,2\n"}),
                      task.truth_dir)
    assert not s.results_match and "gene_id" in s.problems[0]


def test_metagenomics_rule(suite, tmp_path):
    task = suite[("metagenomics", "clean")]
    truth = (task.truth_dir / "abundance.csv").read_text()
    assert score_results(task.task_id, _ws(tmp_path / "a", {"r.csv": truth}),
                         task.truth_dir).results_match
    wrong_top = truth.replace("Pseudomonadota", "Bacillota", 1)
    assert not score_results(task.task_id, _ws(tmp_path / "b", {"r.csv": wrong_top}),
                             task.truth_dir).results_match
    only_top = "\n".join(truth.splitlines()[:2]) + "\n"
    assert not score_results(task.task_id, _ws(tmp_path / "c", {"r.csv": only_top}),
                             task.truth_dir).results_match
    bad = truth.replace(truth.splitlines()[1].split(",")[3], "lots", 1)
    s = score_results(task.task_id, _ws(tmp_path / "d", {"r.csv": bad}), task.truth_dir)
    assert not s.results_match and any("official rule raises" in p for p in s.problems)


def test_metagenomics_rule_raises_on_non_numeric_as_the_official_scorer():
    """The rule function itself raises, as the official ``_metagenomics_match``; only
    ``score_results`` turns that into a graded failure with a problem line."""
    from icml_bioagent_bench.scoring import metagenomics_match

    truth = [{"OTU": "1", "Phylum": "Pseudomonadota", "JP4D": "5", "JC1A": "5"}]
    with pytest.raises(ValueError):
        metagenomics_match([{"OTU": "1", "Phylum": "Pseudomonadota", "JP4D": "lots",
                             "JC1A": "1"}], truth)
    # empty cells count as 0, as there
    assert not metagenomics_match([{"OTU": "1", "Phylum": "Pseudomonadota", "JP4D": "",
                                    "JC1A": ""}], truth)


def test_unknown_task_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no result scorer"):
        score_results("giab", tmp_path, tmp_path)
